// Depthwise convolution, NHWC bf16 or f16: one thread computes V channels (16 bytes when C % 8 ==
// 0) of one output pixel over the k x k taps, f32 accumulation, then bias and activation, rounded
// to bf16. Neighbouring threads take neighbouring channel groups of one pixel, so every tap's load
// is coalesced; the k x k reuse of an input pixel comes from L1. Weights are [k, k, C].
#include "ops/cuda/vision_common.cuh"
#include "ops/cuda/vision_launch.h"

namespace rinfer::cuda::kern {
namespace {

template <int V, bool kF16>
__global__ void dw_conv_kernel(DwConvArgs a, const uint16_t* __restrict__ x,
                               const uint16_t* __restrict__ w, const float* __restrict__ bias,
                               uint16_t* __restrict__ y) {
  const int groups = a.c / V;
  const int64_t total = static_cast<int64_t>(a.n) * a.oh * a.ow * groups;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const int cg = static_cast<int>(g % groups);
    int64_t pix = g / groups;
    const int ox = static_cast<int>(pix % a.ow);
    pix /= a.ow;
    const int oy = static_cast<int>(pix % a.oh);
    const int img = static_cast<int>(pix / a.oh);
    const int c0 = cg * V;
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    const int iy0 = oy * a.stride - a.pad_t, ix0 = ox * a.stride - a.pad_l;
    const uint16_t* xi = x + static_cast<int64_t>(img) * a.h * a.w * a.c;
    for (int ky = 0; ky < a.k; ++ky) {
      const int iy = iy0 + ky;
      if (iy < 0 || iy >= a.h) continue;
      for (int kx = 0; kx < a.k; ++kx) {
        const int ix = ix0 + kx;
        if (ix < 0 || ix >= a.w) continue;
        const uint16_t* xp = xi + (static_cast<int64_t>(iy) * a.w + ix) * a.c + c0;
        const uint16_t* wp = w + (ky * a.k + kx) * a.c + c0;
        if constexpr (V == 8) {
          float xv[8], wv[8];
          unpack8<kF16>(xp, xv);
          unpack8<kF16>(wp, wv);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] = fmaf(xv[i], wv[i], acc[i]);
        } else {
          acc[0] = fmaf(load1<kF16>(xp), load1<kF16>(wp), acc[0]);
        }
      }
    }
    uint16_t* yp = y + g * V;
    if constexpr (V == 8) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[i] = vision_act(acc[i] + (bias != nullptr ? bias[c0 + i] : 0.0f), a.act);
      }
      pack8<kF16>(acc, yp);
    } else {
      float v = acc[0] + (bias != nullptr ? bias[c0] : 0.0f);
      *yp = bits1<kF16>(vision_act(v, a.act));
    }
  }
}

}  // namespace

cudaError_t launch_depthwise_conv(const DwConvArgs& a, const uint16_t* x, const uint16_t* w,
                                  const float* bias, uint16_t* y, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t pixels = static_cast<int64_t>(a.n) * a.oh * a.ow;
  const unsigned g8 = grid_for(pixels * (a.c / 8), kThreads), g1 = grid_for(pixels * a.c, kThreads);
  if (a.c % 8 == 0 && a.f16) {
    dw_conv_kernel<8, true><<<g8, kThreads, 0, stream>>>(a, x, w, bias, y);
  } else if (a.c % 8 == 0) {
    dw_conv_kernel<8, false><<<g8, kThreads, 0, stream>>>(a, x, w, bias, y);
  } else if (a.f16) {
    dw_conv_kernel<1, true><<<g1, kThreads, 0, stream>>>(a, x, w, bias, y);
  } else {
    dw_conv_kernel<1, false><<<g1, kThreads, 0, stream>>>(a, x, w, bias, y);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
