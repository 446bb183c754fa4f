// Decoding of the device weight layouts (ops_cuda.h, DeviceWeight), shared by matvec,
// dequantize and get_rows. A row is a run of 16-byte "chunks" (Q4_K: its super-blocks' quant
// bytes; the 16-byte headers are read beside them); one chunk holds kEpc elements.
#pragma once

#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {

template <int F>
struct WFmt;
template <>
struct WFmt<kWF32> {
  static constexpr int kEpc = 4;
};
template <>
struct WFmt<kWF16> {
  static constexpr int kEpc = 8;
};
template <>
struct WFmt<kWBF16> {
  static constexpr int kEpc = 8;
};
template <>
struct WFmt<kWQ8_0> {
  static constexpr int kEpc = 16;
};
template <>
struct WFmt<kWF8> {
  static constexpr int kEpc = 16;
};
template <>
struct WFmt<kWQ4_0> {
  static constexpr int kEpc = 32;
};
template <>
struct WFmt<kWQ4_1> {
  static constexpr int kEpc = 32;
};
template <>
struct WFmt<kWQ4_K> {
  static constexpr int kEpc = 32;
};

template <int F>
__host__ __device__ constexpr bool is_q4() {
  return F == kWQ4_0 || F == kWQ4_1 || F == kWQ4_K;
}

// Bytes from one row to the next.
template <int F>
__host__ __device__ inline int64_t w_row_bytes(const WeightView& w) {
  if constexpr (F == kWF32) return w.ld * 4;
  if constexpr (F == kWF16 || F == kWBF16) return w.ld * 2;
  if constexpr (F == kWQ8_0 || F == kWF8) return w.n_in;
  if constexpr (F == kWQ4_0 || F == kWQ4_1) return w.n_in / 2;
  return w.n_in / 256 * 144;  // Q4_K
}

// Chunks per row (scalar formats: the last one may be partial).
template <int F>
__host__ __device__ inline int64_t w_chunks(const WeightView& w) {
  return (w.n_in + WFmt<F>::kEpc - 1) / WFmt<F>::kEpc;
}

template <int F>
__device__ __forceinline__ int64_t w_chunk_offset(int64_t c) {
  if constexpr (F == kWQ4_K) return (c >> 3) * 144 + 16 + (c & 7) * 16;
  return c * 16;
}

// First element of each 16-element half of a chunk (Q4 formats: low and high nibbles).
template <int F>
__device__ __forceinline__ int64_t chunk_base_lo(int64_t c) {
  if constexpr (F == kWQ4_K) return (c >> 3) * 256 + ((c & 7) >> 1) * 64 + (c & 1) * 16;
  return c * WFmt<F>::kEpc;
}
template <int F>
__device__ __forceinline__ int64_t chunk_base_hi(int64_t c) {
  if constexpr (F == kWQ4_K) return chunk_base_lo<F>(c) + 32;
  return c * WFmt<F>::kEpc + 16;
}

// Byte `idx` (0..11) of the Q4_K packed scales held in header words y, z, w.
__device__ __forceinline__ uint32_t q4k_scale_byte(uint4 h, int idx) {
  const uint32_t word = idx < 4 ? h.y : (idx < 8 ? h.z : h.w);
  return (word >> ((idx & 3) * 8)) & 0xffu;
}

// ggml's get_scale_min_k4: 6-bit scale and min of sub-block j (0..7).
__device__ __forceinline__ void q4k_scale_min(uint4 h, int j, float& sc, float& m) {
  uint32_t s, mm;
  if (j < 4) {
    s = q4k_scale_byte(h, j) & 63u;
    mm = q4k_scale_byte(h, j + 4) & 63u;
  } else {
    s = (q4k_scale_byte(h, j + 4) & 0xfu) | ((q4k_scale_byte(h, j - 4) >> 6) << 4);
    mm = (q4k_scale_byte(h, j + 4) >> 4) | ((q4k_scale_byte(h, j) >> 6) << 4);
  }
  sc = static_cast<float>(s);
  m = static_cast<float>(mm);
}

// The 32 nibbles of a 16-byte Q4 chunk as exact floats: q[j] low nibble of byte j (elements
// base_lo + j), q[16 + j] high nibble (elements base_hi + j).
__device__ __forceinline__ void q4_unpack(uint4 v, float (&q)[32]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = words[i] & 0x0f0f0f0fu;
    const uint32_t hi = (words[i] >> 4) & 0x0f0f0f0fu;
    q[4 * i + 0] = byte_to_float<0>(lo);
    q[4 * i + 1] = byte_to_float<1>(lo);
    q[4 * i + 2] = byte_to_float<2>(lo);
    q[4 * i + 3] = byte_to_float<3>(lo);
    q[16 + 4 * i + 0] = byte_to_float<0>(hi);
    q[16 + 4 * i + 1] = byte_to_float<1>(hi);
    q[16 + 4 * i + 2] = byte_to_float<2>(hi);
    q[16 + 4 * i + 3] = byte_to_float<3>(hi);
  }
}

// 16 signed bytes as exact floats.
__device__ __forceinline__ void q8_unpack(uint4 v, float (&q)[16]) {
  const uint32_t words[4] = {v.x ^ 0x80808080u, v.y ^ 0x80808080u, v.z ^ 0x80808080u,
                             v.w ^ 0x80808080u};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[4 * i + 0] = byte_to_float<0>(words[i]) - 128.0f;
    q[4 * i + 1] = byte_to_float<1>(words[i]) - 128.0f;
    q[4 * i + 2] = byte_to_float<2>(words[i]) - 128.0f;
    q[4 * i + 3] = byte_to_float<3>(words[i]) - 128.0f;
  }
}

// Chunk c dequantized from its loaded words: d (the chunk's 16 bytes), h (Q4_K: its super-block
// header), sc (Q8_0 / Q4_0: the block's f16 scale; Q4_1: the (d, m) f16 pair). v[j] is element
// chunk_base_lo + j (j < 16 or non-Q4) or chunk_base_hi + j - 16 (Q4, j >= 16).
template <int F>
__device__ __forceinline__ void decode_words(uint4 d, uint4 h, uint32_t sc, int64_t c,
                                             float (&v)[WFmt<F>::kEpc]) {
  const uint32_t words[4] = {d.x, d.y, d.z, d.w};
  if constexpr (F == kWF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(words[i]);
  } else if constexpr (F == kWBF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = bf16_lo(words[i]);
      v[2 * i + 1] = bf16_hi(words[i]);
    }
  } else if constexpr (F == kWF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = half2_to_float2(words[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  } else if constexpr (F == kWQ8_0) {
    const float s = half_to_float(static_cast<uint16_t>(sc));
    q8_unpack(d, v);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] *= s;
  } else if constexpr (F == kWQ4_0 || F == kWQ4_1) {
    float s, m;
    if constexpr (F == kWQ4_0) {
      s = half_to_float(static_cast<uint16_t>(sc));
      m = -8.0f * s;
    } else {
      const float2 dm = half2_to_float2(sc);
      s = dm.x;
      m = dm.y;
    }
    q4_unpack(d, v);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = v[i] * s + m;
  } else {  // Q4_K
    const float dd = half_to_float(static_cast<uint16_t>(h.x & 0xffffu));
    const float dmin = half_to_float(static_cast<uint16_t>(h.x >> 16));
    const int j = static_cast<int>((c & 7) >> 1) * 2;
    float sc0, m0, sc1, m1;
    q4k_scale_min(h, j, sc0, m0);
    q4k_scale_min(h, j + 1, sc1, m1);
    q4_unpack(d, v);
    const float a0 = dd * sc0, b0 = dmin * m0, a1 = dd * sc1, b1 = dmin * m1;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = a0 * v[i] - b0;
      v[16 + i] = a1 * v[16 + i] - b1;
    }
  }
}

// Chunk c of row `row`, dequantized (decode_words' order). Scalar formats: elements past n_in
// read the zero pad.
template <int F>
__device__ __forceinline__ void decode_chunk(const WeightView& w, int64_t row, int64_t c,
                                             float (&v)[WFmt<F>::kEpc]) {
  const auto* rp = static_cast<const uint8_t*>(w.data) + row * w_row_bytes<F>(w);
  const uint4 d = ld_stream16(rp + w_chunk_offset<F>(c));
  uint4 h{};
  uint32_t sc = 0;
  const int64_t nb = w.n_in / 32;
  if constexpr (F == kWQ8_0) {
    sc = static_cast<const uint16_t*>(w.scales)[row * nb + c / 2];
  } else if constexpr (F == kWQ4_0) {
    sc = static_cast<const uint16_t*>(w.scales)[row * nb + c];
  } else if constexpr (F == kWQ4_1) {
    sc = static_cast<const uint32_t*>(w.scales)[row * nb + c];
  } else if constexpr (F == kWQ4_K) {
    h = *reinterpret_cast<const uint4*>(rp + (c >> 3) * 144);
  }
  decode_words<F>(d, h, sc, c, v);
}

}  // namespace rinfer::cuda::kern
