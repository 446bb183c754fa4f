// RMSNorm and fused residual-add + RMSNorm, f32 in, f32 or bf16 out. One block per row.
// Plain:  out = x * (1 / sqrt(mean(x^2) + eps)) * w
// Fused:  residual += x; out = rms_norm(residual) * w  (one read of each input, the sum of
//         squares taken on the fly; saves a kernel and a pass over the residual stream).
// The scale is computed in double from the f32 block sum, then out = (x * scale) * w in f32,
// the order the CPU reference uses.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, float* residual,
                                int64_t n, float eps, bool out_bf16, void* out) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;  // [n]
  float* rr = residual != nullptr ? residual + row * n : nullptr;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = xr[i];
    if (rr != nullptr) {
      v += rr[i];
      rr[i] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, scratch);
  const float scale = static_cast<float>(
      1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(n) + static_cast<double>(eps)));
  const float* src = rr != nullptr ? rr : xr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = src[i] * scale;
    if (w != nullptr) v *= w[i];
    store_act(out, row * n + i, v, out_bf16);
  }
}

}  // namespace

cudaError_t launch_rms_norm(const float* x, const float* w, float* residual, int64_t n_rows,
                            int64_t n, float eps, bool out_bf16, void* out, cudaStream_t stream) {
  const int threads = n >= 4096 ? 1024 : (n >= 1024 ? 256 : 128);
  if (n_rows > 0) {
    return launch_pdl(rms_norm_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(threads), 0,
                      stream, x, w, residual, n, eps, out_bf16, out);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
