// strategies.batching: serve many requests per forward pass. Continuous batching admits a
// waiting request as soon as a seat and KV blocks are free and gives each step a token budget
// filled with running decodes first, then chunks of waiting prompts; static batching (the
// baseline) starts a batch together and admits the next only when its last request finishes.
// Hooks: EngineCoreOptions::scheduler (engine/scheduler.h), EngineCoreOptions::swap_blocks.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr const char* kKeys[] = {"policy",          "max_seqs",   "max_batched_tokens",
                                 "chunked_prefill", "preemption", "swap_blocks",
                                 "watermark",       "priority"};

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys({"policy", "max_seqs", "max_batched_tokens", "chunked_prefill", "preemption",
                    "swap_blocks", "watermark", "priority"}));
  BatchingConfig& b = s.batching;
  RINFER_ASSIGN_OR_RETURN(auto policy, m.get_enum("policy", {"static", "continuous"}));
  if (policy) b.policy = *policy == 0 ? BatchingPolicy::kStatic : BatchingPolicy::kContinuous;
  RINFER_ASSIGN_OR_RETURN(auto seqs, m.get_int("max_seqs", 1, 4096));
  if (seqs) b.max_seqs = *seqs;
  RINFER_ASSIGN_OR_RETURN(auto tokens, m.get_int("max_batched_tokens", 1, 65536));
  if (tokens) b.max_batched_tokens = *tokens;
  RINFER_ASSIGN_OR_RETURN(auto chunked, m.get_bool("chunked_prefill"));
  if (chunked) b.chunked_prefill = *chunked;
  RINFER_ASSIGN_OR_RETURN(auto pre, m.get_enum("preemption", {"recompute", "swap"}));
  if (pre) b.preemption = *pre == 0 ? PreemptionMode::kRecompute : PreemptionMode::kSwap;
  RINFER_ASSIGN_OR_RETURN(auto swap, m.get_int("swap_blocks", 0, int64_t{1} << 24));
  if (swap) b.swap_blocks = *swap;
  RINFER_ASSIGN_OR_RETURN(auto wm, m.get_number("watermark", NumberRange{0.0, 0.5}));
  if (wm) b.watermark = *wm;
  RINFER_ASSIGN_OR_RETURN(auto prio, m.get_bool("priority"));
  if (prio) b.priority = *prio;
  for (const char* k : kKeys) note_origin(m, k, s);
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device&) {
  const BatchingConfig& b = s.batching;
  if (b.max_seqs > b.max_batched_tokens) {
    return key_conflict(s.origins, "strategies.batching.max_seqs",
                        "strategies.batching.max_batched_tokens",
                        fmt::format("{} seats need at least {} tokens per step (one decode token "
                                    "each), but a step holds {}",
                                    b.max_seqs, b.max_seqs, b.max_batched_tokens));
  }
  if (b.swap_blocks > 0 && s.kv_layout == kv::Layout::kContiguous) {
    return key_conflict(s.origins, "strategies.batching.swap_blocks", "strategies.kv_cache.layout",
                        "swapping moves KV blocks; the contiguous layout has one block per seat "
                        "and never preempts");
  }
  return ok_status();
}

std::string describe(const StrategyConfig& s, const Device&) {
  const BatchingConfig& b = s.batching;
  const BatchingConfig d;
  if (b.policy == d.policy && b.max_seqs == d.max_seqs &&
      b.max_batched_tokens == d.max_batched_tokens && b.chunked_prefill == d.chunked_prefill &&
      b.preemption == d.preemption && b.swap_blocks == d.swap_blocks &&
      b.watermark == d.watermark && b.priority == d.priority) {
    return "";  // the defaults go unsaid
  }
  std::string out = fmt::format("batching {} ({} seats, {} tokens/step",
                                batching_policy_name(b.policy), b.max_seqs, b.max_batched_tokens);
  if (!b.chunked_prefill) out += ", whole prompts";
  if (b.preemption == PreemptionMode::kSwap) out += fmt::format(", swap {} blocks", b.swap_blocks);
  if (b.priority) out += ", by priority";
  return out + ")";
}

}  // namespace

std::string_view batching_policy_name(BatchingPolicy p) {
  return p == BatchingPolicy::kStatic ? "static" : "continuous";
}

std::string_view preemption_mode_name(PreemptionMode m) {
  return m == PreemptionMode::kSwap ? "swap" : "recompute";
}

const StrategyInfo& batching_strategy() {
  static const StrategyInfo info{
      "batching",
      "serve many requests per forward pass: continuous batching with chunked prefill and "
      "preemption, or static batches",
      {{"policy", "static | continuous", "continuous",
        "static: a batch starts together and the next one waits for its last request"},
       {"max_seqs", "int in [1, 4096]", "16", "requests per step (seats)"},
       {"max_batched_tokens", "int in [1, 65536]", "512",
        "tokens per step: the running decodes, then chunks of waiting prompts"},
       {"chunked_prefill", "bool", "true", "false: a prompt is admitted only whole"},
       {"preemption", "recompute | swap", "recompute",
        "when KV blocks run out: free the newest request's blocks and recompute it later, or "
        "copy them to host memory"},
       {"swap_blocks", "int in [0, 16777216]", "0",
        "host blocks per layer group for swapping; 0 with preemption swap: as many as the "
        "device pool"},
       {"watermark", "number in [0, 0.5]", "0.01",
        "fraction of the KV pool kept free when admitting a request"},
       {"priority", "bool", "false", "true: requests with a lower priority value run first"}},
      "{policy: static}",
      "EngineCoreOptions::scheduler, EngineCoreOptions::swap_blocks",
      "cpu, cuda",
      "docs/strategies/batching.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
