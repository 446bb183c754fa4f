// What llm_cuda_bench.cpp and llm_cuda_profile.cpp (its --profile mode) share.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"
#include "ops/cuda/ops_cuda.h"
#include "rinfer/status.h"

namespace rinfer::bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The benchmarks' token ids: n of them spread over the vocabulary, the same every run.
inline std::vector<int32_t> synthetic_tokens(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(n_vocab));
  }
  return t;
}

// --profile: decode steps (or, with prefill > 0, one prefill) of one shape and format through
// the engine core between cudaProfilerStart/Stop; skip: that many more prompt tokens.
int profile_decode(const DecoderHParams& hp, DType t, int steps, int prefill, int skip,
                   int64_t n_ctx, const cuda::KernelConfig& kernels);

}  // namespace rinfer::bench
