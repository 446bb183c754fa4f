#include "engine/request.h"

#include <fmt/format.h>

namespace rinfer {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEndOfGeneration: return "end of generation";
    case FinishReason::kStopString: return "stop string";
    case FinishReason::kMaxTokens: return "max tokens";
    case FinishReason::kContextFull: return "context full";
    case FinishReason::kAborted: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

double prefill_tps(const RequestStats& s) {
  return s.ttft_ms > 0 ? 1e3 * static_cast<double>(s.prompt_tokens - s.cached_tokens) / s.ttft_ms
                       : 0;
}

double decode_tps(const RequestStats& s) {
  const double ms = s.total_ms - s.ttft_ms;
  return s.generated_tokens > 1 && ms > 0
             ? 1e3 * static_cast<double>(s.generated_tokens - 1) / ms
             : 0;
}

std::string stats_text(const RequestStats& s) {
  std::string t = fmt::format("prompt {} tokens", s.prompt_tokens - s.cached_tokens);
  if (s.cached_tokens > 0) t += fmt::format(" (+{} cached)", s.cached_tokens);
  t += fmt::format(" {:.1f} tok/s | generated {} tokens {:.1f} tok/s | first token {:.0f} ms",
                   prefill_tps(s), s.generated_tokens, decode_tps(s), s.ttft_ms);
  return t;
}

}  // namespace rinfer
