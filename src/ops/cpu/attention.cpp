// attention: causal multi-head attention with grouped-query heads, reading the f32 KV cache in
// place (shapes in ops.h): one sequence, linear or as a ring (kv_rows > 0: position j in row
// j % kv_rows), or many sequences over a paged cache (position j in row
// table[j / block_size] * block_size + j % block_size).
//
// Reference: for each (sequence, token, head): scores in double, exact softmax (double), output
// accumulated in double.
// Fast: flash-attention style. A work item is one sequence, one KV head and a block of up to
// kTokBlock tokens, i.e. the G = n_head / n_head_kv query heads that share that KV head times
// those tokens (decode: the G heads of one token over a slice of the positions). The item walks
// the KV positions in blocks of kKvBlock, so each K/V block is read from memory once and reused
// from L1 by all the item's query rows; every row keeps an online softmax (running max m,
// running sum l, output accumulator rescaled by exp(m_old - m_new)). A block is scored and
// accumulated in runs of consecutive rows: a run ends where a ring wraps or a paged block ends.
// Scores are f32 vector dot products, exp is Highway's vector Exp. One work list covers all the
// sequences of a call and is spread over the pool; decode slices are merged afterwards.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/attention.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cpu/ops.h"

#ifndef RINFER_OPS_CPU_ATTENTION_CONSTANTS
#define RINFER_OPS_CPU_ATTENTION_CONSTANTS  // this file is compiled once per SIMD target
namespace rinfer::cpu::attn {
inline constexpr int64_t kTokBlock = 4;  // tokens per work item (prefill)
// With an int8 cache: each item widens the blocks it reads once, for more rows.
inline constexpr int64_t kTokBlockI8 = 16;
inline constexpr int64_t kKvBlock = 64;  // KV positions per block

// What every work item of a call shares. Sequence sq's queries and outputs are rows
// sq.q_start .. of q and out.
struct Call {
  const float* q = nullptr;  // [rows, n_head, head_dim]
  const float* k = nullptr;  // [kv rows, kv_row_stride]
  const float* v = nullptr;  // [kv rows, kv_row_stride]
  float* out = nullptr;      // [rows, n_head, head_dim]
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t kv_row_stride = 0;
  float scale = 1.0f;
  int64_t window = 0;
  bool causal = true;
  int64_t kv_rows = 0;     // > 0: a ring, position j in row j % kv_rows
  int64_t block_size = 0;  // > 0: paged, position j in row through sq.block_table
  // int8 K/V (k and v unused): rows of kv_row_stride bytes, codes then an f32 scale per group
  // of `group` codes from byte scales_at (PagedAttentionShape::kv_dtype).
  const uint8_t* k8 = nullptr;
  const uint8_t* v8 = nullptr;
  int64_t scales_at = 0;
  int64_t group = 0;
};

// Row `row`'s KV head hk of an int8 cache: its codes, and (in *scales) where its head_dim / group
// f32 scales start (read with scale_at: rows need not be 4-byte aligned).
inline const int8_t* codes_of(const Call& c, const uint8_t* base, int64_t row, int64_t hk,
                              const uint8_t** scales) {
  const uint8_t* r = base + row * c.kv_row_stride;
  *scales = r + c.scales_at + 4 * hk * (c.head_dim / c.group);
  return reinterpret_cast<const int8_t*>(r + hk * c.head_dim);
}
inline float scale_at(const uint8_t* scales, int64_t i) {
  float s;
  std::memcpy(&s, scales + 4 * i, 4);  // one load
  return s;
}
inline constexpr int64_t kMaxScalesPerHead = 256;

// n consecutive K/V rows from k and v (one KV head) that hold consecutive positions.
struct KvRun {
  const float* k;
  const float* v;
  int64_t n;
};

// The K/V row of position j of sequence sq.
inline int64_t kv_row(const Call& c, const AttentionSeq& sq, int64_t j) {
  if (c.block_size > 0) {
    return int64_t{sq.block_table[j / c.block_size]} * c.block_size + j % c.block_size;
  }
  return c.kv_rows > 0 ? j % c.kv_rows : j;
}

// One past the last position of the run of consecutive rows that holds position j.
inline int64_t run_end(const Call& c, int64_t j) {
  if (c.block_size > 0) return (j / c.block_size + 1) * c.block_size;
  return c.kv_rows > 0 ? (j / c.kv_rows + 1) * c.kv_rows : std::numeric_limits<int64_t>::max();
}

// The first position any query of sq sees (window), given the first token it handles.
inline int64_t first_seen(const Call& c, const AttentionSeq& sq, int64_t t0) {
  if (!c.causal || c.window <= 0) return 0;
  return std::max<int64_t>(0, sq.n_kv - sq.n_tokens + t0 - c.window + 1);
}
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

// p[j] = scale * q . k_j for the positions j of the runs (run r: rows runs[r].k + i * stride for
// i < runs[r].n, their scores following each other in p); returns max(mx, max_j p[j]).
HWY_INLINE float ScoreBlock(const float* HWY_RESTRICT q, const attn::KvRun* runs, int64_t n_runs,
                            int64_t stride, int64_t dh, float scale, float mx,
                            float* HWY_RESTRICT p) {
#if HWY_TARGET == HWY_AVX3_DL
  __m512 vmax = _mm512_set1_ps(mx);
  const __m512 vs = _mm512_set1_ps(scale);
#endif
  for (int64_t r = 0; r < n_runs; ++r) {
    const float* k = runs[r].k;
    const int64_t nj = runs[r].n;
    int64_t j = 0;
#if HWY_TARGET == HWY_AVX3_DL
    if (dh % 16 == 0) {
      for (; j + 16 <= nj; j += 16) {
        const __m512 sj = _mm512_mul_ps(Scores16(q, k + j * stride, stride, dh), vs);
        _mm512_storeu_ps(p + j, sj);
        vmax = _mm512_max_ps(vmax, sj);
      }
    }
#endif
    for (; j < nj; ++j) {
      p[j] = Dot(q, k + j * stride, dh) * scale;
      mx = std::max(mx, p[j]);
    }
    p += nj;
  }
#if HWY_TARGET == HWY_AVX3_DL
  mx = std::max(mx, _mm512_reduce_max_ps(vmax));
#endif
  return mx;
}

// o[d] = o[d] * alpha + sum_j p[j] * v_j[d] over the positions j of the runs (as in ScoreBlock,
// rows runs[r].v + i * stride). The accumulators stay in registers across runs.
HWY_INLINE void AccumulatePV(float* HWY_RESTRICT o, float alpha, const float* HWY_RESTRICT p,
                             const attn::KvRun* runs, int64_t n_runs, int64_t stride, int64_t n) {
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
    const float* pr = p;
    for (int64_t r = 0; r < n_runs; ++r) {
      const float* v = runs[r].v + d;
      const int64_t nj = runs[r].n;
      int64_t j = 0;
      for (; j + 2 <= nj; j += 2) {
        const float* vj = v + j * stride;
        const auto pj = hn::Set(df, pr[j]);
        o0 = hn::MulAdd(pj, hn::LoadU(df, vj), o0);
        o1 = hn::MulAdd(pj, hn::LoadU(df, vj + nl), o1);
        o2 = hn::MulAdd(pj, hn::LoadU(df, vj + 2 * nl), o2);
        o3 = hn::MulAdd(pj, hn::LoadU(df, vj + 3 * nl), o3);
        const float* vk = vj + stride;
        const auto pk = hn::Set(df, pr[j + 1]);
        e0 = hn::MulAdd(pk, hn::LoadU(df, vk), e0);
        e1 = hn::MulAdd(pk, hn::LoadU(df, vk + nl), e1);
        e2 = hn::MulAdd(pk, hn::LoadU(df, vk + 2 * nl), e2);
        e3 = hn::MulAdd(pk, hn::LoadU(df, vk + 3 * nl), e3);
      }
      if (j < nj) {
        const float* vj = v + j * stride;
        const auto pj = hn::Set(df, pr[j]);
        o0 = hn::MulAdd(pj, hn::LoadU(df, vj), o0);
        o1 = hn::MulAdd(pj, hn::LoadU(df, vj + nl), o1);
        o2 = hn::MulAdd(pj, hn::LoadU(df, vj + 2 * nl), o2);
        o3 = hn::MulAdd(pj, hn::LoadU(df, vj + 3 * nl), o3);
      }
      pr += nj;
    }
    hn::StoreU(hn::Add(o0, e0), df, o + d);
    hn::StoreU(hn::Add(o1, e1), df, o + d + nl);
    hn::StoreU(hn::Add(o2, e2), df, o + d + 2 * nl);
    hn::StoreU(hn::Add(o3, e3), df, o + d + 3 * nl);
  }
  for (; d + nl <= n; d += nl) {
    auto o0 = hn::Mul(hn::LoadU(df, o + d), va);
    const float* pr = p;
    for (int64_t r = 0; r < n_runs; ++r) {
      const float* v = runs[r].v + d;
      for (int64_t j = 0; j < runs[r].n; ++j) {
        o0 = hn::MulAdd(hn::Set(df, pr[j]), hn::LoadU(df, v + j * stride), o0);
      }
      pr += runs[r].n;
    }
    hn::StoreU(o0, df, o + d);
  }
  for (; d < n; ++d) {
    float acc = o[d] * alpha;
    const float* pr = p;
    for (int64_t r = 0; r < n_runs; ++r) {
      const float* v = runs[r].v + d;
      for (int64_t j = 0; j < runs[r].n; ++j) acc += pr[j] * v[j * stride];
      pr += runs[r].n;
    }
    o[d] = acc;
  }
}

// dst[i * dh + d] = the value of rows [row, row + n) of KV head hk of an int8 cache.
HWY_INLINE void WidenRows(const attn::Call& c, const uint8_t* base, int64_t row, int64_t n,
                          int64_t hk, float* HWY_RESTRICT dst) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int32_t, DF> d32;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dh = c.head_dim, gs = c.group;
  for (int64_t i = 0; i < n; ++i, dst += dh) {
    const uint8_t* s = nullptr;
    const int8_t* q = attn::codes_of(c, base, row + i, hk, &s);
    for (int64_t g0 = 0; g0 < dh; g0 += gs) {
      const float sg = attn::scale_at(s, g0 / gs);
      const auto vs = hn::Set(df, sg);
      int64_t d = g0;
      for (; d + nl <= g0 + gs; d += nl) {
        hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, q + d))), vs), df,
                   dst + d);
      }
      for (; d < g0 + gs; ++d) dst[d] = static_cast<float>(q[d]) * sg;
    }
  }
}

// One work item of sequence sq: query rows (token t, head h) for t in [t0, t1) and the G heads
// h of KV head hk, reading positions [kv_lo, kv_hi) (and the causal limit). With part ==
// nullptr the rows are normalized into out; otherwise each row's partial state goes to
// part[r * (dh + 2) ..] as (m, l, o[dh]) for a later merge.
void AttendItem(const attn::Call& c, const AttentionSeq& sq, int64_t t0, int64_t t1, int64_t hk,
                int64_t kv_lo, int64_t kv_hi, float* part) {
  const DF df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dh = c.head_dim;
  const bool i8 = c.k8 != nullptr;
  // int8: each block's K/V rows are widened into kv8 ([kKvBlock, dh] each) and read from there.
  const int64_t stride = i8 ? dh : c.kv_row_stride;
  const int64_t group = c.n_head / c.n_head_kv;
  const int64_t rows = (t1 - t0) * group;
  thread_local std::vector<float> buf, kv8;
  buf.resize(static_cast<size_t>(rows * (dh + 2) + kKvBlock + nl));
  if (i8) kv8.resize(static_cast<size_t>(2 * kKvBlock * dh));
  float* o = buf.data();     // [rows, dh] output accumulators
  float* m = o + rows * dh;  // [rows] running max
  float* l = m + rows;       // [rows] running sum
  float* p = l + rows;       // [kKvBlock + nl] scores / probabilities
  std::fill(o, o + rows * dh, 0.0f);
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.0f);
  const int64_t first_pos = sq.n_kv - sq.n_tokens;  // absolute position of token 0
  // Positions [kv_lo, kv_end) are visible to some row.
  const int64_t kv_end = c.causal ? std::min(first_pos + t1, kv_hi) : kv_hi;
  const float* qs = c.q + sq.q_start * c.n_head * dh;  // [n_tokens, n_head, dh]
  const float* kh = i8 ? nullptr : c.k + hk * dh;      // [kv rows, kv_row_stride] at head hk
  const float* vh = i8 ? nullptr : c.v + hk * dh;
  // The block's runs of consecutive rows: positions [run_pos[i], run_pos[i + 1]) are in the rows
  // from run_row[i] on; the row's own runs (its part of the block) go to runs.
  int64_t run_pos[kKvBlock + 1], run_row[kKvBlock];
  attn::KvRun runs[kKvBlock];
  for (int64_t j0 = kv_lo, jb; j0 < kv_end; j0 = jb) {
    jb = std::min(j0 + kKvBlock, kv_end);
    int64_t n_runs = 0;
    for (int64_t a = j0; a < jb; a = run_pos[n_runs]) {
      // Negative in a block wholly before the window (prefill walks from a multiple of
      // kKvBlock): no row reads it.
      run_row[n_runs] = attn::kv_row(c, sq, a);
      run_pos[++n_runs] = std::min(jb, attn::run_end(c, a));
    }
    run_pos[0] = j0;
    if (i8) {
      for (int64_t i = 0; i < n_runs; ++i) {
        // A run in a block wholly before the window (table entry -1) is read by no row.
        if (run_row[i] < 0) continue;
        const int64_t n = run_pos[i + 1] - run_pos[i], at = (run_pos[i] - j0) * dh;
        WidenRows(c, c.k8, run_row[i], n, hk, kv8.data() + at);
        WidenRows(c, c.v8, run_row[i], n, hk, kv8.data() + kKvBlock * dh + at);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = t0 + r / group, h = hk * group + r % group;
      const int64_t j1 = c.causal ? std::min(jb, first_pos + t + 1) : jb;  // causal limit
      // Sliding window: the row sees positions > its own - window.
      const int64_t js = c.window > 0 ? std::max(j0, first_pos + t - c.window + 1) : j0;
      if (j1 <= js) continue;
      const int64_t nj = j1 - js;
      int64_t nr = 0;  // the runs overlapping [js, j1)
      for (int64_t i = 0; i < n_runs; ++i) {
        const int64_t a = std::max(js, run_pos[i]), b = std::min(j1, run_pos[i + 1]);
        if (a >= b) continue;
        if (i8) {
          const float* kb = kv8.data() + (a - j0) * dh;
          runs[nr++] = {kb, kb + kKvBlock * dh, b - a};
          continue;
        }
        const int64_t row = run_row[i] + a - run_pos[i];
        runs[nr++] = {kh + row * stride, vh + row * stride, b - a};
      }
      const float* qr = qs + (t * c.n_head + h) * dh;  // [dh]
      const float mx = ScoreBlock(qr, runs, nr, stride, dh, c.scale, m[r], p);
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
      AccumulatePV(o + r * dh, alpha, p, runs, nr, stride, dh);
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
    const int64_t t = t0 + r / group, h = hk * group + r % group;
    float* dst = c.out + ((sq.q_start + t) * c.n_head + h) * dh;  // [dh]
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

inline constexpr int64_t kDecodeSlice = 256;       // decode positions per slice
inline constexpr int64_t kMaxSplit = 64;           // decode slices per (sequence, KV head), at most
inline constexpr int64_t kPoolMinBytes = 4 << 20;  // decode K/V worth a pool round trip

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }  // a >= 0

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

Status check_paged_attention(const PagedAttentionShape& s, std::span<const AttentionSeq> seqs,
                             const float* q, const void* k, const void* v, const float* out) {
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0 || s.block_size <= 0 || s.n_blocks < 0) {
    return invalid_argument(
        "paged_attention: bad shape n_head {} n_head_kv {} head_dim {} block_size {} n_blocks {}",
        s.n_head, s.n_head_kv, s.head_dim, s.block_size, s.n_blocks);
  }
  if (s.n_head % s.n_head_kv != 0) {
    return invalid_argument("paged_attention: n_head {} is not a multiple of n_head_kv {}",
                            s.n_head, s.n_head_kv);
  }
  if (s.kv_dtype != DType::kF32 && s.kv_dtype != DType::kI8) {
    return invalid_argument("paged_attention: K/V of {} (f32 or i8)", dtype_name(s.kv_dtype));
  }
  const int64_t group = s.kv_group > 0 ? s.kv_group : s.head_dim;
  if (s.kv_dtype == DType::kI8 &&
      (s.kv_group < 0 || s.head_dim % group != 0 || s.head_dim / group > attn::kMaxScalesPerHead)) {
    return invalid_argument(
        "paged_attention: i8 groups of {} in a head of {} (a divisor, at most "
        "{} groups a head)",
        s.kv_group, s.head_dim, attn::kMaxScalesPerHead);
  }
  const int64_t row = s.n_head_kv * s.head_dim +
                      (s.kv_dtype == DType::kI8 ? 4 * s.n_head_kv * (s.head_dim / group) : 0);
  if (s.kv_row_stride < row) {
    return invalid_argument("paged_attention: kv_row_stride {} < the {} a {} row takes",
                            s.kv_row_stride, row, dtype_name(s.kv_dtype));
  }
  if (s.window < 0) return invalid_argument("paged_attention: negative window {}", s.window);
  if (!s.causal && s.window != 0) {
    return invalid_argument("paged_attention: window {} with causal = false", s.window);
  }
  bool reads = false;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& sq = seqs[i];
    for (const auto& [name, value] : {std::pair<const char*, int64_t>{"q_start", sq.q_start},
                                      {"n_tokens", sq.n_tokens},
                                      {"n_kv", sq.n_kv}}) {
      if (value < 0) {
        return invalid_argument("paged_attention: sequence {}: negative {} {}", i, name, value);
      }
    }
    if (sq.n_tokens > sq.n_kv) {
      return invalid_argument("paged_attention: sequence {}: n_tokens {} > n_kv {}", i, sq.n_tokens,
                              sq.n_kv);
    }
    if (sq.n_kv > 0 && sq.block_table == nullptr) {
      return invalid_argument("paged_attention: sequence {}: null block_table with n_kv {}", i,
                              sq.n_kv);
    }
    if (sq.n_tokens == 0) continue;
    reads = true;
    // The blocks its queries see (the others are never read and may be -1).
    const int64_t lo =
        s.causal && s.window > 0 ? std::max<int64_t>(0, sq.n_kv - sq.n_tokens - s.window + 1) : 0;
    for (int64_t b = lo / s.block_size; b <= (sq.n_kv - 1) / s.block_size; ++b) {
      const int32_t e = sq.block_table[b];
      if (e < 0 || e >= s.n_blocks) {
        return invalid_argument(
            "paged_attention: sequence {}: block_table[{}] = {} (positions {}..{}, seen by its "
            "queries) is not a block in [0, {})",
            i, b, e, b * s.block_size, std::min(sq.n_kv, (b + 1) * s.block_size) - 1, s.n_blocks);
      }
    }
  }
  if (reads && (q == nullptr || k == nullptr || v == nullptr || out == nullptr)) {
    return invalid_argument("paged_attention: null q, k, v or out");
  }
  return ok_status();
}

// One sequence of a call (n_tokens > 0); p and acc are scratch.
void attend_reference(const attn::Call& c, const AttentionSeq& sq, std::vector<double>& p,
                      std::vector<double>& acc) {
  const int64_t dh = c.head_dim, group = c.n_head / c.n_head_kv;
  p.resize(static_cast<size_t>(sq.n_kv));              // [n_kv]
  acc.resize(static_cast<size_t>(dh));                 // [head_dim]
  const float* qs = c.q + sq.q_start * c.n_head * dh;  // [n_tokens, n_head, head_dim]
  float* os = c.out + sq.q_start * c.n_head * dh;      // [n_tokens, n_head, head_dim]
  std::vector<float> widened(static_cast<size_t>(dh));
  // KV head hk of row `row` of k or v as f32 (int8 codes times their scale).
  const auto head = [&](const float* f32, const uint8_t* i8, int64_t row, int64_t hk) {
    if (i8 == nullptr) return f32 + row * c.kv_row_stride + hk * dh;
    const uint8_t* s = nullptr;
    const int8_t* q = attn::codes_of(c, i8, row, hk, &s);
    for (int64_t i = 0; i < dh; ++i) {
      widened[static_cast<size_t>(i)] = static_cast<float>(q[i]) * attn::scale_at(s, i / c.group);
    }
    return static_cast<const float*>(widened.data());
  };
  for (int64_t t = 0; t < sq.n_tokens; ++t) {
    const int64_t pos = sq.n_kv - sq.n_tokens + t;
    const int64_t j_lo = attn::first_seen(c, sq, t);
    const int64_t j_hi = c.causal ? pos + 1 : sq.n_kv;
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t hk = h / group;
      const float* qr = qs + (t * c.n_head + h) * dh;  // [head_dim]
      double mx = -INFINITY;
      for (int64_t j = j_lo; j < j_hi; ++j) {
        const float* kj = head(c.k, c.k8, attn::kv_row(c, sq, j), hk);  // [head_dim]
        double d = 0.0;
        for (int64_t i = 0; i < dh; ++i) d += static_cast<double>(qr[i]) * kj[i];
        p[static_cast<size_t>(j)] = d * static_cast<double>(c.scale);
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (int64_t j = j_lo; j < j_hi; ++j) {
        p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx);
        sum += p[static_cast<size_t>(j)];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = j_lo; j < j_hi; ++j) {
        const float* vj = head(c.v, c.v8, attn::kv_row(c, sq, j), hk);  // [head_dim]
        const double w = p[static_cast<size_t>(j)] / sum;
        for (int64_t i = 0; i < dh; ++i) acc[static_cast<size_t>(i)] += w * vj[i];
      }
      float* dst = os + (t * c.n_head + h) * dh;  // [head_dim]
      for (int64_t i = 0; i < dh; ++i) dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  }
}

// Where a sequence's items are in the call's work list.
struct SeqPlan {
  const AttentionSeq* sq = nullptr;
  int64_t item_begin = 0;  // its first item
  int64_t n_split = 0;     // decode: slices of its positions per KV head; 0: prefill
  int64_t kv_lo = 0;       // decode: the first position its token sees
  int64_t part = 0;        // decode with n_split > 1: offset of its partials
};

// The fast path for all the sequences of a call: one work list, one pool round trip, then the
// merge of the decode slices.
void attend_fast(const OpContext& ctx, const attn::Call& c, std::span<const AttentionSeq> seqs) {
  const int64_t group = c.n_head / c.n_head_kv, dh = c.head_dim;
  bool prefill = false;
  int64_t decode_kv = 0;  // positions the decode sequences read
  for (const AttentionSeq& sq : seqs) {
    if (sq.n_tokens == 0) continue;
    prefill = prefill || sq.n_tokens > 1;
    if (sq.n_tokens == 1) decode_kv += sq.n_kv - attn::first_seen(c, sq, 0);
  }
  // Decode over less than 4 MB of K/V is cheaper than a pool round trip (up to ~50 us, see
  // matmul).
  const int64_t decode_bytes = 2 * decode_kv * c.n_head_kv * dh * (c.k8 != nullptr ? 1 : 4);
  const bool use_pool =
      ctx.pool != nullptr && ctx.pool->size() > 1 && (prefill || decode_bytes >= kPoolMinBytes);
  // Decode slices of kDecodeSlice positions: the split of a sequence depends on its own length
  // only, never on the rest of the batch or the pool, so its result has the same bits alone or
  // batched (batch invariance).
  const int64_t slice = kDecodeSlice;
  const int64_t tok_block = c.k8 != nullptr ? attn::kTokBlockI8 : attn::kTokBlock;
  std::vector<SeqPlan> plans;
  plans.reserve(seqs.size());
  int64_t n_items = 0, n_part = 0;
  for (const bool decode : {false, true}) {  // prefill first: its items are the longest
    for (const AttentionSeq& sq : seqs) {
      if (sq.n_tokens == 0 || (sq.n_tokens == 1) != decode) continue;
      SeqPlan pl{.sq = &sq, .item_begin = n_items};
      if (!decode) {
        n_items += c.n_head_kv * ceil_div(sq.n_tokens, tok_block);
      } else {
        pl.kv_lo = attn::first_seen(c, sq, 0);
        pl.n_split = std::clamp<int64_t>(ceil_div(sq.n_kv - pl.kv_lo, slice), 1, kMaxSplit);
        if (pl.n_split > 1) {
          pl.part = n_part;
          n_part += c.n_head_kv * pl.n_split * group * (dh + 2);
        }
        n_items += c.n_head_kv * pl.n_split;
      }
      plans.push_back(pl);
    }
  }
  // Per sliced sequence: [n_head_kv, n_split, group, dh + 2] of (m, l, o[dh]).
  std::vector<float> part(static_cast<size_t>(n_part));
  const auto run_item = [&](int64_t it) {
    const SeqPlan& pl =
        *(std::upper_bound(plans.begin(), plans.end(), it,
                           [](int64_t i, const SeqPlan& p) { return i < p.item_begin; }) -
          1);
    const AttentionSeq& sq = *pl.sq;
    const int64_t local = it - pl.item_begin;
    if (pl.n_split == 0) {
      // Prefill (sequence, KV head, token block); later token blocks see more positions: walk
      // them first for a better balance.
      const int64_t tb = ceil_div(sq.n_tokens, tok_block) - 1 - local / c.n_head_kv;
      const int64_t hk = local % c.n_head_kv;
      const int64_t t0 = tb * tok_block;
      const int64_t t1 = std::min(sq.n_tokens, t0 + tok_block);
      // The walk starts at a multiple of kKvBlock, so a row's blocks are the same whichever
      // token block (and chunk) it is in: the same bits alone or batched.
      const int64_t lo = attn::first_seen(c, sq, t0);
      HWY_DYNAMIC_DISPATCH(AttendItem)
      (c, sq, t0, t1, hk, lo - lo % attn::kKvBlock, sq.n_kv, nullptr);
      return;
    }
    // Decode (sequence, KV head, slice): the group's query heads share each K/V row.
    const int64_t hk = local / pl.n_split, sp = local % pl.n_split;
    const int64_t n_vis = sq.n_kv - pl.kv_lo;
    const int64_t lo = pl.kv_lo + n_vis * sp / pl.n_split;
    const int64_t hi = pl.kv_lo + n_vis * (sp + 1) / pl.n_split;
    HWY_DYNAMIC_DISPATCH(AttendItem)
    (c, sq, 0, 1, hk, lo, hi,
     pl.n_split > 1 ? part.data() + pl.part + local * group * (dh + 2) : nullptr);
  };
  if (use_pool && n_items > 1) {
    // One round trip; the pool hands items out one at a time, so long and short ones balance.
    ctx.pool->run(n_items, [&](int64_t it, int) { run_item(it); });
  } else {
    for (int64_t it = 0; it < n_items; ++it) run_item(it);
  }
  // Merge the slices (flash-decoding): rescale each by exp(m_slice - m) and normalize.
  for (const SeqPlan& pl : plans) {
    if (pl.n_split <= 1) continue;
    const float* ps = part.data() + pl.part;  // [n_head_kv, n_split, group, dh + 2]
    for (int64_t hk = 0; hk < c.n_head_kv; ++hk) {
      for (int64_t g = 0; g < group; ++g) {
        const auto slice_at = [&](int64_t sp) {
          return ps + ((hk * pl.n_split + sp) * group + g) * (dh + 2);
        };
        float mx = -INFINITY;
        for (int64_t sp = 0; sp < pl.n_split; ++sp) mx = std::max(mx, slice_at(sp)[0]);
        float* dst = c.out + (pl.sq->q_start * c.n_head + hk * group + g) * dh;  // [dh]
        std::fill(dst, dst + dh, 0.0f);
        float sum = 0.0f;
        for (int64_t sp = 0; sp < pl.n_split; ++sp) {
          const float* pr = slice_at(sp);
          const float w = pr[1] > 0.0f ? std::exp(pr[0] - mx) : 0.0f;
          sum += pr[1] * w;
          for (int64_t d = 0; d < dh; ++d) dst[d] += pr[2 + d] * w;
        }
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < dh; ++d) dst[d] *= inv;
      }
    }
  }
}

// The call's pointers and the head layout both shapes share.
template <typename Shape>
attn::Call make_call(const Shape& s, const float* q, const float* k, const float* v, float* out) {
  return attn::Call{.q = q,
                    .k = k,
                    .v = v,
                    .out = out,
                    .n_head = s.n_head,
                    .n_head_kv = s.n_head_kv,
                    .head_dim = s.head_dim,
                    .kv_row_stride = s.kv_row_stride,
                    .scale = s.scale,
                    .window = s.window};
}

}  // namespace

Status attention(const OpContext& ctx, const AttentionShape& s, const float* q, const float* k,
                 const float* v, float* out) {
  RINFER_RETURN_IF_ERROR(check_attention(s, q, k, v, out));
  if (s.n_tokens == 0) return ok_status();
  attn::Call c = make_call(s, q, k, v, out);
  c.kv_rows = s.kv_rows;
  const AttentionSeq sq{.n_tokens = s.n_tokens, .n_kv = s.n_kv};
  if (ctx.impl == Impl::kReference) {
    std::vector<double> p, acc;
    attend_reference(c, sq, p, acc);
  } else {
    attend_fast(ctx, c, std::span(&sq, 1));
  }
  return ok_status();
}

Status paged_attention(const OpContext& ctx, const PagedAttentionShape& s,
                       std::span<const AttentionSeq> seqs, const float* q, const void* k,
                       const void* v, float* out) {
  RINFER_RETURN_IF_ERROR(check_paged_attention(s, seqs, q, k, v, out));
  const bool i8 = s.kv_dtype == DType::kI8;
  attn::Call c = make_call(s, q, i8 ? nullptr : static_cast<const float*>(k),
                           i8 ? nullptr : static_cast<const float*>(v), out);
  if (i8) {
    c.k8 = static_cast<const uint8_t*>(k);
    c.v8 = static_cast<const uint8_t*>(v);
    c.scales_at = s.n_head_kv * s.head_dim;
    c.group = s.kv_group > 0 ? s.kv_group : s.head_dim;
  }
  c.causal = s.causal;
  c.block_size = s.block_size;
  if (ctx.impl == Impl::kReference) {
    std::vector<double> p, acc;
    for (const AttentionSeq& sq : seqs) {
      if (sq.n_tokens > 0) attend_reference(c, sq, p, acc);
    }
  } else {
    attend_fast(ctx, c, seqs);
  }
  return ok_status();
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
