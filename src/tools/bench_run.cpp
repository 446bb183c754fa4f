#include "tools/bench_run.h"

namespace rinfer {

SamplingParams bench_sampling() {
  SamplingParams sp;
  sp.temperature = 0;
  sp.repeat_penalty = 1;
  sp.repeat_last_n = 0;
  return sp;
}

Result<RequestStats> bench_core_run(EngineCore& core, const std::vector<int32_t>& prompt,
                                    int64_t max_tokens, const std::function<void()>& on_token) {
  core.clear_prefix_cache();
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.sampling = bench_sampling();
  p.on_event = [&](const RequestEvent& ev) {
    for (size_t i = 0; i < ev.tokens.size(); ++i) on_token();
  };
  RINFER_ASSIGN_OR_RETURN(const RequestOutcome out, run_request(core, std::move(p)));
  return out.stats;
}

}  // namespace rinfer
