// Pre-tokenizers for byte-level BPE: split text into the pieces ("words") that BPE merges
// within, with PCRE2 regexes (8-bit API, UTF + UCP, JIT).
//
// A pre-tokenizer is a sequence of stages; each stage splits every piece from the previous
// stage on its own (the Hugging Face `Sequence` semantics). A stage's regex matches become
// pieces, and so does every gap between matches ("Isolated" behaviour).
//
// Invalid UTF-8: the regexes are compiled with PCRE2_MATCH_INVALID_UTF, so an ill-formed byte
// never matches anything; a run of such bytes becomes a gap, i.e. a piece of its own, and the
// valid text around it is split as usual (it is as if the bytes were a character of no class).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

// A regex compiled once (thread-safe to share; each split() call allocates its own match data).
class PcreRegex {
 public:
  ~PcreRegex();
  PcreRegex(const PcreRegex&) = delete;
  PcreRegex& operator=(const PcreRegex&) = delete;

  static Result<std::unique_ptr<PcreRegex>> compile(std::string_view pattern);
  const std::string& pattern() const { return pattern_; }

  // Appends the pieces of `text` (matches and the gaps between them, in order, never empty) as
  // [begin, end) offsets relative to `base`.
  Status split(std::string_view text, size_t base,
               std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  PcreRegex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// The known pre-tokenizers by their GGUF `tokenizer.ggml.pre` name.
//   gpt2       GPT-2's ByteLevel regex ('s|'t|...| ?\p{L}+| ?\p{N}+|...|\s+(?!\S)|\s+)
//   smollm     each digit isolated (\p{N}), then the GPT-2 regex (SmolLM, StarCoder, Refact...)
//   llama-bpe  Llama-3's regex (case-insensitive contractions, \p{N}{1,3}, ...)
//   qwen2      Qwen2's regex (like Llama-3 but single digits)
class PreTokenizer {
 public:
  // By GGUF name (aliases: llama3 -> llama-bpe, starcoder/refact/... -> smollm, ...).
  static Result<std::unique_ptr<PreTokenizer>> from_name(std::string_view name);
  // An explicit sequence of regexes, e.g. from a tokenizer.json.
  static Result<std::unique_ptr<PreTokenizer>> from_patterns(
      std::string name, const std::vector<std::string>& patterns);

  // Canonical name ("smollm", "llama-bpe", ... or "custom").
  const std::string& name() const { return name_; }
  size_t n_stages() const { return stages_.size(); }

  // Splits `text` into pieces as [begin, end) byte offsets; their concatenation is `text`.
  Status split(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string name_;
  std::vector<std::unique_ptr<PcreRegex>> stages_;
};

// The regexes themselves (for tests and documentation).
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;
extern const char* const kDigitPattern;

}  // namespace rinfer
