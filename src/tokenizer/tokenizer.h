// Tokenizers built from a GGUF file's metadata or a Hugging Face tokenizer.json.
//
// Two algorithms, chosen by the model file (never by the model's name):
//   * byte-level BPE (GGUF `tokenizer.ggml.model` = "gpt2"; tokenizer.json with a ByteLevel
//     pre-tokenizer): the text is split by the pre-tokenizer that `tokenizer.ggml.pre` names
//     (smollm, llama-bpe, qwen2, gpt2, ...; see pretokenizer.h), each piece's bytes are mapped to
//     GPT-2's byte alphabet and merged by merge rank (lowest first, leftmost on ties).
//   * SentencePiece BPE ("llama": Llama-2, Gemma): spaces become U+2581 '▁', an optional dummy
//     prefix space is added, user-defined pieces are matched first, then adjacent pieces are merged
//     by vocabulary score (highest first, leftmost on ties); characters without a piece fall back
//     to <0xNN> byte tokens (or the unknown token when the vocabulary has no byte tokens).
//
// Special tokens: control tokens (<|im_start|>, <start_of_turn>, <bos>, ...) in the text are
// parsed as single tokens when EncodeOptions::parse_special is set (leftmost, then longest match)
// and are plain text otherwise. User-defined tokens are always matched (as in SentencePiece and
// llama.cpp).
//
// Invalid UTF-8 and NUL bytes (the input is bytes; nothing is rejected):
//   * byte-level BPE is lossless on any bytes: an ill-formed byte sequence never matches a
//     pre-tokenizer regex, so each run of such bytes is a piece of its own, encoded through the
//     byte alphabet; decode(encode(s)) == s for every byte string s, except that a byte with no
//     token in the vocabulary is dropped (as Hugging Face tokenizers without an unk_token and
//     llama.cpp do; SmolLM2 lacks 21 of the 256 byte tokens, e.g. 0x04 and 0xF5-0xFF).
//   * SentencePiece: each ill-formed byte is a symbol of its own that never merges and is emitted
//     as its <0xNN> byte token (the unknown token without byte tokens), so with byte fallback
//     decode(encode(s)) == s too, except that a literal U+2581 decodes to a space. (The
//     sentencepiece library instead replaces ill-formed bytes by U+FFFD.)
//   * NUL is an ordinary character (U+0000) for both.
//
// A Tokenizer is immutable after loading; encode/decode are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

class GgufFile;
class TokenTrie;
class TokenizerModel;
struct Vocab;

// GGUF token types (llama.cpp's LLAMA_TOKEN_TYPE_*, SentencePiece's piece types).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerKind : uint8_t { kByteLevelBpe, kSentencePiece };

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

struct EncodeOptions {
  // Add BOS / EOS as the model's flags say (tokenizer.ggml.add_bos_token / add_eos_token).
  bool add_special = true;
  // Parse control-token text ("<|im_start|>") as the token; otherwise it is plain text.
  bool parse_special = true;
  // Ranges of the text (sorted, not overlapping) where control-token text stays plain text:
  // the user's content inside a chat template's markup. A control token is parsed only where
  // its whole match lies outside every range. Inside them, the always-matched user-defined
  // tokens still are, except end-of-generation tokens and those spelled like `markers` (a
  // template's turn markers, for models that store them as user-defined tokens).
  std::span<const TextRange> plain_ranges = {};
  std::span<const std::string_view> markers = {};
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // From `tokenizer.ggml.*` metadata. Errors name the file and the key.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
  // From a tokenizer.json (BPE models: byte-level, or SentencePiece-style with byte fallback).
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(const std::string& path);
  // A GGUF file, a tokenizer.json, or a directory holding tokenizer.json.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& model_path);

  Result<std::vector<int32_t>> encode(std::string_view text,
                                      const EncodeOptions& options = {}) const;
  // The bytes the ids stand for. Control tokens decode to their text unless skip_special. An id
  // outside [0, vocab_size) is an error naming the id and its position. SentencePiece models with
  // a dummy prefix drop the space it added at the start.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The vocabulary string of a token as stored in the model ("Ġthe", "▁the", "<0x0A>"); empty
  // for an id out of range.
  std::string_view piece(int32_t id) const;
  // The bytes a token decodes to (" the", "\n"); empty for an id out of range.
  std::string_view token_text(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view piece) const;

  int32_t vocab_size() const;
  int32_t bos() const;  // -1 when absent
  int32_t eos() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;
  bool add_eos() const;
  // SentencePiece models that prefix the text with a space (decode drops it again).
  bool add_space_prefix() const;
  TokenType token_type(int32_t id) const;  // kUndefined out of range
  bool is_control(int32_t id) const;       // control or unknown-type token
  // EOS, EOT/EOM ids and the usual end-of-turn tokens: <|im_end|>, <end_of_turn>, <|eot_id|>,
  // <|endoftext|>, <|end|>, ...
  bool is_end_of_generation(int32_t id) const;

  TokenizerKind kind() const { return kind_; }
  // "byte-level BPE (smollm)", "SentencePiece BPE".
  std::string describe() const;
  // The pre-tokenizer name for byte-level BPE ("smollm"), empty for SentencePiece.
  std::string pre_tokenizer() const;

 private:
  friend struct TokenizerBuilder;
  Tokenizer();

  Status check_ids(std::span<const int32_t> ids) const;
  // The model's encoding of text between special tokens, NFC-normalized first where the
  // tokenizer normalizes (Qwen2's tokenizer.json: NFC before its pre-tokenizer).
  Status encode_fragment(std::string_view frag, bool& starts_text, std::vector<int32_t>& out) const;

  TokenizerKind kind_ = TokenizerKind::kByteLevelBpe;
  std::string pre_name_;
  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<TokenizerModel> model_;
  // Tokens matched in the text before the model runs (leftmost, then longest).
  std::unique_ptr<TokenTrie> specials_;
  std::vector<bool> special_always_;  // by id: matched even without parse_special
  bool has_always_ = false;
  bool nfc_ = false;
  std::vector<int32_t> eog_ids_;
};

}  // namespace rinfer
