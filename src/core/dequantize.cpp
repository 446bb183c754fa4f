// Scalar reference conversions to f32: IEEE half / bfloat16 / fp8 and ggml's GGUF block formats.
//
// Every dequantize_* function below reproduces ggml's dequantize_row_* (ggml-quants.c) bit for
// bit: the same block layout (quant_blocks.h) and the same float operations in the same order,
// e.g. Q4_K computes `d1 = d * sc; m1 = dmin * m; y = d1 * q - m1`, never `d * (sc * q) - ...`.
// This file is the reference every fast kernel is compared with, so it stays plain and scalar.
//
// Rounding: with f16 scales and quants of at most 8 bits, every product below (d * sc, d1 * q,
// dmin * m, (d * sc) * q) is exact in f32 (at most 11 + 7 + 5 = 23 significant bits, far from
// underflow and overflow), so each element is rounded at most once, by the final `+ m` / `- m1`.
// Evaluation order and FMA contraction therefore cannot change a value except for the sign of a
// zero result: with Q3_K / Q6_K's signed scales, d < 0, sc < 0 and q = 0, ggml's
// `(d * sc) * q` is +0 while `d * float(sc * q)` would be -0. We keep ggml's order exactly so
// that zeros match too. Q8_K (f32 scale) is a single product.

#include <bit>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_blocks.h"

namespace rinfer {

static_assert(std::endian::native == std::endian::little,
              "GGUF blocks are little-endian and are read with memcpy");

// ---------------------------------------------------------------------------------------------
// Scalar conversions
// ---------------------------------------------------------------------------------------------

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits = 0;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN with its payload kept
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: mant * 2^-24. Normalize so that bit 10 is the implicit leading one.
    uint32_t e = 127 - 14;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) {
    // NaN: keep the top of the payload and force the quiet bit, so it cannot become inf.
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  }
  if (ax >= 0x477FF000u) {
    // >= 65520 (halfway between 65504 and 2^16, which ties to the even 2^16), and inf.
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (ax >= 0x38800000u) {
    // Normal f16 (>= 2^-14): rebias the exponent, then round 23 mantissa bits to 10 (RNE).
    // A carry out of the mantissa correctly bumps the exponent.
    uint32_t v = ax - ((127u - 15u) << 23);
    v += 0xFFFu + ((v >> 13) & 1u);
    return static_cast<uint16_t>(sign | (v >> 13));
  }
  if (ax <= 0x33000000u) {
    return sign;  // <= 2^-25: rounds to zero (2^-25 itself is a tie, and 0 is even)
  }
  // Subnormal f16: the result is round(|f| / 2^-24). |f| = m * 2^(e - 150) with a 24-bit m, so
  // |f| / 2^-24 = m >> (126 - e), with 14 <= 126 - e <= 24 here.
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN: truncate and force quiet
  }
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);  // RNE, may give inf
}

float f8e4m3_to_f32(uint8_t v) {
  // OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN, max 448.
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xF && mant == 0x7) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 0x1p-9f;  // subnormal: mant/8 * 2^-6, exact
    return sign != 0 ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + (127 - 7)) << 23) | (mant << 20));
}

float f8e5m2_to_f32(uint8_t v) {
  // E5M2 is the top byte of an IEEE half: same bias (15), infinities and NaNs.
  return f16_to_f32(static_cast<uint16_t>(v << 8));
}

namespace {

// ---------------------------------------------------------------------------------------------
// Plain element types
// ---------------------------------------------------------------------------------------------

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void convert_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(load<T>(src + i * static_cast<int64_t>(sizeof(T))));
  }
}

void convert_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load<uint16_t>(src + 2 * i));
}

void convert_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load<uint16_t>(src + 2 * i));
}

void convert_bool(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] != 0 ? 1.0f : 0.0f;  // any nonzero byte: true
}

void convert_f8e4m3(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(src[i]);
}

void convert_f8e5m2(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f8e5m2_to_f32(src[i]);
}

// ---------------------------------------------------------------------------------------------
// 32-element block formats. `nb` is the number of blocks.
// ---------------------------------------------------------------------------------------------

template <typename Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

void dequantize_q4_0(const uint8_t* src, float* y, int64_t nb) {
  constexpr int kHalf = kQK4_0 / 2;
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kHalf; ++j) {
      const int x0 = (b.qs[j] & 0x0F) - 8;
      const int x1 = (b.qs[j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + kHalf] = static_cast<float>(x1) * d;
    }
  }
}

void dequantize_q4_1(const uint8_t* src, float* y, int64_t nb) {
  constexpr int kHalf = kQK4_1 / 2;
  for (int64_t i = 0; i < nb; ++i, y += kQK4_1) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    for (int j = 0; j < kHalf; ++j) {
      const int x0 = b.qs[j] & 0x0F;
      const int x1 = b.qs[j] >> 4;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kHalf] = static_cast<float>(x1) * d + m;
    }
  }
}

void dequantize_q5_0(const uint8_t* src, float* y, int64_t nb) {
  constexpr int kHalf = kQK5_0 / 2;
  for (int64_t i = 0; i < nb; ++i, y += kQK5_0) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = f16_to_f32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    for (int j = 0; j < kHalf; ++j) {
      const uint32_t h0 = ((qh >> j) & 1u) << 4;            // bit 4 of element j
      const uint32_t h1 = ((qh >> (j + kHalf)) & 1u) << 4;  // bit 4 of element j + 16
      const int x0 = static_cast<int>((b.qs[j] & 0x0Fu) | h0) - 16;
      const int x1 = static_cast<int>((b.qs[j] >> 4) | h1) - 16;
      y[j] = static_cast<float>(x0) * d;
      y[j + kHalf] = static_cast<float>(x1) * d;
    }
  }
}

void dequantize_q5_1(const uint8_t* src, float* y, int64_t nb) {
  constexpr int kHalf = kQK5_1 / 2;
  for (int64_t i = 0; i < nb; ++i, y += kQK5_1) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    for (int j = 0; j < kHalf; ++j) {
      const uint32_t h0 = ((qh >> j) & 1u) << 4;
      const uint32_t h1 = ((qh >> (j + kHalf)) & 1u) << 4;
      const auto x0 = static_cast<int>((b.qs[j] & 0x0Fu) | h0);
      const auto x1 = static_cast<int>((b.qs[j] >> 4) | h1);
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kHalf] = static_cast<float>(x1) * d + m;
    }
  }
}

void dequantize_q8_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// ---------------------------------------------------------------------------------------------
// k-quants: 256-element super-blocks.
// ---------------------------------------------------------------------------------------------

// Q2_K: 16 sub-blocks of 16. Each 32-byte group of qs holds 128 elements as four 2-bit planes
// (shift 0, 2, 4, 6); each plane is two sub-blocks (bytes 0..15 and 16..31).
void dequantize_q2_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    const uint8_t* q = b.qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            const int v = (q[16 * half + l] >> shift) & 3;
            *y++ = dl * static_cast<float>(v) - ml;
          }
        }
      }
    }
  }
}

// Q3_K: 16 sub-blocks of 16 with 6-bit scales biased by 32. The 12 scale bytes hold the low
// nibbles of scales 0..15 in bytes 0..7 (0..7 low, 8..15 high) and the 2-bit high parts in
// bytes 8..11 (scale j's in byte 8 + j % 4, at bit 2 * (j / 4)). ggml unpacks them as three
// little-endian words with kmask1 / kmask2; we do the same.
void dequantize_q3_k(const uint8_t* src, float* y, int64_t nb) {
  constexpr uint32_t kMask1 = 0x03030303u;
  constexpr uint32_t kMask2 = 0x0F0F0F0Fu;
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d_all = f16_to_f32(b.d);

    uint32_t aux[4];
    std::memcpy(aux, b.scales, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kMask2) | (((tmp >> 4) & kMask1) << 4);
    aux[3] = ((aux[1] >> 4) & kMask2) | (((tmp >> 6) & kMask1) << 4);
    aux[0] = (aux[0] & kMask2) | (((tmp >> 0) & kMask1) << 4);
    aux[1] = (aux[1] & kMask2) | (((tmp >> 2) & kMask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, sizeof(scales));

    const uint8_t* q = b.qs;
    const uint8_t* hm = b.hmask;
    uint32_t m = 1;  // hmask bit of the current 32-element plane (8 planes over the block)
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(scales[is++] - 32);
          for (int l = 0; l < 16; ++l) {
            const int lo = (q[16 * half + l] >> shift) & 3;
            const int hi = (hm[16 * half + l] & m) != 0 ? 0 : 4;
            *y++ = dl * static_cast<float>(lo - hi);
          }
        }
      }
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) of Q4_K / Q5_K. Bytes 0..3: scales 0..3 (low 6
// bits); bytes 4..7: mins 0..3; bytes 8..11: low nibbles of scales / mins 4..7, whose top two
// bits sit in the top two bits of bytes 0..3 (scales) and 4..7 (mins).
void scale_min_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = static_cast<uint8_t>(s[j] & 63);
    *m = static_cast<uint8_t>(s[j + 4] & 63);
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K: 8 sub-blocks of 32. Each 32 bytes of qs hold two sub-blocks: low nibbles, then high.
void dequantize_q4_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    const uint8_t* q = b.qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc;
      uint8_t m;
      scale_min_k4(is, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Q5_K: as Q4_K plus a fifth bit: sub-block s takes its high bits from bit s of qh[0..31].
void dequantize_q5_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    const uint8_t* ql = b.qs;
    const uint8_t* qh = b.qh;
    uint32_t u1 = 1;
    uint32_t u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc;
      uint8_t m;
      scale_min_k4(is, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const int v = (ql[l] & 0xF) + ((qh[l] & u1) != 0 ? 16 : 0);
        *y++ = d1 * static_cast<float>(v) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (ql[l] >> 4) + ((qh[l] & u2) != 0 ? 16 : 0);
        *y++ = d2 * static_cast<float>(v) - m2;
      }
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales. Per 128 elements: 64 bytes of ql (low
// nibbles of elements 0..63, high nibbles of 64..127) and 32 bytes of qh (2 bits for each of
// elements l, l+32, l+64, l+96 in qh[l]). Evaluated as (d * sc) * q, left to right, like ggml.
void dequantize_q6_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = f16_to_f32(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// Q8_K: an f32 scale (not f16); bsums are only used by dot products.
void dequantize_q8_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ8_K>(src, i);
    for (int j = 0; j < kQK_K; ++j) *y++ = b.d * static_cast<float>(b.qs[j]);
  }
}

}  // namespace

Status dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const int index = static_cast<int>(t);
  if (index < 0 || index >= kDTypeCount) {
    return invalid_argument("dequantize_row: unknown dtype value {}", index);
  }
  const DTypeTraits& tr = dtype_traits(t);
  if (n < 0) {
    return invalid_argument("dequantize_row: negative element count {} for {}", n, tr.name);
  }
  if (n % tr.block_size != 0) {
    return invalid_argument("dequantize_row: {} elements is not a multiple of the {} block size {}",
                            n, tr.name, tr.block_size);
  }
  if (n == 0) return ok_status();
  if (src == nullptr || dst == nullptr) {
    return invalid_argument("dequantize_row: null {} pointer for {} elements of {}",
                            src == nullptr ? "source" : "destination", n, tr.name);
  }
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t nb = n / tr.block_size;
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::kF16:
      convert_f16(s, dst, n);
      break;
    case DType::kBF16:
      convert_bf16(s, dst, n);
      break;
    case DType::kF64:  // narrows, rounding to nearest
      convert_row<double>(s, dst, n);
      break;
    case DType::kI8:
      convert_row<int8_t>(s, dst, n);
      break;
    case DType::kU8:
      convert_row<uint8_t>(s, dst, n);
      break;
    case DType::kI16:
      convert_row<int16_t>(s, dst, n);
      break;
    case DType::kI32:  // |x| > 2^24 rounds to nearest, like i64
      convert_row<int32_t>(s, dst, n);
      break;
    case DType::kI64:
      convert_row<int64_t>(s, dst, n);
      break;
    case DType::kBool:
      convert_bool(s, dst, n);
      break;
    case DType::kF8E4M3:
      convert_f8e4m3(s, dst, n);
      break;
    case DType::kF8E5M2:
      convert_f8e5m2(s, dst, n);
      break;
    case DType::kQ4_0:
      dequantize_q4_0(s, dst, nb);
      break;
    case DType::kQ4_1:
      dequantize_q4_1(s, dst, nb);
      break;
    case DType::kQ5_0:
      dequantize_q5_0(s, dst, nb);
      break;
    case DType::kQ5_1:
      dequantize_q5_1(s, dst, nb);
      break;
    case DType::kQ8_0:
      dequantize_q8_0(s, dst, nb);
      break;
    case DType::kQ2_K:
      dequantize_q2_k(s, dst, nb);
      break;
    case DType::kQ3_K:
      dequantize_q3_k(s, dst, nb);
      break;
    case DType::kQ4_K:
      dequantize_q4_k(s, dst, nb);
      break;
    case DType::kQ5_K:
      dequantize_q5_k(s, dst, nb);
      break;
    case DType::kQ6_K:
      dequantize_q6_k(s, dst, nb);
      break;
    case DType::kQ8_K:
      dequantize_q8_k(s, dst, nb);
      break;
  }
  return ok_status();
}

}  // namespace rinfer
