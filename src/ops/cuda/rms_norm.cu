// RMSNorm and fused residual-add + RMSNorm, f32 in, f32 or bf16 out. One block per row.
// Plain:  out = x * (1 / sqrt(mean(x^2) + eps)) * w
// Fused:  residual += x; out = rms_norm(residual) * w  (one read of each input, the sum of
//         squares taken on the fly; saves a kernel and a pass over the residual stream).
// The scale is computed in double from the f32 block sum, then out = (x * scale) * w in f32,
// the order the CPU reference uses.
#include <algorithm>

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
  const float scale = rms_scale(block_sum(ss, scratch), n, eps);
  const float* src = rr != nullptr ? rr : xr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = src[i] * scale;
    if (w != nullptr) v *= w[i];
    store_act(out, row * n + i, v, out_bf16);
  }
}

// The same with the row in registers as float4s (n % 4 == 0, n <= 4 K blockDim.x, 16-byte aligned
// rows): one read and one write of the residual, weights loaded before the PDL wait.
template <int K>
__global__ void rms_norm_v4_kernel(const float* x, const float* __restrict__ w, float* residual,
                                   int64_t n, float eps, bool out_bf16, void* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, n4 = n / 4;
  float4 wv[K], v[K];
  load_row4<K>(w, n4, make_float4(1.0f, 1.0f, 1.0f, 1.0f), wv);
  pdl_begin();
  const float ss =
      load_residual_row4<K>(x + row * n, residual != nullptr ? residual + row * n : nullptr, n4, v);
  const float scale = rms_scale(block_sum(ss, scratch), n, eps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i4 = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i4 >= n4) continue;
    const float4 o = make_float4(v[k].x * scale * wv[k].x, v[k].y * scale * wv[k].y,
                                 v[k].z * scale * wv[k].z, v[k].w * scale * wv[k].w);
    store_act4(out, row * n4 + i4, o, out_bf16);
  }
}

}  // namespace

cudaError_t launch_rms_norm(const float* x, const float* w, float* residual, int64_t n_rows,
                            int64_t n, float eps, bool out_bf16, void* out, cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (n_rows > 0 && n % 4 == 0 && n <= 8192 && aligned(x) && aligned(w) && aligned(residual) &&
      aligned(out)) {
    // 256 threads, up to 8 float4 each.
    const int64_t n4 = n / 4;
    const int k = n4 <= 256 ? 1 : (n4 <= 512 ? 2 : (n4 <= 1024 ? 4 : 8));
    const auto threads = static_cast<unsigned>(std::min<int64_t>(256, (n4 + 31) / 32 * 32));
    const dim3 grid(static_cast<unsigned>(n_rows));
    switch (k) {
      case 1:
        return launch_pdl(rms_norm_v4_kernel<1>, grid, dim3(threads), 0, stream, x, w, residual, n,
                          eps, out_bf16, out);
      case 2:
        return launch_pdl(rms_norm_v4_kernel<2>, grid, dim3(threads), 0, stream, x, w, residual, n,
                          eps, out_bf16, out);
      case 4:
        return launch_pdl(rms_norm_v4_kernel<4>, grid, dim3(threads), 0, stream, x, w, residual, n,
                          eps, out_bf16, out);
      default:
        return launch_pdl(rms_norm_v4_kernel<8>, grid, dim3(threads), 0, stream, x, w, residual, n,
                          eps, out_bf16, out);
    }
  }
  const int threads = n >= 4096 ? 1024 : (n >= 1024 ? 256 : 128);
  if (n_rows > 0) {
    return launch_pdl(rms_norm_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(threads), 0,
                      stream, x, w, residual, n, eps, out_bf16, out);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
