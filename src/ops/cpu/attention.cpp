// attention: causal multi-head attention with grouped-query heads, reading the f32 KV cache in
// place (shapes in ops.h), linear or as a ring (kv_rows > 0: position j in row j % kv_rows).
//
// Reference: for each (token, head): scores in double, exact softmax (double), output
// accumulated in double.
// Fast: flash-attention style. A work item is one KV head and a block of up to kTokBlock
// tokens, i.e. the G = n_head / n_head_kv query heads that share that KV head times those
// tokens (decode: one item per query head). The item walks the KV positions in blocks of
// kKvBlock, so each K/V block is read from memory once and reused from L1 by all the item's
// query rows; every row keeps an online softmax (running max m, running sum l, output
// accumulator rescaled by exp(m_old - m_new)). In a ring, blocks also end where the ring
// wraps, so each block's rows stay contiguous. Scores are f32 vector dot products, exp is
// Highway's vector Exp. Items are spread over the pool.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/attention.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/cpu/ops.h"

#ifndef RINFER_OPS_CPU_ATTENTION_CONSTANTS
#define RINFER_OPS_CPU_ATTENTION_CONSTANTS  // this file is compiled once per SIMD target
namespace rinfer::cpu::attn {
inline constexpr int64_t kTokBlock = 4;  // tokens per work item (prefill)
inline constexpr int64_t kKvBlock = 64;  // KV positions per block
}  // namespace rinfer::cpu::attn
#endif

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using attn::kKvBlock;
using attn::kTokBlock;

using DF = hn::ScalableTag<float>;

// sum_d q[d] * k[d]
HWY_INLINE float Dot(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, int64_t n) {
  const DF df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df);
  auto a1 = hn::Zero(df);
  int64_t d = 0;
  for (; d + 2 * nl <= n; d += 2 * nl) {
    a0 = hn::MulAdd(hn::LoadU(df, q + d), hn::LoadU(df, k + d), a0);
    a1 = hn::MulAdd(hn::LoadU(df, q + d + nl), hn::LoadU(df, k + d + nl), a1);
  }
  for (; d + nl <= n; d += nl) a0 = hn::MulAdd(hn::LoadU(df, q + d), hn::LoadU(df, k + d), a0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; d < n; ++d) s += q[d] * k[d];
  return s;
}

#if HWY_TARGET == HWY_AVX3_DL
// The 16 scores q . k[j * stride] for j < 16 (head_dim a multiple of 16): 16 accumulators, then
// one transposing reduction instead of 16 horizontal sums.
HWY_INLINE __m512 Scores16(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, int64_t stride,
                           int64_t dh) {
  __m512 acc[16];
  HWY_UNROLL(16)
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 64 <= dh; d += 64) {  // 4 vectors of q in registers, each K row read in order
    const __m512 q0 = _mm512_loadu_ps(q + d), q1 = _mm512_loadu_ps(q + d + 16),
                 q2 = _mm512_loadu_ps(q + d + 32), q3 = _mm512_loadu_ps(q + d + 48);
    const float* kj = k + d;
    HWY_UNROLL(16)
    for (int j = 0; j < 16; ++j, kj += stride) {
      __m512 a = _mm512_fmadd_ps(q0, _mm512_loadu_ps(kj), acc[j]);
      a = _mm512_fmadd_ps(q1, _mm512_loadu_ps(kj + 16), a);
      a = _mm512_fmadd_ps(q2, _mm512_loadu_ps(kj + 32), a);
      acc[j] = _mm512_fmadd_ps(q3, _mm512_loadu_ps(kj + 48), a);
    }
  }
  for (; d < dh; d += 16) {
    const __m512 qv = _mm512_loadu_ps(q + d);
    const float* kj = k + d;
    HWY_UNROLL(16)
    for (int j = 0; j < 16; ++j, kj += stride)
      acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kj), acc[j]);
  }
  // Per 128-bit lane of u[g]: partial sums of scores 4g..4g+3.
  const auto partial = [](__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(v0, v1), _mm512_unpackhi_ps(v0, v1));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(v2, v3), _mm512_unpackhi_ps(v2, v3));
    return _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
  };
  const __m512 u0 = partial(acc[0], acc[1], acc[2], acc[3]);
  const __m512 u1 = partial(acc[4], acc[5], acc[6], acc[7]);
  const __m512 u2 = partial(acc[8], acc[9], acc[10], acc[11]);
  const __m512 u3 = partial(acc[12], acc[13], acc[14], acc[15]);
  const __m512 y01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x44), _mm512_shuffle_f32x4(u0, u1, 0xEE));
  const __m512 y23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, 0x44), _mm512_shuffle_f32x4(u2, u3, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, 0x88), _mm512_shuffle_f32x4(y01, y23, 0xDD));
}
#endif

// p[j] = scale * q . k[(j0 + j) * stride] for j < nj; returns max(mx, max_j p[j]).
HWY_INLINE float ScoreBlock(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                            int64_t stride, int64_t nj, int64_t dh, float scale, float mx,
                            float* HWY_RESTRICT p) {
  int64_t j = 0;
#if HWY_TARGET == HWY_AVX3_DL
  if (dh % 16 == 0 && nj >= 16) {
    __m512 vmax = _mm512_set1_ps(mx);
    const __m512 vs = _mm512_set1_ps(scale);
    for (; j + 16 <= nj; j += 16) {
      const __m512 sj = _mm512_mul_ps(Scores16(q, k + j * stride, stride, dh), vs);
      _mm512_storeu_ps(p + j, sj);
      vmax = _mm512_max_ps(vmax, sj);
    }
    mx = _mm512_reduce_max_ps(vmax);
  }
#endif
  for (; j < nj; ++j) {
    p[j] = Dot(q, k + j * stride, dh) * scale;
    mx = std::max(mx, p[j]);
  }
  return mx;
}

// o[d] = o[d] * alpha + sum_j p[j] * v[j * stride + d]
HWY_INLINE void AccumulatePV(float* HWY_RESTRICT o, float alpha, const float* HWY_RESTRICT p,
                             const float* HWY_RESTRICT v, int64_t stride, int64_t nj, int64_t n) {
  const DF df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  const auto va = hn::Set(df, alpha);
  int64_t d = 0;
  for (; d + 4 * nl <= n; d += 4 * nl) {
    // Two sets of accumulators (even / odd positions) so the FMA latency is hidden.
    auto o0 = hn::Mul(hn::LoadU(df, o + d), va);
    auto o1 = hn::Mul(hn::LoadU(df, o + d + nl), va);
    auto o2 = hn::Mul(hn::LoadU(df, o + d + 2 * nl), va);
    auto o3 = hn::Mul(hn::LoadU(df, o + d + 3 * nl), va);
    auto e0 = hn::Zero(df), e1 = hn::Zero(df), e2 = hn::Zero(df), e3 = hn::Zero(df);
    int64_t j = 0;
    for (; j + 2 <= nj; j += 2) {
      const float* vj = v + j * stride + d;
      const auto pj = hn::Set(df, p[j]);
      o0 = hn::MulAdd(pj, hn::LoadU(df, vj), o0);
      o1 = hn::MulAdd(pj, hn::LoadU(df, vj + nl), o1);
      o2 = hn::MulAdd(pj, hn::LoadU(df, vj + 2 * nl), o2);
      o3 = hn::MulAdd(pj, hn::LoadU(df, vj + 3 * nl), o3);
      const float* vk = vj + stride;
      const auto pk = hn::Set(df, p[j + 1]);
      e0 = hn::MulAdd(pk, hn::LoadU(df, vk), e0);
      e1 = hn::MulAdd(pk, hn::LoadU(df, vk + nl), e1);
      e2 = hn::MulAdd(pk, hn::LoadU(df, vk + 2 * nl), e2);
      e3 = hn::MulAdd(pk, hn::LoadU(df, vk + 3 * nl), e3);
    }
    if (j < nj) {
      const float* vj = v + j * stride + d;
      const auto pj = hn::Set(df, p[j]);
      o0 = hn::MulAdd(pj, hn::LoadU(df, vj), o0);
      o1 = hn::MulAdd(pj, hn::LoadU(df, vj + nl), o1);
      o2 = hn::MulAdd(pj, hn::LoadU(df, vj + 2 * nl), o2);
      o3 = hn::MulAdd(pj, hn::LoadU(df, vj + 3 * nl), o3);
    }
    hn::StoreU(hn::Add(o0, e0), df, o + d);
    hn::StoreU(hn::Add(o1, e1), df, o + d + nl);
    hn::StoreU(hn::Add(o2, e2), df, o + d + 2 * nl);
    hn::StoreU(hn::Add(o3, e3), df, o + d + 3 * nl);
  }
  for (; d + nl <= n; d += nl) {
    auto o0 = hn::Mul(hn::LoadU(df, o + d), va);
    for (int64_t j = 0; j < nj; ++j) {
      o0 = hn::MulAdd(hn::Set(df, p[j]), hn::LoadU(df, v + j * stride + d), o0);
    }
    hn::StoreU(o0, df, o + d);
  }
  for (; d < n; ++d) {
    float acc = o[d] * alpha;
    for (int64_t j = 0; j < nj; ++j) acc += p[j] * v[j * stride + d];
    o[d] = acc;
  }
}

// One work item: query rows (token t, head h) for t in [t0, t1), h in [h0, h1), all reading KV
// head hk at positions [kv_lo, kv_hi) (and the causal limit). With part == nullptr the rows are
// normalized into out; otherwise each row's partial state goes to part[r * (dh + 2) ..] as
// (m, l, o[dh]) for a later merge.
void AttendItem(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                int64_t t0, int64_t t1, int64_t h0, int64_t h1, int64_t hk, int64_t kv_lo,
                int64_t kv_hi, float* part) {
  const DF df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dh = s.head_dim;
  const int64_t nh = h1 - h0;
  const int64_t rows = (t1 - t0) * nh;
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(rows * (dh + 2) + kKvBlock + nl));
  float* o = buf.data();     // [rows, dh] output accumulators
  float* m = o + rows * dh;  // [rows] running max
  float* l = m + rows;       // [rows] running sum
  float* p = l + rows;       // [kKvBlock + nl] scores / probabilities
  std::fill(o, o + rows * dh, 0.0f);
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.0f);
  const int64_t first_pos = s.n_kv - s.n_tokens;  // absolute position of token 0
  // Positions [kv_lo, kv_end) are visible to some row.
  const int64_t kv_end = std::min(first_pos + t1, kv_hi);
  const float* kh = k + hk * dh;  // [n_kv or kv_rows, kv_row_stride] at head hk
  const float* vh = v + hk * dh;
  for (int64_t j0 = kv_lo, jb; j0 < kv_end; j0 = jb) {
    jb = std::min(j0 + kKvBlock, kv_end);
    // In a ring a block ends at the wrap, so its rows are contiguous.
    if (s.kv_rows > 0) jb = std::min(jb, (j0 / s.kv_rows + 1) * s.kv_rows);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = t0 + r / nh, h = h0 + r % nh;
      const int64_t j1 = std::min(jb, first_pos + t + 1);  // causal limit
      // Sliding window: the row sees positions > its own - window.
      const int64_t js = s.window > 0 ? std::max(j0, first_pos + t - s.window + 1) : j0;
      if (j1 <= js) continue;
      const int64_t nj = j1 - js;
      const int64_t row0 = s.kv_rows > 0 ? js % s.kv_rows : js;  // row of position js
      const float* qr = q + (t * s.n_head + h) * dh;             // [dh]
      const float mx =
          ScoreBlock(qr, kh + row0 * s.kv_row_stride, s.kv_row_stride, nj, dh, s.scale, m[r], p);
      const float alpha = std::exp(m[r] - mx);  // 0 on the first block (m = -inf)
      const auto vmx = hn::Set(df, mx);
      auto vsum = hn::Zero(df);
      int64_t j = 0;
      for (; j + nl <= nj; j += nl) {
        const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, p + j), vmx));
        hn::StoreU(e, df, p + j);
        vsum = hn::Add(vsum, e);
      }
      float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
      for (; j < nj; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      l[r] = l[r] * alpha + sum;
      m[r] = mx;
      AccumulatePV(o + r * dh, alpha, p, vh + row0 * s.kv_row_stride, s.kv_row_stride, nj, dh);
    }
  }
  if (part != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      float* pr = part + r * (dh + 2);  // [m, l, o[dh]]
      pr[0] = m[r];
      pr[1] = l[r];
      std::copy(o + r * dh, o + (r + 1) * dh, pr + 2);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / nh, h = h0 + r % nh;
    float* dst = out + (t * s.n_head + h) * dh;  // [dh]
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    for (int64_t d = 0; d < dh; ++d) dst[d] = o[r * dh + d] * inv;
  }
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(AttendItem);

namespace {

Status check_attention(const AttentionShape& s, const float* q, const float* k, const float* v,
                       const float* out) {
  if (s.n_tokens < 0 || s.n_kv < 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0) {
    return invalid_argument(
        "attention: bad shape n_tokens {} n_kv {} n_head {} n_head_kv {} head_dim {}", s.n_tokens,
        s.n_kv, s.n_head, s.n_head_kv, s.head_dim);
  }
  if (s.n_head % s.n_head_kv != 0) {
    return invalid_argument("attention: n_head {} is not a multiple of n_head_kv {}", s.n_head,
                            s.n_head_kv);
  }
  if (s.n_tokens > s.n_kv) {
    return invalid_argument("attention: {} new tokens but only {} kv positions", s.n_tokens,
                            s.n_kv);
  }
  if (s.window < 0) return invalid_argument("attention: negative window {}", s.window);
  if (s.kv_rows < 0) return invalid_argument("attention: negative kv_rows {}", s.kv_rows);
  if (s.kv_rows > 0) {
    // Every position some token sees must have its own row.
    const int64_t seen = s.window > 0 ? std::min(s.n_kv, s.n_tokens + s.window - 1) : s.n_kv;
    if (s.kv_rows < seen) {
      return invalid_argument(
          "attention: a ring of {} kv rows cannot hold the {} positions that {} tokens with "
          "window {} see",
          s.kv_rows, seen, s.n_tokens, s.window);
    }
  }
  if (s.kv_row_stride < s.n_head_kv * s.head_dim) {
    return invalid_argument("attention: kv_row_stride {} < n_head_kv * head_dim = {}",
                            s.kv_row_stride, s.n_head_kv * s.head_dim);
  }
  if (s.n_tokens > 0 && (q == nullptr || k == nullptr || v == nullptr || out == nullptr)) {
    return invalid_argument("attention: null pointer");
  }
  return ok_status();
}

void attention_reference(const AttentionShape& s, const float* q, const float* k, const float* v,
                         float* out) {
  const int64_t dh = s.head_dim, group = s.n_head / s.n_head_kv;
  std::vector<double> p(static_cast<size_t>(s.n_kv));  // [n_kv]
  std::vector<double> acc(static_cast<size_t>(dh));    // [head_dim]
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    const int64_t pos = s.n_kv - s.n_tokens + t;
    const int64_t j_lo = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t hk = h / group;
      const float* qr = q + (t * s.n_head + h) * dh;  // [head_dim]
      double mx = -INFINITY;
      for (int64_t j = j_lo; j <= pos; ++j) {
        const int64_t row = s.kv_rows > 0 ? j % s.kv_rows : j;
        const float* kj = k + row * s.kv_row_stride + hk * dh;  // [head_dim]
        double d = 0.0;
        for (int64_t i = 0; i < dh; ++i) d += static_cast<double>(qr[i]) * kj[i];
        p[static_cast<size_t>(j)] = d * static_cast<double>(s.scale);
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (int64_t j = j_lo; j <= pos; ++j) {
        p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx);
        sum += p[static_cast<size_t>(j)];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = j_lo; j <= pos; ++j) {
        const int64_t row = s.kv_rows > 0 ? j % s.kv_rows : j;
        const float* vj = v + row * s.kv_row_stride + hk * dh;  // [head_dim]
        const double w = p[static_cast<size_t>(j)] / sum;
        for (int64_t i = 0; i < dh; ++i) acc[static_cast<size_t>(i)] += w * vj[i];
      }
      float* dst = out + (t * s.n_head + h) * dh;
      for (int64_t i = 0; i < dh; ++i) dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  }
}

}  // namespace

Status attention(const OpContext& ctx, const AttentionShape& s, const float* q, const float* k,
                 const float* v, float* out) {
  RINFER_RETURN_IF_ERROR(check_attention(s, q, k, v, out));
  if (s.n_tokens == 0) return ok_status();
  if (ctx.impl == Impl::kReference) {
    attention_reference(s, q, k, v, out);
    return ok_status();
  }
  const int64_t group = s.n_head / s.n_head_kv;
  const int64_t dh = s.head_dim;
  if (s.n_tokens == 1) {
    // Decode: one item per (KV head, slice of ~128 positions), the group's query heads sharing
    // each K/V row; slices are merged afterwards (flash-decoding).
    // With a sliding window only the last `window` positions are read.
    const int64_t kv_lo0 = s.window > 0 ? std::max<int64_t>(0, s.n_kv - s.window) : 0;
    const int64_t n_vis = s.n_kv - kv_lo0;
    const int64_t n_split = std::clamp<int64_t>((n_vis + 127) / 128, 1, 64);
    const int64_t n_items = s.n_head_kv * n_split;
    std::vector<float> part;  // [n_head_kv, n_split, group, dh + 2]
    if (n_split > 1) part.resize(static_cast<size_t>(n_items * group * (dh + 2)));
    const auto fn = [&](int64_t i0, int64_t i1) {
      for (int64_t it = i0; it < i1; ++it) {
        const int64_t hk = it / n_split, sp = it % n_split;
        const int64_t lo = kv_lo0 + n_vis * sp / n_split;
        const int64_t hi = kv_lo0 + n_vis * (sp + 1) / n_split;
        HWY_DYNAMIC_DISPATCH(AttendItem)
        (s, q, k, v, out, 0, 1, hk * group, (hk + 1) * group, hk, lo, hi,
         n_split > 1 ? part.data() + it * group * (dh + 2) : nullptr);
      }
    };
    // Contexts under 4 MB of K/V are cheaper than a pool round trip (up to ~50 us, see matmul).
    const int64_t kv_bytes = 2 * n_vis * s.n_head_kv * dh * static_cast<int64_t>(sizeof(float));
    if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_items > 1 && kv_bytes >= (4 << 20)) {
      ctx.pool->parallel_for(0, n_items, 1, fn);
    } else {
      fn(0, n_items);
    }
    if (n_split > 1) {
      for (int64_t hk = 0; hk < s.n_head_kv; ++hk) {
        for (int64_t g = 0; g < group; ++g) {
          float mx = -INFINITY;
          for (int64_t sp = 0; sp < n_split; ++sp) {
            mx = std::max(mx,
                          part[static_cast<size_t>(((hk * n_split + sp) * group + g) * (dh + 2))]);
          }
          float* dst = out + (hk * group + g) * dh;  // [dh]
          std::fill(dst, dst + dh, 0.0f);
          float sum = 0.0f;
          for (int64_t sp = 0; sp < n_split; ++sp) {
            const float* pr = part.data() + ((hk * n_split + sp) * group + g) * (dh + 2);
            const float w = pr[1] > 0.0f ? std::exp(pr[0] - mx) : 0.0f;
            sum += pr[1] * w;
            for (int64_t d = 0; d < dh; ++d) dst[d] += pr[2 + d] * w;
          }
          const float inv = 1.0f / sum;
          for (int64_t d = 0; d < dh; ++d) dst[d] *= inv;
        }
      }
    }
    return ok_status();
  }
  // Prefill: one item per (KV head, block of tokens).
  const int64_t n_tblocks = (s.n_tokens + attn::kTokBlock - 1) / attn::kTokBlock;
  const int64_t n_items = s.n_head_kv * n_tblocks;
  const auto fn = [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      // Later token blocks see more positions: walk them first for a better balance.
      const int64_t tb = n_tblocks - 1 - it / s.n_head_kv;
      const int64_t hk = it % s.n_head_kv;
      const int64_t t0 = tb * attn::kTokBlock;
      const int64_t t1 = std::min(s.n_tokens, t0 + attn::kTokBlock);
      // The block's first token sees nothing before its position - window + 1.
      const int64_t kv_lo =
          s.window > 0 ? std::max<int64_t>(0, s.n_kv - s.n_tokens + t0 - s.window + 1) : 0;
      HWY_DYNAMIC_DISPATCH(AttendItem)
      (s, q, k, v, out, t0, t1, hk * group, (hk + 1) * group, hk, kv_lo, s.n_kv, nullptr);
    }
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_items > 1) {
    ctx.pool->parallel_for(0, n_items, 1, fn);
  } else {
    fn(0, n_items);
  }
  return ok_status();
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
