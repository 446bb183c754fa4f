// llm_cuda_bench --profile: decode steps or a prefill of one shape and format through the engine
// core between cudaProfilerStart/Stop, for Nsight Systems and Compute
// (scripts/device/nsys_trace.sh, profile.sh).
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "engine/engine_core.h"
#include "llm_cuda_bench.h"
#include "models/llama/cuda/llama_cuda_model.h"

namespace rinfer::bench {

namespace {

// A prompt_len-token prompt's request through the engine core (greedy, steps queued ahead) whose
// `steps` decode steps after its first 65 tokens run between cudaProfilerStart/Stop.
int profile_core_decode(EngineCore& core, int steps, int64_t prompt_len) {
  RequestParams p;
  p.prompt = synthetic_tokens(prompt_len, core.model().hparams().n_vocab);
  p.max_tokens = 65 + steps;
  p.ignore_eos = true;
  p.sampling.temperature = 0.0f;
  p.sampling.repeat_penalty = 1.0f;
  int64_t got = 0;
  std::vector<double> warm;
  auto t_prev = Clock::now();
  p.on_event = [&](const RequestEvent& ev) {
    got += static_cast<int64_t>(ev.tokens.size());
    const auto now = Clock::now();
    if (got > 1 && got <= 65) warm.push_back(seconds_since(t_prev) * 1e3);
    t_prev = now;
    if (got == 65) cudaProfilerStart();
  };
  auto out = run_request(core, std::move(p));
  cudaProfilerStop();
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  std::printf("profile engine core: median decode step %.4f ms over 64 warm steps (queued ahead)\n",
              bench::median(warm));
  return 0;
}

// N prompt tokens scored through the engine core (one pass, the last row's logits) after a
// warm-up pass, the second between cudaProfilerStart/Stop.
int profile_core_prefill(EngineCore& core, int64_t n) {
  const std::vector<int32_t> tokens = synthetic_tokens(n, core.model().hparams().n_vocab);
  const auto none = [](int64_t, std::span<const float>) { return ok_status(); };
  for (int rep = 0; rep < 2; ++rep) {
    if (rep == 1) cudaProfilerStart();
    const auto t0 = Clock::now();
    const Status st = core.score(tokens, n - 1, 0, none);
    const double ms = seconds_since(t0) * 1e3;
    if (rep == 1) cudaProfilerStop();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    std::printf("profile engine core: prefill of %lld tokens %.3f ms%s\n",
                static_cast<long long>(n), ms, rep == 0 ? " (warm-up)" : "");
  }
  return 0;
}

}  // namespace

int profile_decode(const DecoderHParams& hp, DType t, int steps, int prefill, int skip,
                   int64_t n_ctx, const cuda::KernelConfig& kernels) {
  LoadOptions o;
  o.device = Device::cuda(0);
  o.cuda.kernels = kernels;
  auto m = llama::make_random_cuda_model(hp, t, 1234, o);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    return 1;
  }
  // One seat; a step budget of the prefill, or of 2048 tokens for the decode's prompt.
  EngineCoreOptions eo;
  eo.n_ctx = std::max<int64_t>(n_ctx, prefill);
  eo.scheduler.max_seqs = 1;
  eo.scheduler.max_batched_tokens = prefill > 0 ? prefill : 2048;
  auto core = EngineCore::create(**m, eo, nullptr);
  if (!core.ok()) {
    std::fprintf(stderr, "%s\n", core.status().to_string().c_str());
    return 1;
  }
  if (prefill > 0) return profile_core_prefill(**core, prefill);
  return profile_core_decode(**core, steps, 128 + skip);
}

}  // namespace rinfer::bench
