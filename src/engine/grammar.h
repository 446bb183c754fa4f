// Structured output through XGrammar (its C++ core, built by scripts/install-xgrammar.sh): a
// model's vocabulary indexed once (which bytes each token stands for, which tokens end a reply),
// then grammars compiled against it into TokenConstraints (engine/token_constraint.h) that the
// engine core applies to each sampled row: JSON of any shape (json_object), JSON that validates
// against a JSON schema (json_schema), or an EBNF grammar (GBNF-style, root rule `root`).
//
// JSON is generated compact (no free whitespace between tokens: a model cannot loop on spaces),
// strict (no properties or items the schema does not name). XGrammar precomputes, per grammar
// state, which tokens are always or never allowed, so a step's mask is cheap.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/token_constraint.h"
#include "rinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {

struct GrammarSpec {
  enum class Kind { kJsonObject, kJsonSchema, kEbnf };
  GrammarSpec() = default;
  GrammarSpec(Kind k, std::string t = {}) : kind(k), text(std::move(t)) {}

  Kind kind = Kind::kJsonObject;
  std::string text;  // the schema (JSON) or the grammar (EBNF); empty for kJsonObject
  // kJsonSchema: literal text before and after the JSON (a tool call's "<tool_call>\n" ...
  // "\n</tool_call>"), and spaced JSON (", " and ": ", as Python's json.dumps writes it and
  // tool-calling models were trained on) instead of compact.
  std::string prefix, suffix;
  bool spaced = false;
};
std::string_view grammar_kind_name(GrammarSpec::Kind k);

class GrammarCompiler {
 public:
  // Indexes the vocabulary of `tok` for rows of n_vocab logits (>= tok.vocab_size(); the ids
  // past the tokenizer's are never allowed). Control and unused tokens are never allowed except
  // the end-of-generation ones, which end a reply once the grammar is complete.
  static Result<std::unique_ptr<GrammarCompiler>> create(const Tokenizer& tok, int64_t n_vocab);
  ~GrammarCompiler();

  // Compiles a grammar (an invalid schema or grammar is kInvalidArgument with XGrammar's
  // message). Compiled grammars are cached by kind and text (at most kCacheEntries). Thread-safe.
  Result<std::shared_ptr<const TokenConstraint>> compile(const GrammarSpec& spec);
  static constexpr size_t kCacheEntries = 64;

  int64_t n_vocab() const { return n_vocab_; }

 private:
  GrammarCompiler() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t n_vocab_ = 0;
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const TokenConstraint>> cache_;
};

}  // namespace rinfer
