// Weight-tile unpacking for the fast matmul: GGUF blocks -> (uint8 quants, per-lane scales,
// per-group mins) for the integer kernels, or -> zero-padded f32 rows for the f32 kernels.
// Layouts in matmul_internal.h. The loops are plain C++ compiled once per SIMD target (the
// compiler vectorizes the fixed-length inner loops); the cost is amortized over all tokens of
// a call, and the decode-critical formats also have direct matvec kernels.
//
// Every unpacker reproduces dequantize_row's values exactly: ws * q + wm is the same float
// expression ggml evaluates (e.g. Q4_K: (d * sc) * q - dmin * m), only regrouped.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/matmul_unpack.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cstring>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "ops/cpu/matmul_internal.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

// Byte helpers, SIMD (16-byte vectors) or scalar.
#if HWY_TARGET == HWY_SCALAR
HWY_INLINE void SetScale(float* sexp, int64_t e, int64_t gs, float ws) {
  for (int64_t j = 0; j < gs / 4; ++j) sexp[e / 4 + j] = ws;
}
// lo[j] = qs[j] & 15, hi[j] = qs[j] >> 4 (plus bit 4 from hbits when given), j < 16.
HWY_INLINE void Split16(const uint8_t* HWY_RESTRICT qs, uint8_t* HWY_RESTRICT lo,
                        uint8_t* HWY_RESTRICT hi) {
  for (int j = 0; j < 16; ++j) {
    lo[j] = qs[j] & 0x0F;
    hi[j] = qs[j] >> 4;
  }
}
// Bit j of the 16-bit little-endian word at bits (j < 16), as value 16.
HWY_INLINE void OrBit4(const uint8_t* bits, uint8_t* HWY_RESTRICT q) {
  const uint32_t b = bits[0] | (static_cast<uint32_t>(bits[1]) << 8);
  for (int j = 0; j < 16; ++j) q[j] = static_cast<uint8_t>(q[j] | (((b >> j) & 1u) << 4));
}
// q[l] |= ((src[l] >> shift) & 1) << 4, l < 16.
HWY_INLINE void OrShiftedBit(const uint8_t* HWY_RESTRICT src, int shift, uint8_t* HWY_RESTRICT q) {
  for (int l = 0; l < 16; ++l) q[l] = static_cast<uint8_t>(q[l] | (((src[l] >> shift) & 1) << 4));
}
HWY_INLINE void Xor80(const uint8_t* HWY_RESTRICT src, uint8_t* HWY_RESTRICT q) {
  for (int j = 0; j < 16; ++j) q[j] = static_cast<uint8_t>(src[j] ^ 0x80);
}
// Q6_K: 16 elements: (ql & 15 or ql >> 4) | ((qh >> shift) & 3) << 4.
HWY_INLINE void Q6Bytes(const uint8_t* HWY_RESTRICT ql, bool high_nibble,
                        const uint8_t* HWY_RESTRICT qh, int shift, uint8_t* HWY_RESTRICT q) {
  for (int l = 0; l < 16; ++l) {
    const int lo = high_nibble ? ql[l] >> 4 : ql[l] & 0xF;
    q[l] = static_cast<uint8_t>(lo | (((qh[l] >> shift) & 3) << 4));
  }
}
#else
using D8 = hn::Full128<uint8_t>;
HWY_INLINE void SetScale(float* sexp, int64_t e, int64_t gs, float ws) {
  const hn::Full128<float> d4;
  const auto v = hn::Set(d4, ws);
  for (int64_t j = 0; j < gs / 4; j += 4) hn::StoreU(v, d4, sexp + e / 4 + j);
}
HWY_INLINE void Split16(const uint8_t* HWY_RESTRICT qs, uint8_t* HWY_RESTRICT lo,
                        uint8_t* HWY_RESTRICT hi) {
  const D8 d8;
  const auto v = hn::LoadU(d8, qs);
  hn::StoreU(hn::And(v, hn::Set(d8, 0x0F)), d8, lo);
  hn::StoreU(hn::ShiftRight<4>(v), d8, hi);
}
HWY_INLINE void OrBit4(const uint8_t* bits, uint8_t* HWY_RESTRICT q) {
  const D8 d8;
  const auto m = hn::LoadMaskBits(d8, bits);
  hn::StoreU(hn::Or(hn::LoadU(d8, q), hn::IfThenElseZero(m, hn::Set(d8, 16))), d8, q);
}
HWY_INLINE void OrShiftedBit(const uint8_t* HWY_RESTRICT src, int shift, uint8_t* HWY_RESTRICT q) {
  const D8 d8;
  const auto b = hn::And(hn::ShiftRightSame(hn::LoadU(d8, src), shift), hn::Set(d8, 1));
  hn::StoreU(hn::Or(hn::LoadU(d8, q), hn::ShiftLeft<4>(b)), d8, q);
}
HWY_INLINE void Xor80(const uint8_t* HWY_RESTRICT src, uint8_t* HWY_RESTRICT q) {
  const D8 d8;
  hn::StoreU(hn::Xor(hn::LoadU(d8, src), hn::Set(d8, 0x80)), d8, q);
}
HWY_INLINE void Q6Bytes(const uint8_t* HWY_RESTRICT ql, bool high_nibble,
                        const uint8_t* HWY_RESTRICT qh, int shift, uint8_t* HWY_RESTRICT q) {
  const D8 d8;
  const auto l = hn::LoadU(d8, ql);
  const auto lo = high_nibble ? hn::ShiftRight<4>(l) : hn::And(l, hn::Set(d8, 0x0F));
  const auto h = hn::And(hn::ShiftRightSame(hn::LoadU(d8, qh), shift), hn::Set(d8, 3));
  hn::StoreU(hn::Or(lo, hn::ShiftLeft<4>(h)), d8, q);
}
#endif

// One row of each format: q[k], sexp[k/4], m[groups]. `b` points at the row's first block.
void RowQ4_0(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockQ4_0), q += 32) {
    Split16(b + offsetof(BlockQ4_0, qs), q, q + 16);
    const float d = Half(b);
    SetScale(sexp, i * 32, 32, d);
    m[i] = -8.0f * d;
  }
}

void RowQ4_1(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockQ4_1), q += 32) {
    Split16(b + offsetof(BlockQ4_1, qs), q, q + 16);
    SetScale(sexp, i * 32, 32, Half(b));
    m[i] = Half(b + 2);
  }
}

template <bool kHasMin>
void RowQ5(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  constexpr size_t kBytes = kHasMin ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
  constexpr size_t kQh = kHasMin ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh);
  constexpr size_t kQs = kHasMin ? offsetof(BlockQ5_1, qs) : offsetof(BlockQ5_0, qs);
  for (int64_t i = 0; i < nb; ++i, b += kBytes, q += 32) {
    Split16(b + kQs, q, q + 16);
    OrBit4(b + kQh, q);           // bits 0..15: elements 0..15
    OrBit4(b + kQh + 2, q + 16);  // bits 16..31: elements 16..31
    const float d = Half(b);
    SetScale(sexp, i * 32, 32, d);
    m[i] = kHasMin ? Half(b + 2) : -16.0f * d;
  }
}

void RowQ8_0(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockQ8_0), q += 32) {
    Xor80(b + offsetof(BlockQ8_0, qs), q);  // q + 128
    Xor80(b + offsetof(BlockQ8_0, qs) + 16, q + 16);
    const float d = Half(b);
    SetScale(sexp, i * 32, 32, d);
    m[i] = -128.0f * d;
  }
}

HWY_INLINE void ScaleMinK4(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <bool kFive>
void RowQ45K(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  constexpr size_t kBytes = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr size_t kQs = kFive ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  for (int64_t i = 0; i < nb; ++i, b += kBytes) {
    const float d = Half(b);
    const float dmin = Half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* ql = b + kQs;
    const uint8_t* qh = b + (kFive ? offsetof(BlockQ5_K, qh) : 0);
    for (int p = 0; p < 4; ++p, ql += 32, q += 64) {
      const int s0 = 2 * p;
      for (int half = 0; half < 2; ++half) {
        Split16(ql + 16 * half, q + 16 * half, q + 32 + 16 * half);
        if constexpr (kFive) {
          OrShiftedBit(qh + 16 * half, s0, q + 16 * half);
          OrShiftedBit(qh + 16 * half, s0 + 1, q + 32 + 16 * half);
        }
      }
      for (int h = 0; h < 2; ++h) {
        int sc;
        int mn;
        ScaleMinK4(s0 + h, scales, &sc, &mn);
        const int64_t g = i * 8 + s0 + h;
        SetScale(sexp, g * 32, 32, d * static_cast<float>(sc));
        m[g] = -(dmin * static_cast<float>(mn));
      }
    }
  }
}

void RowQ6K(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockQ6_K)) {
    const uint8_t* ql = b + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = b + offsetof(BlockQ6_K, qh);
    const auto* sc = reinterpret_cast<const int8_t*>(b + offsetof(BlockQ6_K, scales));
    const float d = Half(b + offsetof(BlockQ6_K, d));
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, q += 128) {
      for (int h = 0; h < 32; h += 16) {
        Q6Bytes(ql + h, false, qh + h, 0, q + h);
        Q6Bytes(ql + 32 + h, false, qh + h, 2, q + 32 + h);
        Q6Bytes(ql + h, true, qh + h, 4, q + 64 + h);
        Q6Bytes(ql + 32 + h, true, qh + h, 6, q + 96 + h);
      }
    }
    for (int g = 0; g < 16; ++g) {
      const float ws = d * static_cast<float>(sc[g]);
      SetScale(sexp, (i * 16 + g) * 16, 16, ws);
      m[i * 16 + g] = -32.0f * ws;
    }
  }
}

void RowQ2K(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockQ2_K)) {
    const uint8_t* scales = b + offsetof(BlockQ2_K, scales);
    const uint8_t* qs = b + offsetof(BlockQ2_K, qs);
    const float d = Half(b + offsetof(BlockQ2_K, d));
    const float dmin = Half(b + offsetof(BlockQ2_K, dmin));
    for (int n = 0; n < 2; ++n, qs += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int l = 0; l < 32; ++l, ++q) *q = static_cast<uint8_t>((qs[l] >> shift) & 3);
      }
    }
    for (int g = 0; g < 16; ++g) {
      SetScale(sexp, (i * 16 + g) * 16, 16, d * static_cast<float>(scales[g] & 0xF));
      m[i * 16 + g] = -(dmin * static_cast<float>(scales[g] >> 4));
    }
  }
}

void RowQ3K(const uint8_t* b, int64_t nb, uint8_t* q, float* sexp, float* m) {
  constexpr uint32_t kMask1 = 0x03030303u;
  constexpr uint32_t kMask2 = 0x0F0F0F0Fu;
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockQ3_K)) {
    const uint8_t* hm = b + offsetof(BlockQ3_K, hmask);
    const uint8_t* qs = b + offsetof(BlockQ3_K, qs);
    const float d_all = Half(b + offsetof(BlockQ3_K, d));
    uint32_t aux[4];
    std::memcpy(aux, b + offsetof(BlockQ3_K, scales), 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kMask2) | (((tmp >> 4) & kMask1) << 4);
    aux[3] = ((aux[1] >> 4) & kMask2) | (((tmp >> 6) & kMask1) << 4);
    aux[0] = (aux[0] & kMask2) | (((tmp >> 0) & kMask1) << 4);
    aux[1] = (aux[1] & kMask2) | (((tmp >> 2) & kMask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, sizeof(scales));
    int plane = 0;
    for (int n = 0; n < 2; ++n, qs += 32) {
      for (int shift = 0; shift < 8; shift += 2, ++plane) {
        for (int l = 0; l < 32; ++l, ++q) {
          const int lo = (qs[l] >> shift) & 3;
          const int hi = ((hm[l] >> plane) & 1) != 0 ? 4 : 0;  // lo - 4 + hi, offset by 4
          *q = static_cast<uint8_t>(lo + hi);
        }
      }
    }
    for (int g = 0; g < 16; ++g) {
      const float ws = d_all * static_cast<float>(scales[g] - 32);
      SetScale(sexp, (i * 16 + g) * 16, 16, ws);
      m[i * 16 + g] = -4.0f * ws;
    }
  }
}

void UnpackRows(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                const WTile& tile) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* b = w + r * row_bytes;
    uint8_t* q = tile.q + r * tile.kp;            // [kp]
    float* sexp = tile.sexp + r * (tile.kp / 4);  // [kp / 4]
    float* m = tile.m + r * tile.g;               // [g]
    const int64_t gs = t == DType::kQ6_K || t == DType::kQ2_K || t == DType::kQ3_K ? 16 : 32;
    switch (t) {
      case DType::kQ4_0: RowQ4_0(b, k / 32, q, sexp, m); break;
      case DType::kQ4_1: RowQ4_1(b, k / 32, q, sexp, m); break;
      case DType::kQ5_0: RowQ5<false>(b, k / 32, q, sexp, m); break;
      case DType::kQ5_1: RowQ5<true>(b, k / 32, q, sexp, m); break;
      case DType::kQ8_0: RowQ8_0(b, k / 32, q, sexp, m); break;
      case DType::kQ2_K: RowQ2K(b, k / 256, q, sexp, m); break;
      case DType::kQ3_K: RowQ3K(b, k / 256, q, sexp, m); break;
      case DType::kQ4_K: RowQ45K<false>(b, k / 256, q, sexp, m); break;
      case DType::kQ5_K: RowQ45K<true>(b, k / 256, q, sexp, m); break;
      case DType::kQ6_K: RowQ6K(b, k / 256, q, sexp, m); break;
      default: break;
    }
    std::memset(q + k, 0, static_cast<size_t>(tile.kp - k));
    std::memset(sexp + k / 4, 0, static_cast<size_t>(tile.kp / 4 - k / 4) * sizeof(float));
    std::memset(m + k / gs, 0, static_cast<size_t>(tile.g - k / gs) * sizeof(float));
  }
}

// f32 rows (zero padded to kp) from f32 / f16 / bf16 natively, anything else via
// dequantize_row.
bool RowsToF32(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k, float* dst,
               int64_t kp) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const hn::Rebind<uint32_t, decltype(df)> du32;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* src = w + r * row_bytes;
    float* out = dst + r * kp;  // [kp]
    int64_t i = 0;
    if (t == DType::kF32) {
      std::memcpy(out, src, static_cast<size_t>(k) * sizeof(float));
      i = k;
    } else if (t == DType::kF16) {
#if HWY_TARGET != HWY_SCALAR
      const hn::Rebind<hwy::float16_t, decltype(df)> df16;
      for (; i + n <= k; i += n) {
        const auto* p = reinterpret_cast<const hwy::float16_t*>(src) + i;
        hn::StoreU(hn::PromoteTo(df, hn::LoadU(df16, p)), df, out + i);
      }
#endif
      for (; i < k; ++i) out[i] = Half(src + 2 * i);
    } else if (t == DType::kBF16) {
      for (; i + n <= k; i += n) {
        const auto* p = reinterpret_cast<const uint16_t*>(src) + i;
        const auto bits = hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p)));
        hn::StoreU(hn::BitCast(df, bits), df, out + i);
      }
      for (; i < k; ++i)
        out[i] = bf16_to_f32(static_cast<uint16_t>(src[2 * i] | src[2 * i + 1] << 8));
    } else {
      if (!dequantize_row(t, src, out, k).ok()) return false;
      i = k;
    }
    std::memset(out + k, 0, static_cast<size_t>(kp - k) * sizeof(float));
  }
  return true;
}

}  // namespace rinfer::cpu::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu::internal {

HWY_EXPORT(UnpackRows);
HWY_EXPORT(RowsToF32);

bool has_int8_path(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return true;
    default: return false;
  }
}

int64_t int8_group(DType t) {
  return t == DType::kQ6_K || t == DType::kQ2_K || t == DType::kQ3_K ? 16 : 32;
}

void unpack_rows(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                 const WTile& tile) {
  HWY_DYNAMIC_DISPATCH(UnpackRows)(t, w, row_bytes, n_rows, k, tile);
}

bool rows_to_f32(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                 float* dst, int64_t kp) {
  return HWY_DYNAMIC_DISPATCH(RowsToF32)(t, w, row_bytes, n_rows, k, dst, kp);
}

}  // namespace rinfer::cpu::internal
#endif  // HWY_ONCE
