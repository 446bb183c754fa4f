// The encoders' AMX attention (see attention_bf16.h). Per (sequence, head) task: k and v are
// rounded to bf16 once into the B-operand layout of tdpbf16ps, then for each block of 16 queries
// the scores [16, n] come from one tile multiply per 16 keys and 32 dimensions, the softmax runs
// on them in f32 (AVX-512), and the probabilities (bf16, unnormalized) times v give 16 outputs
// per tile, divided by the row sums at the end.
// GCC 12's AVX-512 intrinsics pass an undefined register as the merge source of unmasked
// operations and warn about it inside functions with a target attribute (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ops/cpu/attention_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/amx_internal.h"
#include "ops/cpu/matmul_bf16.h"

namespace rinfer::cpu {

namespace {

#if RINFER_HAVE_AMX_CODE

constexpr int64_t kT = 16;           // tile rows; f32 columns of a tile row
constexpr int64_t kTileElems = 512;  // bf16 elements of a tile

struct Scratch {
  std::vector<uint16_t> kt, vt, qb, p;
  std::vector<float> sc, o, sum;
};

// One sequence's keys and values of head h in the B layout:
//   kt[kb][c] tile:  [p][key][j] = k[kb*16 + key, c*32 + 2p + j]      (scores: q k^T)
//   vt[kb2][o] tile: [p][col][j] = v[kb2*32 + 2p + j, o*16 + col]     (outputs: p v)
// zero for keys >= n.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pack_kv(const float* k, const float* v,
                                                                    int64_t n, int64_t nk,
                                                                    int64_t d, int64_t stride,
                                                                    uint16_t* kt, uint16_t* vt) {
  const int64_t dc = d / 32, oc = d / kT;
  std::memset(kt, 0, static_cast<size_t>(nk / kT * dc * kTileElems) * 2);
  std::memset(vt, 0, static_cast<size_t>(nk / 32 * oc * kTileElems) * 2);
  alignas(64) uint32_t pairs[16];
  for (int64_t j = 0; j < n; ++j) {
    const float* kr = k + j * stride;
    for (int64_t c = 0; c < dc; ++c) {
      const __m512bh b =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(kr + c * 32 + 16), _mm512_loadu_ps(kr + c * 32));
      _mm512_store_si512(pairs, reinterpret_cast<__m512i>(b));
      auto* tile = reinterpret_cast<uint32_t*>(kt + ((j / kT) * dc + c) * kTileElems);
      for (int64_t p = 0; p < 16; ++p) tile[p * kT + j % kT] = pairs[p];
    }
  }
  // Pairs of value rows interleaved: element 2 col + jj of a tile row is row 2p + jj, column col.
  alignas(64) uint16_t idx_init[32];
  for (int i = 0; i < 32; ++i) idx_init[i] = static_cast<uint16_t>(i / 2 + 16 * (i % 2));
  const __m512i idx = _mm512_load_si512(idx_init);
  for (int64_t j = 0; j < n; j += 2) {
    const float* a = v + j * stride;
    const float* b = j + 1 < n ? v + (j + 1) * stride : nullptr;
    for (int64_t o = 0; o < oc; ++o) {
      const __m256i ha = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(a + o * kT)));
      const __m256i hb =
          b != nullptr ? reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(b + o * kT)))
                       : _mm256_setzero_si256();
      const __m512i ab = _mm512_inserti64x4(_mm512_zextsi256_si512(ha), hb, 1);
      uint16_t* tile = vt + ((j / 32) * oc + o) * kTileElems + ((j % 32) / 2) * 32;
      _mm512_storeu_si512(tile, _mm512_permutexvar_epi16(idx, ab));
    }
  }
}

// Horizontal max and sum through memory (GCC's _mm512_reduce_* read undefined registers and
// warn).
__attribute__((target("avx512f"))) float lanes_max(__m512 x) {
  alignas(64) float l[16];
  _mm512_store_ps(l, x);
  float m = l[0];
  for (float f : l) m = std::max(m, f);
  return m;
}
__attribute__((target("avx512f"))) float lanes_sum(__m512 x) {
  alignas(64) float l[16];
  _mm512_store_ps(l, x);
  float t = 0.0f;
  for (float f : l) t += f;
  return t;
}

// Softmax numerators of 16 score rows over n keys (scores times scale, minus the row maximum,
// exponentiated) as bf16 into p [16, nk] (zero for keys >= n), their sums into sum[16].
__attribute__((target("avx512f,avx512bf16"))) void softmax_rows(const float* sc, int64_t n,
                                                                int64_t nk, float scale,
                                                                uint16_t* p, float* sum) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < kT; ++r) {
    const float* s = sc + r * nk;
    uint16_t* pr = p + r * nk;
    __m512 m = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1u);
    if (j < n) m = _mm512_mask_max_ps(m, tail, m, _mm512_maskz_loadu_ps(tail, s + j));
    const __m512 mx = _mm512_set1_ps(lanes_max(m) * scale);
    __m512 acc = _mm512_setzero_ps();
    for (j = 0; j < nk; j += 16) {
      const __mmask16 valid = j + 16 <= n ? static_cast<__mmask16>(0xFFFF)
                              : j < n     ? static_cast<__mmask16>((1u << (n - j)) - 1u)
                                          : static_cast<__mmask16>(0);
      const __m512 x = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(valid, s + j), vs, mx);
      const __m512 e = _mm512_maskz_mov_ps(valid, amx::exp16(x));
      acc = _mm512_add_ps(acc, e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + j),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
    }
    sum[r] = lanes_sum(acc);
  }
}

__attribute__((target("avx512f,avx512bf16"))) void queries_to_bf16(const float* q, int64_t rows,
                                                                   int64_t d, int64_t stride,
                                                                   uint16_t* qb) {
  for (int64_t r = 0; r < kT; ++r) {
    uint16_t* o = qb + r * d;
    if (r >= rows) {
      std::memset(o, 0, static_cast<size_t>(d) * 2);
      continue;
    }
    for (int64_t c = 0; c < d; c += 32) {
      const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + r * stride + c + 16),
                                             _mm512_loadu_ps(q + r * stride + c));
      _mm512_storeu_si512(o + c, reinterpret_cast<__m512i>(b));
    }
  }
}

__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16"))) void attend_seq_head(
    const EncoderAttentionShape& s, const AttentionSeq& seq, int64_t h, const float* q,
    const float* k, const float* v, float* out, Scratch& w) {
  const int64_t n = seq.n_tokens, d = s.head_dim, stride = s.row_stride;
  const int64_t nk = (n + 31) / 32 * 32, dc = d / 32, oc = d / kT;
  w.kt.resize(static_cast<size_t>(nk / kT * dc * kTileElems));
  w.vt.resize(static_cast<size_t>(nk / 32 * oc * kTileElems));
  w.qb.resize(static_cast<size_t>(kT * d));
  w.p.resize(static_cast<size_t>(kT * nk));
  w.sc.resize(static_cast<size_t>(kT * nk));
  w.o.resize(static_cast<size_t>(kT * d));
  w.sum.resize(kT);
  const int64_t row0 = seq.q_start, col0 = h * d;
  pack_kv(k + row0 * stride + col0, v + row0 * stride + col0, n, nk, d, stride, w.kt.data(),
          w.vt.data());
  const amx::TileConfig cfg;
  _tile_loadconfig(&cfg);
  for (int64_t q0 = 0; q0 < n; q0 += kT) {
    const int64_t rows = std::min(kT, n - q0);
    queries_to_bf16(q + (row0 + q0) * stride + col0, rows, d, stride, w.qb.data());
    for (int64_t kb = 0; kb < nk / kT; ++kb) {
      _tile_zero(0);
      for (int64_t c = 0; c < dc; ++c) {
        _tile_loadd(1, w.qb.data() + c * 32, d * 2);
        _tile_loadd(2, w.kt.data() + (kb * dc + c) * kTileElems, 64);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, w.sc.data() + kb * kT, nk * 4);
    }
    softmax_rows(w.sc.data(), n, nk, s.scale, w.p.data(), w.sum.data());
    for (int64_t o = 0; o < oc; ++o) {
      _tile_zero(0);
      for (int64_t kb2 = 0; kb2 < nk / 32; ++kb2) {
        _tile_loadd(1, w.p.data() + kb2 * 32, nk * 2);
        _tile_loadd(2, w.vt.data() + (kb2 * oc + o) * kTileElems, 64);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, w.o.data() + o * kT, d * 4);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const __m512 inv = _mm512_set1_ps(1.0f / w.sum[static_cast<size_t>(r)]);
      float* dst = out + (row0 + q0 + r) * stride + col0;
      for (int64_t c = 0; c < d; c += 16) {
        _mm512_storeu_ps(dst + c, _mm512_mul_ps(_mm512_loadu_ps(w.o.data() + r * d + c), inv));
      }
    }
  }
  _tile_release();
}

#endif  // RINFER_HAVE_AMX_CODE

}  // namespace

Status attention_bf16(const OpContext& ctx, const EncoderAttentionShape& s,
                      std::span<const AttentionSeq> seqs, const float* q, const float* k,
                      const float* v, float* out) {
  if (s.n_head <= 0 || s.head_dim <= 0 || s.head_dim % 32 != 0 || s.head_dim > 256) {
    return invalid_argument(
        "attention_bf16: {} heads of {} (the head size must be a multiple of 32, at most 256)",
        s.n_head, s.head_dim);
  }
  if (s.row_stride < s.n_head * s.head_dim) {
    return invalid_argument("attention_bf16: row stride {} < {} heads x {}", s.row_stride, s.n_head,
                            s.head_dim);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].n_tokens < 0 || seqs[i].n_kv != seqs[i].n_tokens || seqs[i].q_start < 0) {
      return invalid_argument(
          "attention_bf16: sequence {}: start {}, {} queries, {} keys (must be equal)", i,
          seqs[i].q_start, seqs[i].n_tokens, seqs[i].n_kv);
    }
  }
  if (seqs.empty()) return ok_status();
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr) {
    return invalid_argument("attention_bf16: a null q, k, v or out pointer");
  }
  if (!amx_bf16_available()) {
    return unsupported("attention_bf16: this CPU (or its OS) does not offer AMX-BF16 tiles");
  }
#if RINFER_HAVE_AMX_CODE
  const auto n_tasks = static_cast<int64_t>(seqs.size()) * s.n_head;
  auto run = [&](int64_t t0, int64_t t1) {
    thread_local Scratch w;
    for (int64_t t = t0; t < t1; ++t) {
      const AttentionSeq& seq = seqs[static_cast<size_t>(t / s.n_head)];
      if (seq.n_tokens > 0) attend_seq_head(s, seq, t % s.n_head, q, k, v, out, w);
    }
  };
  if (ctx.pool == nullptr || ctx.pool->size() == 1 || n_tasks == 1) {
    run(0, n_tasks);
  } else {
    ctx.pool->parallel_for(0, n_tasks, 1, run);
  }
  return ok_status();
#else
  return unsupported("attention_bf16: built without AMX code");
#endif
}

}  // namespace rinfer::cpu
