#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace rinfer {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kDigitPattern = R"(\p{N})";

namespace {

std::string pcre_error_text(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: a JIT stack large enough for long runs and match data with room for
// 16 capture pairs (our patterns have none; a tokenizer.json pattern may have a few).
struct MatchState {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_match_data* md = nullptr;
  MatchState() {
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    md = pcre2_match_data_create(16, nullptr);
    if (stack != nullptr && ctx != nullptr) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& thread_match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

PcreRegex::~PcreRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Result<std::unique_ptr<PcreRegex>> PcreRegex::compile(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument("pre-tokenizer regex '{}': {} at offset {}", pattern,
                            pcre_error_text(err), err_offset);
  }
  // JIT is an optimization: the interpreter gives the same results when it is unavailable.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<PcreRegex> re(new PcreRegex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  return re;
}

Status PcreRegex::split(std::string_view text, size_t base,
                        std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& state = thread_match_state();
  if (state.md == nullptr || state.ctx == nullptr) return out_of_memory("pcre2 match data");
  pcre2_match_data* md = state.md;
  pcre2_match_context* ctx = state.ctx;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  Status status;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, 0, md, ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status =
          internal_error("pre-tokenizer regex failed at byte {}: {}", pos, pcre_error_text(rc));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end <= begin) {  // an empty match (none of our patterns has one): step over a char
      end = begin + 1;
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
      if (begin > pos) out.emplace_back(base + pos, base + begin);
      out.emplace_back(base + begin, base + end);
      pos = end;
      continue;
    }
    if (begin > pos) out.emplace_back(base + pos, base + begin);
    out.emplace_back(base + begin, base + end);
    pos = end;
  }
  if (status.ok() && pos < text.size()) out.emplace_back(base + pos, base + text.size());
  return status;
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::from_patterns(
    std::string name, const std::vector<std::string>& patterns) {
  auto pre = std::make_unique<PreTokenizer>();
  pre->name_ = std::move(name);
  for (const auto& p : patterns) {
    RINFER_ASSIGN_OR_RETURN(auto re, PcreRegex::compile(p));
    pre->stages_.push_back(std::move(re));
  }
  return pre;
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::from_name(std::string_view name) {
  // The groups follow llama.cpp's llama-vocab.cpp (which names each model's pre-tokenizer) and
  // the Hugging Face tokenizer.json files the names come from.
  if (name == "gpt2" || name == "mpt" || name == "olmo" || name == "jais" || name == "trillion") {
    return from_patterns("gpt2", {kGpt2Pattern});
  }
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
      name == "codeshell" || name == "exaone" || name == "minerva") {
    return from_patterns("smollm", {kDigitPattern, kGpt2Pattern});
  }
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "falcon3" ||
      name == "pixtral") {
    return from_patterns("llama-bpe", {kLlama3Pattern});
  }
  if (name == "qwen2" || name == "stablelm2" || name == "hunyuan" || name == "deepseek-r1-qwen") {
    return from_patterns("qwen2", {kQwen2Pattern});
  }
  return unsupported(
      "pre-tokenizer '{}' is not supported (known: gpt2, smollm, llama-bpe, qwen2 and their "
      "aliases)",
      name);
}

Status PreTokenizer::split(std::string_view text,
                           std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  if (text.empty()) return ok_status();
  out.emplace_back(0, text.size());
  std::vector<std::pair<size_t, size_t>> next;
  for (const auto& stage : stages_) {
    next.clear();
    next.reserve(out.size() + text.size() / 4);
    for (const auto& [b, e] : out) {
      RINFER_RETURN_IF_ERROR(stage->split(text.substr(b, e - b), b, next));
    }
    out.swap(next);
  }
  return ok_status();
}

}  // namespace rinfer
