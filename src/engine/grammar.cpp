#include "engine/grammar.h"

#include <fmt/format.h>
#include <xgrammar/xgrammar.h>

#include <cmath>
#include <exception>
#include <limits>
#include <vector>

#include "core/error.h"

namespace rinfer {

namespace {

class XgrammarState final : public TokenConstraintState {
 public:
  XgrammarState(const xgrammar::CompiledGrammar& g, int64_t n_vocab)
      : matcher_(g),
        n_vocab_(n_vocab),
        words_(static_cast<int64_t>(xgrammar::GetBitmaskSize(static_cast<int>(n_vocab)))) {
    tensor_.device = DLDevice{kDLCPU, 0};
    tensor_.ndim = 1;
    tensor_.dtype = xgrammar::GetBitmaskDLType();
    tensor_.shape = &words_;
    tensor_.strides = nullptr;
    tensor_.byte_offset = 0;
  }

  Status fill(std::span<uint32_t> bits) override {
    if (static_cast<int64_t>(bits.size()) != words_) {
      return invalid_argument(
          "the token mask has {} words; the grammar's vocabulary of {} needs {}", bits.size(),
          n_vocab_, words_);
    }
    if (matcher_.IsTerminated()) return internal_error("the grammar has already ended");
    // XGrammar's bitmask is int32 words with the same layout (bit t % 32 of word t / 32).
    tensor_.data = bits.data();
    try {
      matcher_.FillNextTokenBitmask(&tensor_);
    } catch (const std::exception& e) {
      return internal_error("the grammar's token mask failed: {}", e.what());
    }
    return ok_status();
  }

  Status accept(int32_t token) override {
    bool ok = false;
    try {
      ok = matcher_.AcceptToken(token);
    } catch (const std::exception& e) {
      return internal_error("the grammar could not take token {}: {}", token, e.what());
    }
    if (!ok) return internal_error("token {} does not follow the grammar", token);
    return ok_status();
  }

 private:
  xgrammar::GrammarMatcher matcher_;
  int64_t n_vocab_;
  int64_t words_;
  DLTensor tensor_{};
};

class XgrammarConstraint final : public TokenConstraint {
 public:
  XgrammarConstraint(xgrammar::CompiledGrammar g, int64_t n_vocab, std::string what)
      : grammar_(std::move(g)), n_vocab_(n_vocab), what_(std::move(what)) {}
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<XgrammarState>(grammar_, n_vocab_);
  }
  std::string describe() const override { return what_; }

 private:
  xgrammar::CompiledGrammar grammar_;
  int64_t n_vocab_;
  std::string what_;
};

// XGrammar's exception text without its "[hh:mm:ss] /path/file.cc:123: " prefix and trailing
// newlines: what went wrong, in its words.
std::string xgrammar_message(std::string msg) {
  if (msg.starts_with("[")) {
    const size_t stamp = msg.find("] ");
    const size_t where = stamp == std::string::npos ? stamp : msg.find(": ", stamp + 2);
    if (where != std::string::npos) msg.erase(0, where + 2);
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

// An EBNF grammar of the literal `s`.
xgrammar::Grammar literal_grammar(std::string_view s) {
  std::string ebnf = "root ::= \"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      ebnf += '\\';
      ebnf += c;
    } else if (c == '\n') {
      ebnf += "\\n";
    } else {
      ebnf += c;
    }
  }
  ebnf += "\"";
  return xgrammar::Grammar::FromEBNF(ebnf, "root");
}

}  // namespace

struct GrammarCompiler::Impl {
  explicit Impl(const xgrammar::TokenizerInfo& info) : compiler(info, /*max_threads=*/2) {}
  xgrammar::GrammarCompiler compiler;
};

std::string_view grammar_kind_name(GrammarSpec::Kind k) {
  switch (k) {
    case GrammarSpec::Kind::kJsonObject: return "json_object";
    case GrammarSpec::Kind::kJsonSchema: return "json_schema";
    case GrammarSpec::Kind::kEbnf: return "grammar";
  }
  return "?";
}

GrammarCompiler::~GrammarCompiler() = default;

Result<std::unique_ptr<GrammarCompiler>> GrammarCompiler::create(const Tokenizer& tok,
                                                                 int64_t n_vocab) {
  if (n_vocab < tok.vocab_size()) {
    return invalid_argument("the model's {} logits are fewer than the tokenizer's {} tokens",
                            n_vocab, tok.vocab_size());
  }
  std::vector<std::string> vocab(static_cast<size_t>(n_vocab));
  std::vector<int32_t> stop;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_end_of_generation(id)) stop.push_back(id);
    const TokenType t = tok.token_type(id);
    // An empty entry is a special token to XGrammar: never allowed, but for the stop tokens.
    if (tok.is_control(id) || t == TokenType::kUnused) continue;
    vocab[static_cast<size_t>(id)] = std::string(tok.token_text(id));
  }
  if (stop.empty()) return invalid_argument("the tokenizer has no end-of-generation token");
  std::unique_ptr<GrammarCompiler> c(new GrammarCompiler());
  try {
    xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, static_cast<int>(n_vocab), stop);
    c->impl_ = std::make_unique<Impl>(info);
  } catch (const std::exception& e) {
    return internal_error("indexing the vocabulary for grammars failed: {}", e.what());
  }
  c->n_vocab_ = n_vocab;
  return c;
}

Result<std::shared_ptr<const TokenConstraint>> GrammarCompiler::compile(const GrammarSpec& spec) {
  std::string key = std::string(grammar_kind_name(spec.kind)) + '\n' + spec.text;
  if (!spec.prefix.empty() || !spec.suffix.empty() || spec.spaced) {
    key += '\n' + spec.prefix + '\n' + spec.suffix + (spec.spaced ? "\ns" : "\nc");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::optional<xgrammar::CompiledGrammar> g;
  try {
    switch (spec.kind) {
      case GrammarSpec::Kind::kJsonObject:  // any object (OpenAI's json_object), compact
        g = impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                              std::nullopt, std::nullopt, /*strict_mode=*/false);
        break;
      case GrammarSpec::Kind::kJsonSchema: {
        std::optional<std::pair<std::string, std::string>> separators;
        if (spec.spaced) separators = std::pair<std::string, std::string>(", ", ": ");
        if (spec.prefix.empty() && spec.suffix.empty()) {
          g = impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt,
                                                separators);
          break;
        }
        std::vector<xgrammar::Grammar> parts;
        if (!spec.prefix.empty()) parts.push_back(literal_grammar(spec.prefix));
        parts.push_back(xgrammar::Grammar::FromJSONSchema(spec.text, /*any_whitespace=*/false,
                                                          std::nullopt, separators));
        if (!spec.suffix.empty()) parts.push_back(literal_grammar(spec.suffix));
        g = impl_->compiler.CompileGrammar(xgrammar::Grammar::Concat(parts));
        break;
      }
      case GrammarSpec::Kind::kEbnf:
        g = impl_->compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(spec.text, "root"));
        break;
    }
  } catch (const std::exception& e) {
    const std::string msg = xgrammar_message(e.what());
    return invalid_argument("{}: {}",
                            spec.kind == GrammarSpec::Kind::kEbnf ? "the grammar does not parse"
                                                                  : "the JSON schema is not usable",
                            msg);
  }
  auto c = std::make_shared<XgrammarConstraint>(std::move(*g), n_vocab_,
                                                std::string(grammar_kind_name(spec.kind)));
  if (cache_.size() >= kCacheEntries) cache_.erase(cache_.begin());
  cache_.emplace(std::move(key), c);
  return std::shared_ptr<const TokenConstraint>(std::move(c));
}

}  // namespace rinfer
