// Pooling, NHWC bf16 or f16: the k x k max pool (padding never wins: it counts as -inf, as
// PyTorch's), and the global average pool [n, hw, c] -> [n, c] (f32 sums). One thread per output
// pixel and channel, neighbouring threads on neighbouring channels (coalesced).
#include "ops/cuda/vision_common.cuh"
#include "ops/cuda/vision_launch.h"

namespace rinfer::cuda::kern {
namespace {

template <bool kF16>
__global__ void max_pool_kernel(PoolArgs a, const uint16_t* __restrict__ x,
                                uint16_t* __restrict__ y) {
  const int64_t total = static_cast<int64_t>(a.n) * a.oh * a.ow * a.c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const int c = static_cast<int>(g % a.c);
    int64_t pix = g / a.c;
    const int ox = static_cast<int>(pix % a.ow);
    pix /= a.ow;
    const int oy = static_cast<int>(pix % a.oh);
    const int img = static_cast<int>(pix / a.oh);
    float m = -INFINITY;
    for (int ky = 0; ky < a.k; ++ky) {
      const int iy = oy * a.stride - a.pad + ky;
      if (iy < 0 || iy >= a.h) continue;
      for (int kx = 0; kx < a.k; ++kx) {
        const int ix = ox * a.stride - a.pad + kx;
        if (ix < 0 || ix >= a.w) continue;
        m = fmaxf(m,
                  load1<kF16>(x + ((static_cast<int64_t>(img) * a.h + iy) * a.w + ix) * a.c + c));
      }
    }
    y[g] = bits1<kF16>(m);
  }
}

template <bool kF16>
__global__ void global_avg_pool_kernel(int n, int hw, int c, const uint16_t* __restrict__ x,
                                       uint16_t* __restrict__ y) {
  const int64_t total = static_cast<int64_t>(n) * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const int ch = static_cast<int>(g % c);
    const uint16_t* p = x + (g / c) * hw * c + ch;
    float s = 0.0f;
    for (int i = 0; i < hw; ++i) s += load1<kF16>(p + static_cast<int64_t>(i) * c);
    y[g] = bits1<kF16>(s / static_cast<float>(hw));
  }
}

}  // namespace

cudaError_t launch_max_pool(const PoolArgs& a, const uint16_t* x, uint16_t* y,
                            cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t total = static_cast<int64_t>(a.n) * a.oh * a.ow * a.c;
  if (a.f16) {
    max_pool_kernel<true><<<grid_for(total, kThreads), kThreads, 0, stream>>>(a, x, y);
  } else {
    max_pool_kernel<false><<<grid_for(total, kThreads), kThreads, 0, stream>>>(a, x, y);
  }
  return cudaGetLastError();
}

cudaError_t launch_global_avg_pool(bool f16, int n, int hw, int c, const uint16_t* x, uint16_t* y,
                                   cudaStream_t stream) {
  constexpr int kThreads = 256;
  const unsigned g = grid_for(static_cast<int64_t>(n) * c, kThreads);
  if (f16) {
    global_avg_pool_kernel<true><<<g, kThreads, 0, stream>>>(n, hw, c, x, y);
  } else {
    global_avg_pool_kernel<false><<<g, kThreads, 0, stream>>>(n, hw, c, x, y);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
