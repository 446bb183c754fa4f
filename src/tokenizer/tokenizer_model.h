// Internals shared by the tokenizer's parts: the vocabulary and the model interface that the
// byte-level BPE (bpe.cpp) and SentencePiece BPE (spm.cpp) algorithms implement.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rinfer/status.h"
#include "tokenizer/hash_maps.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {

class PreTokenizer;

struct Vocab {
  std::vector<std::string> pieces;  // as stored in the model file
  std::vector<std::string> text;    // the bytes each token decodes to
  std::vector<float> scores;        // empty when the model has none
  std::vector<TokenType> types;
  StringIdMap piece_ids;  // piece -> id (the first id wins on duplicates)

  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SentencePiece dummy prefix

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  TokenType type(int32_t id) const { return types[id]; }
  void index_pieces() {
    piece_ids.reset(&pieces, pieces.size());
    for (int32_t i = 0; i < size(); ++i) piece_ids.insert(i);
  }
};

class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  // Appends the ids of `text`, a fragment with no special tokens in it. `starts_text`: the fragment
  // begins the input or follows a special token (where SentencePiece adds its dummy prefix).
  virtual Status encode_fragment(std::string_view text, bool starts_text,
                                 std::vector<int32_t>& out) const = 0;
};

// Byte-level BPE. `merges` are pairs of byte-level pieces in rank order. A byte without a token in
// the vocabulary becomes `missing_byte`, or is dropped when that is -1 (what Hugging Face
// tokenizers does without an unk_token, and llama.cpp always does). Fills vocab.text.
Result<std::unique_ptr<TokenizerModel>> make_bpe_model(
    Vocab& vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
    std::unique_ptr<PreTokenizer> pre, bool ignore_merges, int32_t missing_byte);

// SentencePiece BPE over vocab.scores. Fills vocab.text.
Result<std::unique_ptr<TokenizerModel>> make_spm_model(Vocab& vocab);

// Everything but the model: special-token tables, EOG ids. Used by from_gguf / from_hf_json.
struct TokenizerBuilder {
  static Result<std::unique_ptr<Tokenizer>> build(TokenizerKind kind, std::string pre_name,
                                                  std::unique_ptr<Vocab> vocab,
                                                  std::unique_ptr<TokenizerModel> model);
};

}  // namespace rinfer
