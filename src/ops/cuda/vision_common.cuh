// Device helpers of the vision kernels (included by their .cu files only): the activations
// (Activation's values, ops/params) on f32, bf16 and f16 loads and stores, the grid size of a
// grid-stride loop.
#pragma once

#include "ops/cuda/common.cuh"

namespace rinfer::cuda::kern {

enum VisionAct : int { kActNone = 0, kActRelu = 1, kActRelu6 = 2, kActSilu = 3 };

__device__ __forceinline__ float vision_act(float v, int act) {
  switch (act) {
    case kActRelu: return fmaxf(v, 0.0f);
    case kActRelu6: return fminf(fmaxf(v, 0.0f), 6.0f);
    case kActSilu: return v / (1.0f + __expf(-v));
    default: return v;
  }
}

// 16-bit elements: bf16 (kF16 false) or IEEE half (kF16 true), as their bits.
template <bool kF16>
__device__ __forceinline__ float load1(const uint16_t* p) {
  if constexpr (kF16) {
    return __half2float(__ushort_as_half(*p));
  } else {
    return __uint_as_float(static_cast<uint32_t>(*p) << 16);
  }
}

template <bool kF16>
__device__ __forceinline__ uint16_t bits1(float v) {
  if constexpr (kF16) {
    return __half_as_ushort(__float2half_rn(v));
  } else {
    return f32_to_bf16_bits(v);
  }
}

template <bool kF16>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  if constexpr (kF16) {
    __half2 h;
    memcpy(&h, &w, 4);
    return __half22float2(h);
  } else {
    return make_float2(bf16_lo(w), bf16_hi(w));
  }
}

template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kF16) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
  } else {
    return pack_bf16x2(lo, hi);
  }
}

// Eight elements (16 bytes, aligned) as f32, and back.
template <bool kF16>
__device__ __forceinline__ void unpack8(const uint16_t* p, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = unpack2<kF16>(w[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

template <bool kF16>
__device__ __forceinline__ void pack8(const float (&f)[8], uint16_t* p) {
  *reinterpret_cast<uint4*>(p) = make_uint4(pack2<kF16>(f[0], f[1]), pack2<kF16>(f[2], f[3]),
                                            pack2<kF16>(f[4], f[5]), pack2<kF16>(f[6], f[7]));
}

inline unsigned grid_for(int64_t work, int threads) {
  const int64_t want = (work + threads - 1) / threads;
  return static_cast<unsigned>(want < (1 << 20) ? want : (1 << 20));
}

}  // namespace rinfer::cuda::kern
