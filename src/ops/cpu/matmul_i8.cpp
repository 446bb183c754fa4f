// W8A8 matmul on the CPU: y[t, o] = w_scale[o] * sum_g x_scale[t, g] * sum_{i in g} w[o, i] *
// xq[t, i], the weights int8 codes with one f32 scale per row (per output channel), the
// activations quantized per token to int8 with one scale per group g of 64 columns (x_scale =
// max|x| / 127 over the group, codes rounded to nearest even): one scale for a whole activation
// row lets outlier channels coarsen every other one (docs/strategies/quantization.md).
//
// The weights are packed at load into panels of 16 rows (pack_w8a8): for each group of 4
// columns, the 16 rows' 4 bytes, so one 64-byte vector holds a 4-column step of 16 rows, and a
// panel is read front to back as one stream. The bytes are code + 128 (unsigned), which is what
// AVX-512 VNNI's vpdpbusd takes as its unsigned operand; the token's 4 int8 codes of the step,
// broadcast, are the signed one. Each int32 lane then sums one row's products with no reduction
// at the end, and the +128 comes back out through the token's code sum: sum (w + 128) xq =
// sum w xq + 128 sum xq. The integer sums are exact (|sum| <= 127 * 127 * n_in < 2^31 for rows
// up to 133,000 wide), so the only rounding is the activations' and the final float multiply.
// A register tile of 2 panels x up to 6 tokens keeps 12 accumulators; panels are split over the
// pool; prefill walks the tokens in blocks whose codes stay in cache while the thread's panels
// pass over them. Without VNNI a scalar loop gives the same integers and the same floats.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/matmul_internal.h"
#include "ops/cpu/ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rinfer::cpu {

namespace internal {

namespace {

void quantize_scalar(const float* x, int64_t n_tokens, int64_t k, const I8Acts& a) {
  const int64_t ng = a.groups();
  for (int64_t t = 0; t < n_tokens; ++t) {
    int8_t* q = a.q + t * a.kp;
    for (int64_t g = 0; g < ng; ++g) {
      const float* xg = x + t * k + g * kW8A8Group;
      const int64_t n = std::min(kW8A8Group, k - g * kW8A8Group);
      float amax = 0.0f;
      for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(xg[i]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const auto v = static_cast<int32_t>(std::nearbyint(xg[i] * inv));
        q[g * kW8A8Group + i] = static_cast<int8_t>(v);
        sum += v;
      }
      a.scale[t * ng + g] = amax / 127.0f;
      a.sum[t * ng + g] = sum;
    }
    std::memset(q + k, 0, static_cast<size_t>(a.kp - k));
  }
}

// The scalar kernel (the reference of the VNNI one, and the fallback): exact int32 sums.
void panels_scalar(const uint8_t* w, int64_t n_out, int64_t k, const float* w_scale, int64_t p0,
                   int64_t p1, const I8Acts& a, int64_t n_tokens, float* y, int64_t ldy) {
  const int64_t ng = a.groups();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int8_t* q = a.q + t * a.kp;
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* panel = w + p * kW8A8Panel * k;
      for (int64_t j = 0; j < kW8A8Panel && p * kW8A8Panel + j < n_out; ++j) {
        float f = 0.0f;
        for (int64_t g = 0; g < ng; ++g) {
          int32_t acc = 0;  // the unsigned bytes (code + 128) times the codes
          const int64_t end = std::min(k, (g + 1) * kW8A8Group);
          for (int64_t i = g * kW8A8Group; i < end; ++i) {
            acc += static_cast<int32_t>(panel[(i / 4) * 64 + j * 4 + i % 4]) * q[i];
          }
          f = i8_group_add(acc, a.sum[t * ng + g], a.scale[t * ng + g], f);
        }
        const int64_t o = p * kW8A8Panel + j;
        y[t * ldy + o] = f * w_scale[o];
      }
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RINFER_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// Token block of the prefill walk: its codes (kTokBlock x kp bytes) stay in cache while the
// thread's panels pass over them.
constexpr int64_t kTokBlock = 48;
// How far ahead of its reads the first pass over a panel prefetches (the hardware prefetchers
// stop at page boundaries and restart slowly on every matrix).
constexpr int64_t kPrefetchBytes = 4096;

// Sum of the 16 int32 lanes (GCC 12's _mm512_reduce_add_epi32 warns of an undefined operand).
RINFER_VNNI inline int32_t lane_sum(__m512i v) {
  const __m256i s8 = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xff, v, 0),
                                      _mm512_maskz_extracti64x4_epi64(0xff, v, 1));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  return _mm_cvtsi128_si32(s4);
}

// NP panels (w0, w0 + panel bytes) x NT tokens from t0; writes y for rows below n_out.
template <int NP, int NT>
RINFER_VNNI inline void tile_vnni(const uint8_t* w0, int64_t k, int64_t row0, int64_t n_out,
                                  const float* w_scale, const I8Acts& a, int64_t t0, bool pf,
                                  float* y, int64_t ldy) {
  __m512i acc[NP][NT];
  __m512 f[NP][NT];
#pragma GCC unroll 8
  for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) f[p][t] = _mm512_setzero_ps();
  }
  const int64_t pb = kW8A8Panel * k;  // bytes of a panel
  const int64_t steps = k / 4, ng = a.groups();
  for (int64_t gi = 0; gi < ng; ++gi) {
#pragma GCC unroll 8
    for (auto& row : acc) {
#pragma GCC unroll 8
      for (__m512i& v : row) v = _mm512_setzero_si512();
    }
    const int64_t g_end = std::min(steps, (gi + 1) * (kW8A8Group / 4));
    for (int64_t g = gi * (kW8A8Group / 4); g < g_end; ++g) {
      __m512i wv[NP];
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) {
        if (pf) {
          _mm_prefetch(reinterpret_cast<const char*>(w0 + p * pb + g * 64 + kPrefetchBytes),
                       _MM_HINT_T0);
        }
        wv[p] = _mm512_loadu_si512(w0 + p * pb + g * 64);
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        int32_t four;
        std::memcpy(&four, a.q + (t0 + t) * a.kp + g * 4, 4);
        const __m512i av = _mm512_set1_epi32(four);
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) acc[p][t] = _mm512_dpbusd_epi32(acc[p][t], wv[p], av);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const int64_t at = (t0 + t) * ng + gi;
      const __m512i off = _mm512_set1_epi32(128 * a.sum[at]);
      const __m512 xs = _mm512_set1_ps(a.scale[at]);
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) {
        f[p][t] = _mm512_fmadd_ps(
            _mm512_maskz_cvtepi32_ps(0xffff, _mm512_sub_epi32(acc[p][t], off)), xs, f[p][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < NP; ++p) {
    const int64_t r = row0 + p * kW8A8Panel;
    const int64_t left = n_out - r;
    if (left <= 0) break;
    const __mmask16 m = left >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << left) - 1);
    const __m512 ws = _mm512_maskz_loadu_ps(m, w_scale + r);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, m, _mm512_mul_ps(f[p][t], ws));
    }
  }
}

// One token (decode): each panel read front to back as one stream, the 4-column steps of a
// group spread over 4 accumulators so the dot products do not wait on each other.
RINFER_VNNI void matvec_vnni(const uint8_t* w, int64_t n_out, int64_t k, const float* w_scale,
                             int64_t p0, int64_t p1, const I8Acts& a, float* y) {
  const int64_t pb = kW8A8Panel * k;
  const int64_t steps = k / 4, ng = a.groups();
  const int8_t* q = a.q;
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* panel = w + p * pb;
    __m512 f = _mm512_setzero_ps();
    for (int64_t gi = 0; gi < ng; ++gi) {
      __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
      const int64_t g_end = std::min(steps, (gi + 1) * (kW8A8Group / 4));
      int64_t g = gi * (kW8A8Group / 4);
      for (; g + 4 <= g_end; g += 4) {
        _mm_prefetch(reinterpret_cast<const char*>(panel + g * 64 + kPrefetchBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(panel + g * 64 + 128 + kPrefetchBytes),
                     _MM_HINT_T0);
#pragma GCC unroll 8
        for (int u = 0; u < 4; ++u) {
          int32_t four;
          std::memcpy(&four, q + (g + u) * 4, 4);
          acc[u] = _mm512_dpbusd_epi32(acc[u], _mm512_loadu_si512(panel + (g + u) * 64),
                                       _mm512_set1_epi32(four));
        }
      }
      for (; g < g_end; ++g) {
        int32_t four;
        std::memcpy(&four, q + g * 4, 4);
        acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_loadu_si512(panel + g * 64),
                                     _mm512_set1_epi32(four));
      }
      const __m512i sum =
          _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
      const __m512i s = _mm512_sub_epi32(sum, _mm512_set1_epi32(128 * a.sum[gi]));
      f = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, s), _mm512_set1_ps(a.scale[gi]), f);
    }
    const int64_t r = p * kW8A8Panel;
    const int64_t left = n_out - r;
    const __mmask16 m = left >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << left) - 1);
    _mm512_mask_storeu_ps(y + r, m, _mm512_mul_ps(f, _mm512_maskz_loadu_ps(m, w_scale + r)));
  }
}

template <int NP>
RINFER_VNNI void tokens_vnni(const uint8_t* w0, int64_t k, int64_t row0, int64_t n_out,
                             const float* w_scale, const I8Acts& a, int64_t t, int nt, bool pf,
                             float* y, int64_t ldy) {
  switch (nt) {
    case 1: tile_vnni<NP, 1>(w0, k, row0, n_out, w_scale, a, t, pf, y, ldy); break;
    case 2: tile_vnni<NP, 2>(w0, k, row0, n_out, w_scale, a, t, pf, y, ldy); break;
    case 3: tile_vnni<NP, 3>(w0, k, row0, n_out, w_scale, a, t, pf, y, ldy); break;
    case 4: tile_vnni<NP, 4>(w0, k, row0, n_out, w_scale, a, t, pf, y, ldy); break;
    case 5: tile_vnni<NP, 5>(w0, k, row0, n_out, w_scale, a, t, pf, y, ldy); break;
    default: tile_vnni<NP, 6>(w0, k, row0, n_out, w_scale, a, t, pf, y, ldy); break;
  }
}

RINFER_VNNI void panels_vnni(const uint8_t* w, int64_t n_out, int64_t k, const float* w_scale,
                             int64_t p0, int64_t p1, const I8Acts& a, int64_t n_tokens, float* y,
                             int64_t ldy) {
  if (n_tokens == 1) {
    matvec_vnni(w, n_out, k, w_scale, p0, p1, a, y);
    return;
  }
  const int64_t pb = kW8A8Panel * k;
  for (int64_t tb = 0; tb < n_tokens; tb += kTokBlock) {
    const int64_t te = std::min(n_tokens, tb + kTokBlock);
    for (int64_t p = p0; p < p1; p += 2) {
      const int np = p + 1 < p1 ? 2 : 1;
      for (int64_t t = tb; t < te; t += 6) {
        const int nt = static_cast<int>(std::min<int64_t>(6, te - t));
        const bool pf = tb == 0 && t == tb;
        if (np == 2) {
          tokens_vnni<2>(w + p * pb, k, p * kW8A8Panel, n_out, w_scale, a, t, nt, pf, y, ldy);
        } else {
          tokens_vnni<1>(w + p * pb, k, p * kW8A8Panel, n_out, w_scale, a, t, nt, pf, y, ldy);
        }
      }
    }
  }
}

// quantize_scalar's arithmetic 16 lanes at a time (max is exact in any order; the products and
// the rounding to nearest even are the same operations).
RINFER_VNNI void quantize_vnni(const float* x, int64_t n_tokens, int64_t k, const I8Acts& a) {
  const int64_t ng = a.groups();
  alignas(64) float lanes[16];
  for (int64_t t = 0; t < n_tokens; ++t) {
    int8_t* q = a.q + t * a.kp;
    for (int64_t g = 0; g < ng; ++g) {
      const float* xg = x + t * k + g * kW8A8Group;
      const int64_t n = std::min(kW8A8Group, k - g * kW8A8Group);
      const int64_t n16 = n / 16 * 16;
      __m512 vmax = _mm512_setzero_ps();
      for (int64_t i = 0; i < n16; i += 16) {
        vmax = _mm512_maskz_max_ps(0xffff, vmax, _mm512_abs_ps(_mm512_loadu_ps(xg + i)));
      }
      _mm512_store_ps(lanes, vmax);
      float amax = 0.0f;
      for (float v : lanes) amax = std::max(amax, v);
      for (int64_t i = n16; i < n; ++i) amax = std::max(amax, std::fabs(xg[i]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m512 vinv = _mm512_set1_ps(inv);
      int8_t* qg = q + g * kW8A8Group;
      __m512i vsum = _mm512_setzero_si512();
      for (int64_t i = 0; i < n16; i += 16) {
        const __m512i v =
            _mm512_maskz_cvtps_epi32(0xffff, _mm512_mul_ps(_mm512_loadu_ps(xg + i), vinv));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qg + i),
                         _mm512_maskz_cvtsepi32_epi8(0xffff, v));
        vsum = _mm512_add_epi32(vsum, v);
      }
      int32_t sum = lane_sum(vsum);
      for (int64_t i = n16; i < n; ++i) {
        const auto v = static_cast<int32_t>(std::nearbyint(xg[i] * inv));
        qg[i] = static_cast<int8_t>(v);
        sum += v;
      }
      a.scale[t * ng + g] = amax / 127.0f;
      a.sum[t * ng + g] = sum;
    }
    std::memset(q + k, 0, static_cast<size_t>(a.kp - k));
  }
}

bool cpu_has_vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}
#else
bool cpu_has_vnni() { return false; }
#endif

}  // namespace

void w8a8_panels(const uint8_t* w, int64_t n_out, int64_t k, const float* w_scale, int64_t p0,
                 int64_t p1, const I8Acts& a, int64_t n_tokens, float* y, int64_t ldy,
                 bool scalar) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!scalar && cpu_has_vnni()) {
    panels_vnni(w, n_out, k, w_scale, p0, p1, a, n_tokens, y, ldy);
    return;
  }
#endif
  panels_scalar(w, n_out, k, w_scale, p0, p1, a, n_tokens, y, ldy);
}

void quantize_tokens_i8(const float* x, int64_t n_tokens, int64_t k, const I8Acts& a, bool scalar) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!scalar && cpu_has_vnni()) {
    quantize_vnni(x, n_tokens, k, a);
    return;
  }
#endif
  quantize_scalar(x, n_tokens, k, a);
}

bool has_i8_vnni() { return cpu_has_vnni(); }

}  // namespace internal

namespace {

thread_local internal::Scratch t_i8_acts;  // the quantized activations (caller thread)

// Matrices below this many weight bytes per call stay on the calling thread. Lower than the GGUF
// kernels' 4 MB (matmul.cpp): the panels stream fast enough that SmolLM2's decode matrices of 1-2
// MB gain from the second core despite the pool round trip (docs/strategies/quantization.md).
constexpr int64_t kMinParallelBytes = 1 << 20;

}  // namespace

Result<Tensor> pack_w8a8(const Tensor& codes) {
  if (!codes.defined() || codes.dtype() != DType::kI8 || codes.ndim() != 2 ||
      !codes.is_contiguous() || !codes.device().is_cpu()) {
    return invalid_argument("pack_w8a8: {} must be a contiguous 2-D int8 CPU tensor",
                            codes.defined() ? codes.to_string() : std::string("(undefined)"));
  }
  const int64_t n_out = codes.dim(0), k = codes.dim(1);
  if (k % 4 != 0 || k == 0 || n_out == 0) {
    return invalid_argument("pack_w8a8: rows of {} codes ({}) must be a non-zero multiple of 4", k,
                            codes.to_string());
  }
  const int64_t panels = (n_out + internal::kW8A8Panel - 1) / internal::kW8A8Panel;
  RINFER_ASSIGN_OR_RETURN(Tensor out,
                          Tensor::empty({panels, internal::kW8A8Panel * k}, DType::kU8));
  auto* dst = out.mutable_data_as<uint8_t>();
  const int8_t* src = codes.data_as<int8_t>();
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t j = 0; j < internal::kW8A8Panel; ++j) {
      const int64_t o = p * internal::kW8A8Panel + j;
      for (int64_t i = 0; i < k; ++i) {
        // Rows past n_out pack code 0 (their outputs are never stored).
        const int v = o < n_out ? src[o * k + i] : 0;
        dst[p * internal::kW8A8Panel * k + (i / 4) * 64 + j * 4 + i % 4] =
            static_cast<uint8_t>(v + 128);
      }
    }
  }
  return out;
}

Status matmul_i8_fast(const OpContext& ctx, std::span<const Tensor* const> ws,
                      std::span<const Tensor* const> scales, const float* x, int64_t n_tokens,
                      std::span<float* const> ys) {
  if (n_tokens == 0) return ok_status();
  const int64_t k = ws[0]->dim(1) / internal::kW8A8Panel;
  const int64_t kp = internal::round_up(k, 64);
  const int64_t ng = (k + internal::kW8A8Group - 1) / internal::kW8A8Group;
  const size_t bytes = static_cast<size_t>(n_tokens * kp + 8 * n_tokens * ng + 64);
  auto* mem = static_cast<uint8_t*>(t_i8_acts.get(bytes));
  if (mem == nullptr) {
    return out_of_memory("matmul: int8 activation scratch of {} tokens", n_tokens);
  }
  internal::I8Acts a;
  a.kp = kp;
  a.k = k;
  a.q = reinterpret_cast<int8_t*>(mem);
  a.scale = reinterpret_cast<float*>(mem + n_tokens * kp);
  a.sum = reinterpret_cast<int32_t*>(a.scale + n_tokens * ng);
  internal::quantize_tokens_i8(x, n_tokens, k, a, ctx.impl == Impl::kReference);

  // Every matrix's panels in one list, split over the pool together.
  int64_t panels = 0, total_bytes = 0;
  for (const Tensor* w : ws) {
    panels += w->dim(0);
    total_bytes += w->dim(0) * w->dim(1);
  }
  const bool scalar = ctx.impl == Impl::kReference;
  auto run = [&](int64_t g0, int64_t g1) {
    int64_t base = 0;
    for (size_t m = 0; m < ws.size(); ++m) {
      const int64_t np = ws[m]->dim(0), n_out = scales[m]->numel();
      const int64_t lo = std::max(g0, base), hi = std::min(g1, base + np);
      if (lo < hi) {
        internal::w8a8_panels(ws[m]->data_as<uint8_t>(), n_out, k, scales[m]->data_as<float>(),
                              lo - base, hi - base, a, n_tokens, ys[m], n_out, scalar);
      }
      base += np;
    }
  };
  ThreadPool* pool =
      n_tokens >= 4 || total_bytes * n_tokens >= kMinParallelBytes ? ctx.pool : nullptr;
  if (pool == nullptr || pool->size() == 1) {
    run(0, panels);
  } else {
    pool->parallel_for(0, panels, 2, run);
  }
  return ok_status();
}

}  // namespace rinfer::cpu
