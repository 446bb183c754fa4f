// Micro-kernels of the fast matmul (Highway, compiled per SIMD target, dispatched at runtime):
//  - the integer kernel: 4 unpacked weight rows x up to 4 quantized tokens, one 4-byte dot
//    product per int32 lane (AVX-512 VNNI vpdpbusd; AVX2 vpmaddubsw + vpmaddwd; 128-bit
//    targets widen to 16 bits), scaled per lane in f32;
//  - the f32 kernel: 4 f32 weight rows x up to 4 f32 tokens with FMAs.
// Both keep 4 x NT vector accumulators so that each weight vector loaded is used NT times and
// each activation vector 4 times (the register tile of a GEMM).
//
// Lane contract of Dot4: the int32 lanes of each 16-byte block of the result sum to the dot
// product of that block's 16 weight bytes with its 16 activation bytes. All 16 bytes of a
// block belong to one quantization group (groups are 16 or 32 bytes, aligned), and the scales
// are expanded per int32 lane, so how a target distributes the products over the 4 lanes of a
// block does not matter.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/matmul_hwy.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include "ops/cpu/matmul_internal.h"

HWY_BEFORE_NAMESPACE();
// Highway 1.0.3's AVX3_DL target string names "avxvnni" but not "avx512vnni" (every CPU it
// selects AVX3_DL on has both): GCC gets the feature added for this target, clang an inline asm
// vpdpbusd (its target attributes do not stack).
#if HWY_TARGET == HWY_AVX3_DL && HWY_COMPILER_GCC_ACTUAL && !HWY_COMPILER_CLANG
#pragma GCC target("avx512vnni")
#endif
namespace rinfer::cpu::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#if HWY_TARGET == HWY_SCALAR

// One lane: plain loops with the same arithmetic structure (per-4-byte integer sums).
// out[t * 4 + r]; gl = group count of m / s (padded).
template <int NT, bool kWide>
void Int8Tile(const uint8_t* q, const float* s, const float* m, int64_t gl, const int8_t* aq,
              const float* ad, const float* as, int64_t kp, float* out) {
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < NT; ++t) {
      float acc = 0.0f;
      for (int64_t j = 0; j < kp / 4; ++j) {
        int32_t sum = 0;
        for (int b = 0; b < 4; ++b) {
          sum += static_cast<int32_t>(q[r * kp + 4 * j + b]) * aq[t * kp + 4 * j + b];
        }
        acc += static_cast<float>(sum) * (s[r * (kp / 4) + j] * ad[t * (kp / 4) + j]);
      }
      for (int64_t g = 0; g < gl; ++g) acc += m[r * gl + g] * as[t * gl + g];
      out[t * 4 + r] = acc;
    }
  }
}

template <int NT>
void F32Tile(const float* w, int64_t kp, const float* x, float* out) {
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < NT; ++t) {
      float acc = 0.0f;
      for (int64_t i = 0; i < kp; ++i) acc += w[r * kp + i] * x[t * kp + i];
      out[t * 4 + r] = acc;
    }
  }
}

#else  // SIMD targets

using DU8 = hn::ScalableTag<uint8_t>;
using DI8 = hn::ScalableTag<int8_t>;
using DI32 = hn::ScalableTag<int32_t>;
using VU8 = hn::Vec<DU8>;
using VI8 = hn::Vec<DI8>;
using VI32 = hn::Vec<DI32>;

// Per int32 lane: sum of 4 products w (uint8) * a (int8), exact. kWide: w may exceed 127
// (Q8_0 stored as q + 128), which would saturate vpmaddubsw's 16-bit pair sums.
template <bool kWide>
HWY_INLINE VI32 Dot4(VU8 w, VI8 a) {
#if HWY_TARGET == HWY_AVX3_DL
  return VI32{Dpbusd(_mm512_setzero_si512(), w.raw, a.raw)};
#elif HWY_TARGET == HWY_AVX3
  const __m512i ones = _mm512_set1_epi16(1);
  if constexpr (!kWide) {
    return VI32{_mm512_madd_epi16(_mm512_maddubs_epi16(w.raw, a.raw), ones)};
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i lo = _mm512_and_si512(w.raw, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w.raw, 4), m4);
    const __m512i plo = _mm512_madd_epi16(_mm512_maddubs_epi16(lo, a.raw), ones);
    const __m512i phi = _mm512_madd_epi16(_mm512_maddubs_epi16(hi, a.raw), _mm512_set1_epi16(16));
    return VI32{_mm512_add_epi32(plo, phi)};
  }
#elif HWY_TARGET == HWY_AVX2
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (!kWide) {
    return VI32{_mm256_madd_epi16(_mm256_maddubs_epi16(w.raw, a.raw), ones)};
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(w.raw, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w.raw, 4), m4);
    const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a.raw), ones);
    const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a.raw), _mm256_set1_epi16(16));
    return VI32{_mm256_add_epi32(plo, phi)};
  }
#else
  // 128-bit targets (SSE4, NEON): widen both to 16 bits; exact for any uint8 weight.
  static_assert(HWY_MAX_BYTES == 16 || HWY_TARGET == HWY_EMU128, "Dot4 needs 128-bit vectors");
  const DI32 di32;
  const hn::Repartition<int16_t, DI32> di16;
  const hn::Half<DU8> du8h;
  const hn::Half<DI8> di8h;
  const auto w0 = hn::PromoteTo(di16, hn::LowerHalf(du8h, w));
  const auto w1 = hn::PromoteTo(di16, hn::UpperHalf(du8h, w));
  const auto a0 = hn::PromoteTo(di16, hn::LowerHalf(di8h, a));
  const auto a1 = hn::PromoteTo(di16, hn::UpperHalf(di8h, a));
  auto s1 = hn::Zero(di32);
  auto s0 = hn::ReorderWidenMulAccumulate(di32, w0, a0, hn::Zero(di32), s1);
  s0 = hn::ReorderWidenMulAccumulate(di32, w1, a1, s0, s1);
  return hn::Add(s0, s1);
#endif
}

// out[t * 4 + r] = sum of the lanes of acc[r][t], for r < 4, t < NT. Each sum adds the lanes of
// its own vector in one fixed order, whatever NT is, so a token's result does not depend on how
// many tokens share its tile (batch invariance: a row gives the same bits alone or batched).
template <int NT>
HWY_INLINE void ReduceTile(const VF (&acc)[4][NT], float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (NT < 4) {
    // The 4-token reduction with zero vectors for the missing tokens.
    VF full[4][4];
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t < 4; ++t) full[r][t] = t < NT ? acc[r][t] : hn::Zero(DF());
    }
    ReduceTile<4>(full, out);
    return;
  } else {
    // Transposing reduction: 16 vectors -> one vector of 16 sums in 45 instructions.
    // Per 128-bit lane of u_t: partial sums of rows 0..3 of token t.
    const auto partial = [](__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
      const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(v0, v1), _mm512_unpackhi_ps(v0, v1));
      const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(v2, v3), _mm512_unpackhi_ps(v2, v3));
      return _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
    };
    const __m512 u[4] = {partial(acc[0][0].raw, acc[1][0].raw, acc[2][0].raw, acc[3][0].raw),
                         partial(acc[0][1].raw, acc[1][1].raw, acc[2][1].raw, acc[3][1].raw),
                         partial(acc[0][2].raw, acc[1][2].raw, acc[2][2].raw, acc[3][2].raw),
                         partial(acc[0][3].raw, acc[1][3].raw, acc[2][3].raw, acc[3][3].raw)};
    const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44),
                                     _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
    const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44),
                                     _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
    const __m512 r =
        _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, 0x88), _mm512_shuffle_f32x4(y01, y23, 0xDD));
    _mm512_storeu_ps(out, r);
    return;
  }
#endif
  const DF df;
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < NT; ++t) out[t * 4 + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
  }
}

// The integer register tile: 4 rows x NT tokens of f32 accumulators. out[t * 4 + r].
template <int NT, bool kWide>
void Int8Tile(const uint8_t* HWY_RESTRICT q, const float* HWY_RESTRICT s,
              const float* HWY_RESTRICT m, int64_t gl, const int8_t* HWY_RESTRICT aq,
              const float* HWY_RESTRICT ad, const float* HWY_RESTRICT as, int64_t kp,
              float* HWY_RESTRICT out) {
  const DU8 du8;
  const DI8 di8;
  const DF df;
  const int64_t n8 = static_cast<int64_t>(hn::Lanes(du8));
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  const int64_t kf = kp / 4;  // floats per scale row
  VF acc[4][NT];
  HWY_UNROLL(4)
  for (int r = 0; r < 4; ++r) {
    HWY_UNROLL(4)
    for (int t = 0; t < NT; ++t) acc[r][t] = hn::Zero(df);
  }
  for (int64_t c = 0; c < kp; c += n8) {
    VU8 w[4];
    VF ws[4];
    HWY_UNROLL(4)
    for (int r = 0; r < 4; ++r) {
      w[r] = hn::LoadU(du8, q + r * kp + c);
      ws[r] = hn::LoadU(df, s + r * kf + c / 4);
    }
    HWY_UNROLL(4)
    for (int t = 0; t < NT; ++t) {
      const VI8 va = hn::LoadU(di8, aq + t * kp + c);
      const VF vd = hn::LoadU(df, ad + t * kf + c / 4);
      HWY_UNROLL(4)
      for (int r = 0; r < 4; ++r) {
        const VF isum = hn::ConvertTo(df, Dot4<kWide>(w[r], va));
        acc[r][t] = hn::MulAdd(isum, hn::Mul(ws[r], vd), acc[r][t]);
      }
    }
  }
  // Group offsets / mins: sum_g m[r, g] * s[t, g], into the same accumulators.
  for (int64_t g = 0; g < gl; g += nf) {
    VF vm[4];
    HWY_UNROLL(4)
    for (int r = 0; r < 4; ++r) vm[r] = hn::LoadU(df, m + r * gl + g);
    HWY_UNROLL(4)
    for (int t = 0; t < NT; ++t) {
      const VF vs = hn::LoadU(df, as + t * gl + g);
      HWY_UNROLL(4)
      for (int r = 0; r < 4; ++r) acc[r][t] = hn::MulAdd(vm[r], vs, acc[r][t]);
    }
  }
  ReduceTile<NT>(acc, out);
}

// The f32 register tile. out[t * 4 + r].
template <int NT>
void F32Tile(const float* HWY_RESTRICT w, int64_t kp, const float* HWY_RESTRICT x,
             float* HWY_RESTRICT out) {
  const DF df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  VF acc[4][NT];
  HWY_UNROLL(4)
  for (int r = 0; r < 4; ++r) {
    HWY_UNROLL(4)
    for (int t = 0; t < NT; ++t) acc[r][t] = hn::Zero(df);
  }
  for (int64_t c = 0; c < kp; c += n) {
    VF vw[4];
    HWY_UNROLL(4)
    for (int r = 0; r < 4; ++r) vw[r] = hn::LoadU(df, w + r * kp + c);
    HWY_UNROLL(4)
    for (int t = 0; t < NT; ++t) {
      const VF vx = hn::LoadU(df, x + t * kp + c);
      HWY_UNROLL(4)
      for (int r = 0; r < 4; ++r) acc[r][t] = hn::MulAdd(vw[r], vx, acc[r][t]);
    }
  }
  ReduceTile<NT>(acc, out);
}

#endif  // HWY_TARGET == HWY_SCALAR

// Writes out[t * 4 + r] for t < nt, r < nr to y[(t0 + t) * ldy + col].
HWY_INLINE void Scatter(const float* out, int64_t nt, int64_t nr, float* y, int64_t ldy,
                        int64_t col) {
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t r = 0; r < nr; ++r) y[t * ldy + col + r] = out[t * 4 + r];
  }
}

template <bool kWide>
void Int8ChunkT(const WTile& tile, int64_t rows, const QActs& a, int64_t gs, float* y, int64_t ldy,
                int64_t row0) {
  const int64_t kp = tile.kp, kf = kp / 4;
  const int64_t gl = gs == 16 ? a.layout.g16 : a.layout.g32;
  const float* as = gs == 16 ? a.s16 : a.s32;  // [n, gl]
  HWY_ALIGN float out[16];                     // [4 tokens, 4 rows]
  for (int64_t t0 = 0; t0 < a.n; t0 += 4) {
    const int64_t nt = a.n - t0 < 4 ? a.n - t0 : 4;
    const int8_t* aq = a.qs + t0 * kp;   // [nt, kp]
    const float* ad = a.dexp + t0 * kf;  // [nt, kp / 4]
    const float* at = as + t0 * gl;      // [nt, gl]
    for (int64_t r = 0; r < rows; r += 4) {
      const uint8_t* q = tile.q + r * kp;   // [4, kp]
      const float* s = tile.sexp + r * kf;  // [4, kp / 4]
      const float* m = tile.m + r * gl;     // [4, gl]
      switch (nt) {
        case 1: Int8Tile<1, kWide>(q, s, m, gl, aq, ad, at, kp, out); break;
        case 2: Int8Tile<2, kWide>(q, s, m, gl, aq, ad, at, kp, out); break;
        case 3: Int8Tile<3, kWide>(q, s, m, gl, aq, ad, at, kp, out); break;
        default: Int8Tile<4, kWide>(q, s, m, gl, aq, ad, at, kp, out); break;
      }
      Scatter(out, nt, rows - r < 4 ? rows - r : 4, y + t0 * ldy, ldy, row0 + r);
    }
  }
}

void Int8Chunk(const WTile& tile, int64_t rows, const QActs& a, int64_t gs, float* y, int64_t ldy,
               int64_t row0) {
#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_SCALAR || HWY_MAX_BYTES == 16
  Int8ChunkT<false>(tile, rows, a, gs, y, ldy, row0);  // no saturation on these targets
#else
  if (tile.wide) {
    Int8ChunkT<true>(tile, rows, a, gs, y, ldy, row0);
  } else {
    Int8ChunkT<false>(tile, rows, a, gs, y, ldy, row0);
  }
#endif
}

void F32Chunk(const float* w, int64_t kp, int64_t rows, const float* x, int64_t n_tokens, float* y,
              int64_t ldy, int64_t row0) {
  HWY_ALIGN float out[16];  // [4 tokens, 4 rows]
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
    const int64_t nt = n_tokens - t0 < 4 ? n_tokens - t0 : 4;
    const float* xt = x + t0 * kp;  // [nt, kp]
    for (int64_t r = 0; r < rows; r += 4) {
      const float* wr = w + r * kp;  // [4, kp]
      switch (nt) {
        case 1: F32Tile<1>(wr, kp, xt, out); break;
        case 2: F32Tile<2>(wr, kp, xt, out); break;
        case 3: F32Tile<3>(wr, kp, xt, out); break;
        default: F32Tile<4>(wr, kp, xt, out); break;
      }
      Scatter(out, nt, rows - r < 4 ? rows - r : 4, y + t0 * ldy, ldy, row0 + r);
    }
  }
}

}  // namespace rinfer::cpu::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu::internal {

HWY_EXPORT(TargetName);
HWY_EXPORT(Int8Chunk);
HWY_EXPORT(F32Chunk);

const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void int8_chunk(const WTile& tile, int64_t rows, const QActs& a, int64_t gs, float* y, int64_t ldy,
                int64_t row0) {
  HWY_DYNAMIC_DISPATCH(Int8Chunk)(tile, rows, a, gs, y, ldy, row0);
}

void f32_chunk(const float* w, int64_t kp, int64_t rows, const float* x, int64_t n_tokens, float* y,
               int64_t ldy, int64_t row0) {
  HWY_DYNAMIC_DISPATCH(F32Chunk)(w, kp, rows, x, n_tokens, y, ldy, row0);
}

}  // namespace rinfer::cpu::internal
#endif  // HWY_ONCE
