// LayerNorm with the bias and residual adds fused (BERT's post-attention and post-FFN norms):
// one block per row, z = x + bias + residual staged in shared memory, mean and biased variance by
// two passes over it (as the CPU reference), then f32 and/or bf16 outputs. Every input element is
// read before the block's first barrier, so an output may alias x or the residual.
#include "ops/cuda/common.cuh"
#include "ops/cuda/encoder_launch.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* x, const float* __restrict__ bias, const float* residual,
                      const float* __restrict__ gamma, const float* __restrict__ beta, int64_t n,
                      float eps, float* out, uint16_t* __restrict__ out_bf16) {
  extern __shared__ float z[];  // [n]
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* rr = residual != nullptr ? residual + row * n : nullptr;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float v = xr[i];
    if (bias != nullptr) v += bias[i];
    if (rr != nullptr) v += rr[i];
    z[i] = v;
    s += v;
  }
  const float mean = block_sum(s, scratch) / static_cast<float>(n);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float d = z[i] - mean;
    ss = fmaf(d, d, ss);
  }
  const float var = block_sum(ss, scratch) / static_cast<float>(n);
  const float inv = rsqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float y = (z[i] - mean) * inv * gamma[i] + beta[i];
    if (out != nullptr) out[row * n + i] = y;
    if (out_bf16 != nullptr) out_bf16[row * n + i] = f32_to_bf16_bits(y);
  }
}

}  // namespace

cudaError_t launch_layer_norm(const float* x, const float* bias, const float* residual,
                              const float* gamma, const float* beta, int64_t n_rows, int64_t n,
                              float eps, float* out, uint16_t* out_bf16, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        layer_norm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  layer_norm_kernel<<<static_cast<unsigned>(n_rows), kThreads, smem, stream>>>(
      x, bias, residual, gamma, beta, n, eps, out, out_bf16);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
