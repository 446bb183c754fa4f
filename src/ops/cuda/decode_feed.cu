// The two ends of a one-row decode step queued ahead (models/llama/cuda/llama_cuda_graphs.cpp),
// captured in the step's graph so that nothing runs between two graphs:
//   pull  the step's staged inputs, written by the host into pinned memory before it launched
//         the graph, copied into the graph's device inputs: from the half `*parity` selects.
//   feed  the step's sampled id into the next step's token input, the penalties' window
//         (hist[*feed_at], none when negative) and pinned memory the host reads (host_out
//         [*parity]); then the parity flips, so the next step pulls and feeds the other half.
// Pinned memory is read with ld.global.cv (fetched again, never from a cache line an earlier step
// left) and written through with a system-wide fence.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 256;

__global__ void decode_pull_kernel(const int32_t* src, int64_t stride, int64_t n, int32_t* dst,
                                   const int32_t* parity) {
  const int32_t* from = src + static_cast<int64_t>(*parity) * stride;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __ldcv(from + i);
  }
}

__global__ void decode_feed_kernel(const int32_t* ids, int32_t* token, int32_t* hist,
                                   const int32_t* feed_at, int32_t* host_out, int32_t* parity) {
  const int32_t id = ids[0];
  const int32_t p = *parity;
  *token = id;
  const int32_t at = *feed_at;
  if (at >= 0) hist[at] = id;
  __stwt(host_out + p, id);
  __threadfence_system();
  *parity = p ^ 1;
}

}  // namespace

cudaError_t launch_decode_pull(const int32_t* src, int64_t stride, int64_t n, int32_t* dst,
                               const int32_t* parity, cudaStream_t stream) {
  if (n <= 0) return cudaGetLastError();
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  decode_pull_kernel<<<static_cast<unsigned>(blocks < 64 ? blocks : 64), kThreads, 0, stream>>>(
      src, stride, n, dst, parity);
  return cudaGetLastError();
}

cudaError_t launch_decode_feed(const int32_t* ids, int32_t* token, int32_t* hist,
                               const int32_t* feed_at, int32_t* host_out, int32_t* parity,
                               cudaStream_t stream) {
  decode_feed_kernel<<<1, 1, 0, stream>>>(ids, token, hist, feed_at, host_out, parity);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
