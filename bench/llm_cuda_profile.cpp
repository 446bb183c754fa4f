// llm_cuda_bench --profile: decode steps or a prefill of one shape and format between
// cudaProfilerStart/Stop, for Nsight Systems and Compute (scripts/device/nsys_trace.sh,
// profile.sh); through the model's single-sequence forward or the engine core.
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

// n greedy decode steps through decode_on_device from position p0 (the cache holds tokens[0,
// p0); tokens[p0] is fed first): each token taken on the device, the next step queued before
// the host reads it. `ms` (when given) receives the intervals between the host's tokens.
Status greedy_on_device(DecoderModel& model, KvCache& cache, std::span<const int32_t> tokens,
                        int64_t p0, int64_t n, std::vector<double>* ms) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.repeat_penalty = 1.0f;
  DeviceDecode dd;
  dd.sampling = &greedy;
  dd.history = tokens.first(static_cast<size_t>(p0 + 1));
  int64_t got = 0;
  auto t_prev = Clock::now();
  dd.on_token = [&](int32_t) {
    const auto now = Clock::now();
    if (ms != nullptr)
      ms->push_back(std::chrono::duration<double, std::milli>(now - t_prev).count());
    t_prev = now;
    return ++got < n;
  };
  return model.decode_on_device(cache, dd).status();
}

namespace {

// --profile: decode steps of one shape and format between cudaProfilerStart/Stop.
// --profile --engine-core: a 128-token prompt's request through the engine core (greedy, steps
// queued ahead) whose decode steps after its first `64 + steps` tokens run between
// cudaProfilerStart/Stop.
int profile_core_decode(DecoderModel& model, int steps, int64_t n_ctx) {
  EngineCoreOptions eo;
  eo.n_ctx = n_ctx;
  eo.scheduler.max_seqs = 1;
  eo.scheduler.max_batched_tokens = 2048;
  auto core = EngineCore::create(model, eo, nullptr);
  if (!core.ok()) {
    std::fprintf(stderr, "%s\n", core.status().to_string().c_str());
    return 1;
  }
  std::vector<int32_t> prompt(128);
  for (size_t i = 0; i < prompt.size(); ++i) {
    prompt[i] =
        static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(model.hparams().n_vocab));
  }
  RequestParams p;
  p.prompt = prompt;
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
  auto out = run_request(**core, std::move(p));
  cudaProfilerStop();
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  std::printf("profile engine core: median decode step %.4f ms over 64 warm steps (queued ahead)\n",
              bench::median(warm));
  return 0;
}

// --profile --engine-core --prefill N: N prompt tokens scored through the engine core (one pass,
// the last row's logits) after a warm-up pass, the second between cudaProfilerStart/Stop.
int profile_core_prefill(DecoderModel& model, int64_t n, int64_t n_ctx) {
  EngineCoreOptions eo;
  eo.n_ctx = std::max(n_ctx, n);
  eo.scheduler.max_seqs = 1;
  eo.scheduler.max_batched_tokens = n;
  auto core = EngineCore::create(model, eo, nullptr);
  if (!core.ok()) {
    std::fprintf(stderr, "%s\n", core.status().to_string().c_str());
    return 1;
  }
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] =
        static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(model.hparams().n_vocab));
  }
  const auto none = [](int64_t, std::span<const float>) { return ok_status(); };
  for (int rep = 0; rep < 2; ++rep) {
    if (rep == 1) cudaProfilerStart();
    const auto t0 = Clock::now();
    const Status st = (*core)->score(tokens, n - 1, 0, none);
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
                   bool device_sampling, int64_t n_ctx, const cuda::KernelConfig& kernels,
                   bool engine_core) {
  LoadOptions o;
  o.device = Device::cuda(0);
  o.cuda.kernels = kernels;
  o.max_batch = 2048;
  auto m = llama::make_random_cuda_model(hp, t, 1234, o);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    return 1;
  }
  DecoderModel& model = **m;
  if (engine_core && prefill > 0) return profile_core_prefill(model, prefill, n_ctx);
  if (engine_core) return profile_core_decode(model, steps, n_ctx);
  auto cache = model.create_cache(n_ctx);
  if (!cache.ok()) return 1;
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  std::vector<int32_t> tokens(4096), pos(4096);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(hp.n_vocab));
    pos[i] = static_cast<int32_t>(i);
  }
  const int32_t row = 127, last = 0;
  DecoderBatch b{std::span(tokens).first(128), std::span(pos).first(128), std::span(&row, 1)};
  if (Status st = model.infer(b, *cache, logits.data()); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  auto step = [&](int64_t p) {
    DecoderBatch d{std::span(tokens).subspan(static_cast<size_t>(p), 1),
                   std::span(pos).subspan(static_cast<size_t>(p), 1), std::span(&last, 1)};
    return model.infer(d, *cache, logits.data());
  };
  if (prefill > 0) {
    // One forward of `prefill` tokens into an empty cache (a warm-up first), logits of the last.
    const int32_t lrow = prefill - 1;
    const size_t np = static_cast<size_t>(prefill);
    DecoderBatch pb{std::span(tokens).first(np), std::span(pos).first(np), std::span(&lrow, 1)};
    auto c2 = model.create_cache(4096);
    if (!c2.ok()) return 1;
    const auto t0 = Clock::now();
    if (Status st = model.infer(pb, *c2, logits.data()); !st.ok()) return 1;
    auto c3 = model.create_cache(4096);
    if (!c3.ok()) return 1;
    const double warm_ms = seconds_since(t0) * 1e3;
    const auto t1 = Clock::now();
    cudaProfilerStart();
    const Status st = model.infer(pb, *c3, logits.data());
    cudaProfilerStop();
    std::printf("profile %s: prefill %d tokens %.3f ms (warm-up %.3f ms)\n",
                std::string(dtype_name(t)).c_str(), prefill, seconds_since(t1) * 1e3, warm_ms);
    return st.ok() ? 0 : 1;
  }
  int64_t p = 128;
  for (int i = 0; i < skip; ++i, ++p) {  // --skip: later positions (longer attention)
    if (Status st = step(p); !st.ok()) return 1;
  }
  std::vector<double> warm;
  if (device_sampling) {
    if (Status st = greedy_on_device(model, *cache, tokens, p, 64, &warm); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    p += 64;
  } else {
    for (int i = 0; i < 64; ++i, ++p) {
      const auto t0 = Clock::now();
      if (Status st = step(p); !st.ok()) return 1;
      warm.push_back(seconds_since(t0) * 1e3);
    }
  }
  std::printf("profile %s: median decode step %.4f ms over 64 warm steps (no profiler%s)\n",
              std::string(dtype_name(t)).c_str(), bench::median(warm),
              device_sampling ? ", device sampling" : "");
  cudaProfilerStart();
  if (device_sampling) {
    if (!greedy_on_device(model, *cache, tokens, p, steps, nullptr).ok()) return 1;
  } else {
    for (int i = 0; i < steps; ++i, ++p) {
      if (Status st = step(p); !st.ok()) return 1;
    }
  }
  cudaProfilerStop();
  return 0;
}

}  // namespace rinfer::bench
