// Sentence pooling: one block per sequence, threads over the columns (coalesced row reads), the
// mean of its rows (or its first row), then the L2 normalization over a block sum.
#include "ops/cuda/common.cuh"
#include "ops/cuda/encoder_launch.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    pool_rows_kernel(bool cls, bool normalize, const float* __restrict__ hidden, int64_t n,
                     const int32_t* __restrict__ starts, const int32_t* __restrict__ lengths,
                     float* __restrict__ out) {
  extern __shared__ float acc[];  // [n]
  __shared__ float scratch[32];
  const int64_t s = blockIdx.x;
  const int64_t start = starts[s];
  const int len = cls ? 1 : lengths[s];
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float sum = 0.0f;
    for (int r = 0; r < len; ++r) sum += hidden[(start + r) * n + i];
    const float v = sum / static_cast<float>(len);
    acc[i] = v;
    ss = fmaf(v, v, ss);
  }
  float scale = 1.0f;
  if (normalize) {
    const float total = block_sum(ss, scratch);
    scale = total > 0.0f ? rsqrtf(total) : 0.0f;
  }
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out[s * n + i] = acc[i] * scale;
}

}  // namespace

cudaError_t launch_pool_rows(bool cls, bool normalize, const float* hidden, int64_t n,
                             const int32_t* starts, const int32_t* lengths, int64_t n_seqs,
                             float* out, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        pool_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  pool_rows_kernel<<<static_cast<unsigned>(n_seqs), kThreads, smem, stream>>>(
      cls, normalize, hidden, n, starts, lengths, out);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
