// Softmax of rows, in place, f32: exp(x - max) / sum. One block per row (three passes: max,
// sum, scale; the row stays in L1/L2 between them).
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void softmax_kernel(float* x, int64_t n) {
  __shared__ float scratch[32];
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;  // [n]
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += expf(xr[i] - m);
  s = block_sum(s, scratch);
  const float inv = 1.0f / s;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] = expf(xr[i] - m) * inv;
}

}  // namespace

cudaError_t launch_softmax(float* x, int64_t n_rows, int64_t n, cudaStream_t stream) {
  const int threads = n >= 8192 ? 1024 : 256;
  if (n_rows > 0) softmax_kernel<<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
