// Matrix-vector kernels that read GGUF blocks in place (no unpacking): the decode path, which
// is bound by memory bandwidth, so every byte of weight is touched once and the per-block work
// is a handful of instructions. AVX-512 VNNI + VBMI (Highway's AVX3_DL target) only, for the
// 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); other targets and formats fall back to
// unpack + the integer tile kernel (matmul_hwy.cpp).
//
// Per row and per group of 16 blocks:
//  - Q4 / Q5: four blocks per 512-bit vector, one 16-byte quant block per 128-bit lane; the low
//    and high nibbles meet the activations regrouped the same way (QActs::qs4), so one and, one
//    shift and two vpdpbusd give each block's 4 partial sums in its own lane (Q5 adds its fifth
//    bit with a masked byte add, the masks regrouped from the 16 blocks' qh by one vpshufb);
//    Q8_0: two blocks per vector (xor 0x80 makes the quants unsigned, +128);
//  - a transposing add tree turns the 4 (or 8) vectors of partial sums into one vector of 16
//    block sums, converted to f32 once and multiplied by scale[b] = d_w[b] * d_x[b];
//  - the 16 f16 scales (and Q4_1 / Q5_1 mins stored next to them) come from 3-4 vpermt2b byte
//    shuffles of the group's bytes (a vpgatherdd was 40% slower on Zen 5);
//  - the block offsets / mins contribute sum_b m[b] * s_x[b] (s_x = d_x * sum of the block's
//    int8 activations) with one FMA per 16 blocks (Q4_0: m = -8 d, Q5_0: -16 d, Q8_0: -128 d,
//    which removes the +128).
// The last nb % 16 blocks of a row go 4 (2) at a time with in-lane sums. About 3 instructions per
// 32-element block, so one core streams Q4_1 at ~30-40 GB/s from cache.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/quant_dot_direct.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cstring>

#include "core/quant_blocks.h"
#include "ops/cpu/matmul_internal.h"

HWY_BEFORE_NAMESPACE();
// Highway 1.0.3's AVX3_DL target string names "avxvnni" but not "avx512vnni" (every CPU it
// selects AVX3_DL on has both): GCC gets the feature added for this target, clang an inline asm
// vpdpbusd (its target attributes do not stack).
#if HWY_TARGET == HWY_AVX3_DL && HWY_COMPILER_GCC_ACTUAL && !HWY_COMPILER_CLANG
#pragma GCC target("avx512vnni")
#endif
namespace rinfer::cpu::internal::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL
// acc + per int32 lane: sum of 4 products u8 (unsigned bytes) * i8 (signed bytes): vpdpbusd.
HWY_INLINE __m512i Dpbusd(__m512i acc, __m512i u8, __m512i i8) {
#if HWY_COMPILER_CLANG
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(i8));
  return acc;
#else
  return _mm512_dpbusd_epi32(acc, u8, i8);
#endif
}
#endif

#if HWY_TARGET == HWY_AVX3_DL

enum class Fmt { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0 };

template <Fmt F>
constexpr int kBlockBytes = F == Fmt::kQ4_0   ? 18
                            : F == Fmt::kQ4_1 ? 20
                            : F == Fmt::kQ5_0 ? 22
                            : F == Fmt::kQ5_1 ? 24
                                              : 34;
// Offsets of the 16 nibble bytes and of Q5's 32 high bits; whether a block has an f16 min.
template <Fmt F>
constexpr int kQsOffset = F == Fmt::kQ4_0   ? 2
                          : F == Fmt::kQ4_1 ? 4
                          : F == Fmt::kQ5_0 ? 6
                                            : 8;
template <Fmt F>
constexpr int kQhOffset = F == Fmt::kQ5_0 ? 2 : 4;
template <Fmt F>
constexpr bool kHasMin = F == Fmt::kQ4_1 || F == Fmt::kQ5_1;
template <Fmt F>
constexpr bool kIsQ5 = F == Fmt::kQ5_0 || F == Fmt::kQ5_1;
// The offset folded into the min term: y = d * (q - o) for the formats without a min.
template <Fmt F>
constexpr float kMinCoef = kHasMin<F>        ? 1.0f
                           : F == Fmt::kQ4_0 ? -8.0f
                           : F == Fmt::kQ5_0 ? -16.0f
                                             : -128.0f;

// 16 int32 block sums from 4 vectors whose 128-bit lane L holds 4 partial sums: the result's
// element 4L + j is the sum of lane L of p_j.
HWY_INLINE __m512i Transpose4Sum(__m512i p0, __m512i p1, __m512i p2, __m512i p3) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// Q4 formats: the quants of blocks b..b+n-1 (n <= 4), 16 bytes each, one per 128-bit lane
// (missing blocks zero).
template <Fmt F>
HWY_INLINE __m512i LoadQs4(const uint8_t* blk, int n) {
  constexpr int kQs = kQsOffset<F>;
  constexpr int kB = kBlockBytes<F>;
  auto ld = [&](int i) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + i * kB + kQs));
  };
  if (n >= 4) {
    const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(ld(0)), ld(1), 1);
    const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(ld(2)), ld(3), 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  __m512i x = _mm512_zextsi128_si512(ld(0));
  if (n > 1) x = _mm512_inserti32x4(x, ld(1), 1);
  if (n > 2) x = _mm512_inserti32x4(x, ld(2), 2);
  return x;
}

// Q8_0: the 64 quant bytes of blocks b, b+1 (b+1 zero when !two), made unsigned (+128).
HWY_INLINE __m512i LoadQ8Pair(const uint8_t* blk, bool two) {
  constexpr int kB = kBlockBytes<Fmt::kQ8_0>;
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  if (two) {
    const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kB + 2));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1), k80);
  }
  return _mm512_maskz_xor_epi64(0x0F, _mm512_castsi256_si512(q0), k80);
}

// Byte shuffles that pick 2 or 4 header bytes of each of 16 consecutive blocks of kB bytes out
// of 128-byte windows of the group (vpermt2b): window w serves the blocks whose header lies in
// bytes [128w, 128w + 128).
struct HeaderWindows {
  int n = 0;                         // windows used
  alignas(64) uint8_t idx[5][64]{};  // source byte (within the window) of each result byte
  uint64_t mask[5]{};                // result bytes this window provides
};

// hb: bytes wanted per block (4: f16 d and m, or Q5's qh; 2: f16 d), starting at byte `off`.
constexpr HeaderWindows make_header_windows(int kb, int hb, int off) {
  HeaderWindows hw;
  for (int i = 0; i < 16; ++i) {
    const int win = (i * kb + off) / 128;
    for (int c = 0; c < hb; ++c) {
      hw.idx[win][4 * i + c] = static_cast<uint8_t>(i * kb + off + c - 128 * win);
      hw.mask[win] |= uint64_t{1} << (4 * i + c);
    }
    hw.n = win + 1 > hw.n ? win + 1 : hw.n;
  }
  return hw;
}

constexpr bool headers_fit_windows(int kb, int hb, int off) {
  for (int i = 0; i < 16; ++i) {
    if ((i * kb + off) / 128 != (i * kb + off + hb - 1) / 128) return false;
  }
  return true;
}

// kHb bytes at kOff of each of 16 full blocks, one per int32 lane (the other bytes of a lane
// are zero).
template <int kB, int kHb, int kOff>
HWY_INLINE __m512i LoadHeaders16(const uint8_t* blk) {
  static_assert(headers_fit_windows(kB, kHb, kOff), "a header straddles two windows");
  static constexpr HeaderWindows kW = make_header_windows(kB, kHb, kOff);
  __m512i out = _mm512_setzero_si512();
  HWY_UNROLL(5)
  for (int w = 0; w < kW.n; ++w) {
    // Bytes past the group's 16 * kB are not ours (maybe past the row): masked loads.
    const int64_t base = 128 * w;
    const int64_t avail = 16 * kB - base;
    const __mmask64 m0 = avail >= 64 ? ~__mmask64{0} : (__mmask64{1} << avail) - 1;
    const __mmask64 m1 = avail >= 128  ? ~__mmask64{0}
                         : avail <= 64 ? 0
                                       : (__mmask64{1} << (avail - 64)) - 1;
    const __m512i t0 = _mm512_maskz_loadu_epi8(m0, blk + base);
    const __m512i t1 = _mm512_maskz_loadu_epi8(m1, blk + base + 64);
    const __m512i idx = _mm512_load_si512(kW.idx[w]);
    out = _mm512_mask_mov_epi8(out, kW.mask[w], _mm512_permutex2var_epi8(t0, idx, t1));
  }
  return out;
}

// 4 bytes at `off` of each of n (<= 4) blocks, one per int32 lane of an xmm (zero past n).
template <int kB>
HWY_INLINE __m128i LoadHeaders4(const uint8_t* blk, int n, int off = 0) {
  auto ld = [&](int i) {
    int32_t v;
    std::memcpy(&v, blk + i * kB + off, 4);
    return v;
  };
  __m128i x = _mm_cvtsi32_si128(ld(0));
  if (n > 1) x = _mm_insert_epi32(x, ld(1), 1);
  if (n > 2) x = _mm_insert_epi32(x, ld(2), 2);
  if (n > 3) x = _mm_insert_epi32(x, ld(3), 3);
  return x;
}

// The weights of 16 full blocks, unpacked once for every token that meets them: Q8_0's 8 vectors
// of two blocks' quants (+128); Q4/Q5's low and high nibbles of 4 blocks per vector pair (Q5's
// fifth bit added).
template <Fmt F>
struct Weights16 {
  __m512i v[8];
};

template <Fmt F>
HWY_INLINE Weights16<F> UnpackBlocks16(const uint8_t* blk) {
  constexpr int kB = kBlockBytes<F>;
  Weights16<F> w;
  if constexpr (F == Fmt::kQ8_0) {
    for (int i = 0; i < 8; ++i) w.v[i] = LoadQ8Pair(blk + 2 * i * kB, true);
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    // Q5: the 32 high bits of the 16 blocks, regrouped per 4 blocks into a 64-bit mask of the
    // low halves (elements 0..15 of each block) and one of the high halves.
    alignas(64) uint64_t hmask[8];
    if constexpr (kIsQ5<F>) {
      const __m512i qh = LoadHeaders16<kB, 4, kQhOffset<F>>(blk);
      const __m512i by_half = _mm512_set4_epi32(0x0F0E0B0A, 0x07060302, 0x0D0C0908, 0x05040100);
      _mm512_store_si512(hmask, _mm512_shuffle_epi8(qh, by_half));
    }
    for (int j = 0; j < 4; ++j) {
      const __m512i q = LoadQs4<F>(blk + 4 * j * kB, 4);
      __m512i lo = _mm512_and_si512(q, m4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      if constexpr (kIsQ5<F>) {
        const __m512i k16 = _mm512_set1_epi8(16);
        lo = _mm512_mask_add_epi8(lo, hmask[2 * j], lo, k16);
        hi = _mm512_mask_add_epi8(hi, hmask[2 * j + 1], hi, k16);
      }
      w.v[2 * j] = lo;
      w.v[2 * j + 1] = hi;
    }
  }
  return w;
}

// Integer dot products of 16 unpacked blocks starting at block b0 with token t's activations,
// as 16 int32 sums in block order.
template <Fmt F>
HWY_INLINE __m512i BlockSums16(const Weights16<F>& w, const QActs& a, int64_t t, int64_t b0) {
  if constexpr (F == Fmt::kQ8_0) {
    const int8_t* x = a.qs + t * a.layout.kp + b0 * 32;  // [16 * 32]
    __m512i p[8];
    for (int i = 0; i < 8; ++i) {
      p[i] = Dpbusd(_mm512_setzero_si512(), w.v[i], _mm512_loadu_si512(x + 64 * i));
    }
    const __m512i u0 = Transpose4Sum(p[0], p[1], p[2], p[3]);
    const __m512i u1 = Transpose4Sum(p[4], p[5], p[6], p[7]);
    // Element 4M + j: block 2j (M=0), 2j+1 (M=1), 8+2j (M=2), 9+2j (M=3).
    const __m512i v =
        _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, 0x88), _mm512_shuffle_i32x4(u0, u1, 0xDD));
    const __m512i to_block = _mm512_set_epi32(15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0);
    return _mm512_permutexvar_epi32(to_block, v);
  } else {
    const int8_t* x = a.qs4 + t * a.layout.k4 + b0 * 32;  // regrouped: 128 bytes per 4 blocks
    __m512i p[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i s = Dpbusd(_mm512_setzero_si512(), w.v[2 * j], _mm512_loadu_si512(x + 128 * j));
      p[j] = Dpbusd(s, w.v[2 * j + 1], _mm512_loadu_si512(x + 128 * j + 64));
    }
    // Element 4L + j is block 4j + L.
    const __m512i to_block = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_epi32(to_block, Transpose4Sum(p[0], p[1], p[2], p[3]));
  }
}

// The last nb % 16 blocks of a row, 4 (Q4) or 2 (Q8_0) at a time: each 128-bit lane's partial
// sums are added up inside the lane and scaled by its block's scale.
template <Fmt F>
HWY_INLINE void TailBlocks(const uint8_t* row, int64_t b0, int64_t nb, const QActs& a, int64_t t,
                           __m512& acc, __m128& accm) {
  const int8_t* qs = a.qs + t * a.layout.kp;
  const int8_t* qs4 = a.qs4 + t * a.layout.k4;
  const float* d32 = a.d32 + t * a.layout.g32;
  const float* s32 = a.s32 + t * a.layout.g32;
  constexpr int kB = kBlockBytes<F>;
  constexpr int kStep = F == Fmt::kQ8_0 ? 2 : 4;
  // Scale lane of each int32 lane: Q4: lane group L -> block L; Q8_0: lanes 0-7 -> 0, 8-15 -> 1.
  const __m512i spread = F == Fmt::kQ8_0
                             ? _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
                             : _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  for (int64_t b = b0; b < nb; b += kStep) {
    const int n = static_cast<int>(nb - b < kStep ? nb - b : kStep);
    const uint8_t* blk = row + b * kB;
    __m512i p;
    if constexpr (F == Fmt::kQ8_0) {
      p = Dpbusd(_mm512_setzero_si512(), LoadQ8Pair(blk, n == 2), _mm512_loadu_si512(qs + b * 32));
    } else {
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i q = LoadQs4<F>(blk, n);
      const int8_t* x = qs4 + b * 32;  // b is a multiple of 4: one regrouped group
      __m512i lo = _mm512_and_si512(q, m4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      if constexpr (kIsQ5<F>) {
        uint64_t mlo = 0, mhi = 0;
        for (int i = 0; i < n; ++i) {
          uint32_t qh;
          std::memcpy(&qh, blk + i * kB + kQhOffset<F>, 4);
          mlo |= static_cast<uint64_t>(qh & 0xFFFFu) << (16 * i);
          mhi |= static_cast<uint64_t>(qh >> 16) << (16 * i);
        }
        const __m512i k16 = _mm512_set1_epi8(16);
        lo = _mm512_mask_add_epi8(lo, mlo, lo, k16);
        hi = _mm512_mask_add_epi8(hi, mhi, hi, k16);
      }
      p = Dpbusd(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
      p = Dpbusd(p, hi, _mm512_loadu_si512(x + 64));
    }
    p = _mm512_add_epi32(p, _mm512_shuffle_epi32(p, _MM_PERM_BADC));
    p = _mm512_add_epi32(p, _mm512_shuffle_epi32(p, _MM_PERM_CDAB));  // lane sums, x4
    const __m128i h = LoadHeaders4<kB>(blk, n);
    const __m128 dw = _mm_cvtph_ps(_mm_cvtepi32_epi16(h));
    const __m128 dx = _mm_loadu_ps(d32 + b);  // zero padded past nb
    const __m512 sc = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_mul_ps(dw, dx)));
    acc = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc, 0x1111);
    const __m128 mw = kHasMin<F> ? _mm_cvtph_ps(_mm_cvtepi32_epi16(_mm_srli_epi32(h, 16))) : dw;
    accm = _mm_fmadd_ps(mw, _mm_loadu_ps(s32 + b), accm);
  }
}

// y[t * ldy + r] for n_rows rows of nb blocks each and the T tokens t0 .. t0 + T - 1 of `a`: each
// group of 16 blocks is loaded and unpacked once for all T tokens, and every token's sums go
// through the same operations in the same order as with T = 1, so a token's result has the same
// bits whichever tokens share the call (batch invariance).
template <Fmt F, int T>
void MatvecRowsT(const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t nb, const QActs& a,
                 int64_t t0, float* y, int64_t ldy) {
  constexpr int kB = kBlockBytes<F>;
  const float min_coef = kMinCoef<F>;
  const int64_t g32 = a.layout.g32;
  // Software prefetch about 4 KB (whole rows) ahead: the hardware prefetchers stop at 4 KB page
  // boundaries and restart slowly on every new matrix (+10-15% decode speed on Zen 5).
  const int64_t ahead_rows = (4096 + row_bytes - 1) / row_bytes;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    if (r + ahead_rows < n_rows) {
      const uint8_t* ahead = row + ahead_rows * row_bytes;
      for (int64_t off = 0; off < row_bytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + off), _MM_HINT_T0);
      }
    }
    __m512 acc[T], accm[T];
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_setzero_ps();
      accm[t] = _mm512_setzero_ps();
    }
    const int64_t nfull = nb / 16 * 16;
    for (int64_t b0 = 0; b0 < nfull; b0 += 16) {
      const uint8_t* blk = row + b0 * kB;
      const Weights16<F> wq = UnpackBlocks16<F>(blk);
      // Lane i: the first 4 bytes of block b0 + i (d, and Q4_1's m).
      const __m512i dm = LoadHeaders16 < kB, kHasMin<F> ? 4 : 2, 0 > (blk);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
      __m512 mw = dw;
      if constexpr (kHasMin<F>)
        mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
      for (int t = 0; t < T; ++t) {
        const __m512i sums = BlockSums16<F>(wq, a, t0 + t, b0);
        const __m512 dx = _mm512_loadu_ps(a.d32 + (t0 + t) * g32 + b0);
        const __m512 sx = _mm512_loadu_ps(a.s32 + (t0 + t) * g32 + b0);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, dx), acc[t]);
        accm[t] = _mm512_fmadd_ps(mw, sx, accm[t]);
      }
    }
    for (int t = 0; t < T; ++t) {
      __m128 accm4 = _mm_setzero_ps();
      if (nfull < nb) TailBlocks<F>(row, nfull, nb, a, t0 + t, acc[t], accm4);
      const __m512 m = _mm512_add_ps(accm[t], _mm512_zextps128_ps512(accm4));
      y[t * ldy + r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(m, _mm512_set1_ps(min_coef), acc[t]));
    }
  }
}

// Every token of `a`, up to 4 at a time.
template <Fmt F>
void MatvecRows(const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t nb, const QActs& a,
                float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 4 <= a.n; t += 4) MatvecRowsT<F, 4>(w, row_bytes, n_rows, nb, a, t, y + t * ldy, ldy);
  for (; t + 2 <= a.n; t += 2) MatvecRowsT<F, 2>(w, row_bytes, n_rows, nb, a, t, y + t * ldy, ldy);
  for (; t < a.n; ++t) MatvecRowsT<F, 1>(w, row_bytes, n_rows, nb, a, t, y + t * ldy, ldy);
}

bool HasDirect(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 ||
         t == DType::kQ8_0;
}

bool MatvecDirect(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                  const QActs& a, float* y, int64_t ldy) {
  const int64_t nb = k / 32;
  switch (t) {
    case DType::kQ4_0: MatvecRows<Fmt::kQ4_0>(w, row_bytes, n_rows, nb, a, y, ldy); return true;
    case DType::kQ4_1: MatvecRows<Fmt::kQ4_1>(w, row_bytes, n_rows, nb, a, y, ldy); return true;
    case DType::kQ5_0: MatvecRows<Fmt::kQ5_0>(w, row_bytes, n_rows, nb, a, y, ldy); return true;
    case DType::kQ5_1: MatvecRows<Fmt::kQ5_1>(w, row_bytes, n_rows, nb, a, y, ldy); return true;
    case DType::kQ8_0: MatvecRows<Fmt::kQ8_0>(w, row_bytes, n_rows, nb, a, y, ldy); return true;
    default: return false;
  }
}

#else

bool HasDirect(DType) { return false; }
bool MatvecDirect(DType, const uint8_t*, int64_t, int64_t, int64_t, const QActs&, float*, int64_t) {
  return false;
}

#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace rinfer::cpu::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu::internal {

HWY_EXPORT(HasDirect);
HWY_EXPORT(MatvecDirect);

bool has_direct_matvec(DType t) { return HWY_DYNAMIC_DISPATCH(HasDirect)(t); }

bool int8_matvec_direct(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                        const QActs& a, float* y, int64_t ldy) {
  return HWY_DYNAMIC_DISPATCH(MatvecDirect)(t, w, row_bytes, n_rows, k, a, y, ldy);
}

}  // namespace rinfer::cpu::internal
#endif  // HWY_ONCE
