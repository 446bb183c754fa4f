// The WordPiece tokenizer of BERT-family encoders, read from a Hugging Face tokenizer.json:
//   1. special tokens (added_tokens marked special: [CLS], [SEP], [MASK], ...) written in the
//      text are matched first, as themselves (leftmost, then longest), as `tokenizers` does;
//   2. the BertNormalizer and BertPreTokenizer of tokenizer/bert_normalizer.h;
//   3. WordPiece: each word is split greedily into the longest vocabulary pieces from its start,
//      later pieces with the continuing prefix ("##"); a word with a part that matches nothing,
//      or longer than max_input_chars_per_word characters, is the unknown token as a whole;
//   4. truncation to max_length tokens, the special tokens included (pairs: longest first, the
//      rule of `tokenizers`), then the post-processor: [CLS] A [SEP] for one text,
//      [CLS] A [SEP] B [SEP] for a pair, whose B part and last [SEP] have token type 1.
// Supported tokenizer.json forms: model WordPiece; normalizer BertNormalizer or none;
// pre_tokenizer BertPreTokenizer; post_processor TemplateProcessing of that shape, or
// BertProcessing. Anything else is refused with an error that names it. Invalid UTF-8 in a text
// is an error naming the byte. Immutable after loading; encode is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rinfer/status.h"
#include "tokenizer/bert_normalizer.h"

namespace rinfer {

struct TokenEncoding {
  std::vector<int32_t> ids;       // [n]
  std::vector<int32_t> type_ids;  // [n]: 0 for the first text, 1 for the second of a pair
  bool truncated = false;         // tokens were cut to fit max_length
};

class WordPieceTokenizer {
 public:
  // From a tokenizer.json file, or a directory holding one.
  static Result<std::unique_ptr<WordPieceTokenizer>> load(const std::string& path);
  // From tokenizer.json's text; `name` stands for the file in errors.
  static Result<std::unique_ptr<WordPieceTokenizer>> parse(const std::string& text,
                                                           const std::string& name);

  // max_length: tokens at most, [CLS] and [SEP] included (>= 2; pairs >= 3).
  Result<TokenEncoding> encode(std::string_view text, int64_t max_length) const;
  Result<TokenEncoding> encode_pair(std::string_view a, std::string_view b,
                                    int64_t max_length) const;
  // The word pieces of a text, without special tokens or truncation.
  Result<std::vector<int32_t>> encode_pieces(std::string_view text) const;

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t cls() const { return cls_; }
  int32_t sep() const { return sep_; }
  int32_t pad() const { return pad_; }
  int32_t unk() const { return unk_; }
  std::string_view piece(int32_t id) const;  // empty out of range
  // Text from ids, as Hugging Face's WordPiece decoder gives it: pieces joined by spaces, a
  // continuation piece ("##ing") glued to the one before, then the tokenization spaces cleaned
  // (" ." -> ".", " n't" -> "n't", ...). skip_special leaves out [CLS], [SEP], [PAD] and the
  // other special tokens. An id outside the vocabulary is an error naming it.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special) const;
  std::string describe() const;              // "WordPiece, 30522 pieces, lowercase"

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  WordPieceTokenizer() = default;
  void encode_word(std::string_view word, std::vector<int32_t>& out, std::string& buf) const;
  Status encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  int32_t find(std::string_view piece) const;

  std::vector<std::string> pieces_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // matched in the raw text
  BertNormalizerOptions norm_;
  bool normalize_ = true;
  std::string prefix_ = "##";
  int64_t max_word_chars_ = 100;
  int32_t cls_ = -1, sep_ = -1, pad_ = -1, unk_ = -1;
};

}  // namespace rinfer
