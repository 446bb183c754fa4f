// What llm_cuda_bench.cpp and llm_cuda_profile.cpp (its --profile mode) share.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "models/model.h"
#include "ops/cuda/ops_cuda.h"
#include "rinfer/status.h"

namespace rinfer::bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// n greedy decode steps through decode_on_device from position p0 (the cache holds tokens[0,
// p0); tokens[p0] is fed first): each token taken on the device, the next step queued before
// the host reads it. `ms` (when given) receives the intervals between the host's tokens.
Status greedy_on_device(DecoderModel& model, KvCache& cache, std::span<const int32_t> tokens,
                        int64_t p0, int64_t n, std::vector<double>* ms);

// --profile: decode steps (or, with prefill > 0, one prefill) of one shape and format between
// cudaProfilerStart/Stop; through the engine core with engine_core.
int profile_decode(const DecoderHParams& hp, DType t, int steps, int prefill, int skip,
                   bool device_sampling, int64_t n_ctx, const cuda::KernelConfig& kernels,
                   bool engine_core);

}  // namespace rinfer::bench
