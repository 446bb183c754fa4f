// Inputs of the paged attention tests (attention_test.cpp, attention_i8_test.cpp): sequences
// over a shuffled block pool whose unseen positions are NaN, and the checks both files run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"
#include "test_util.h"

namespace rinfer::cpu::test_paged {

struct SeqSpec {
  int64_t n_tokens, n_kv;
};

struct PagedInputs {
  PagedAttentionShape s;
  std::vector<AttentionSeq> seqs;
  std::vector<std::vector<int32_t>> tables;  // seqs[i].block_table points into tables[i]
  std::vector<float> q;                      // [rows, n_head, head_dim]
  std::vector<float> k, v;                   // [n_blocks, block_size, kv_row_stride]
  int64_t rows = 0;
};

inline PagedAttentionShape paged_shape(int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                       int64_t block_size, int64_t window = 0, int64_t pad = 0) {
  PagedAttentionShape s;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = head_dim;
  s.kv_row_stride = n_head_kv * head_dim + pad;
  s.block_size = block_size;
  s.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  s.window = window;
  return s;
}

// The first position a sequence's queries see.
inline int64_t first_seen(const PagedAttentionShape& s, const SeqSpec& sp) {
  return s.causal && s.window > 0 ? std::max<int64_t>(0, sp.n_kv - sp.n_tokens - s.window + 1) : 0;
}

// The sequences' query rows follow each other with a one-row gap (so q_start matters); their
// blocks are a random permutation of the pool, which has a few spare blocks; blocks wholly
// before a window are -1. Only the positions some query sees hold data (random, never zero):
// every other float of k and v is NaN, so a wrong read poisons the output.
inline PagedInputs make_paged(const PagedAttentionShape& s, std::span<const SeqSpec> specs,
                              uint64_t seed) {
  PagedInputs in;
  in.s = s;
  const int64_t bs = s.block_size;
  int64_t needed = 0;
  for (const SeqSpec& sp : specs) needed += (sp.n_kv + bs - 1) / bs;
  in.s.n_blocks = needed + 3;
  std::vector<int32_t> perm(static_cast<size_t>(in.s.n_blocks));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  const auto n = static_cast<size_t>(in.s.n_blocks * bs * s.kv_row_stride);
  const std::vector<float> kr = rinfer::test::random_floats(n, seed + 1, -2, 2);
  const std::vector<float> vr = rinfer::test::random_floats(n, seed + 2);
  in.k.assign(n, NAN);
  in.v.assign(n, NAN);
  size_t next = 0;
  for (const SeqSpec& sp : specs) {
    std::vector<int32_t>& table =
        in.tables.emplace_back(static_cast<size_t>((sp.n_kv + bs - 1) / bs));
    const int64_t lo = first_seen(s, sp);
    for (size_t b = 0; b < table.size(); ++b) {
      table[b] = (static_cast<int64_t>(b) + 1) * bs <= lo ? -1 : perm[next++];
    }
    for (int64_t j = lo; j < sp.n_kv; ++j) {
      const int64_t row = int64_t{table[static_cast<size_t>(j / bs)]} * bs + j % bs;
      const auto at = static_cast<std::ptrdiff_t>(row * s.kv_row_stride);
      const auto len = static_cast<std::ptrdiff_t>(s.n_head_kv * s.head_dim);
      std::copy(kr.begin() + at, kr.begin() + at + len, in.k.begin() + at);
      std::copy(vr.begin() + at, vr.begin() + at + len, in.v.begin() + at);
    }
    in.seqs.push_back({.q_start = in.rows, .n_tokens = sp.n_tokens, .n_kv = sp.n_kv});
    in.rows += sp.n_tokens + 1;
  }
  for (size_t i = 0; i < in.seqs.size(); ++i) in.seqs[i].block_table = in.tables[i].data();
  in.q = rinfer::test::random_floats(static_cast<size_t>(in.rows * s.n_head * s.head_dim), seed + 3,
                                     -2, 2);
  return in;
}

inline std::vector<float> run_paged(const OpContext& ctx, const PagedInputs& in,
                                    std::span<const AttentionSeq> seqs) {
  std::vector<float> out(in.q.size(), NAN);
  const Status st =
      paged_attention(ctx, in.s, seqs, in.q.data(), in.k.data(), in.v.data(), out.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}
inline std::vector<float> run_paged(const OpContext& ctx, const PagedInputs& in) {
  return run_paged(ctx, in, in.seqs);
}

// The output rows of sequence sq: [n_tokens, n_head, head_dim].
inline std::vector<float> rows_of(const PagedInputs& in, const std::vector<float>& out,
                                  const AttentionSeq& sq) {
  const int64_t w = in.s.n_head * in.s.head_dim;
  return {out.begin() + sq.q_start * w, out.begin() + (sq.q_start + sq.n_tokens) * w};
}

// Rows that belong to no sequence were not written.
inline bool gaps_untouched(const PagedInputs& in, const std::vector<float>& out) {
  const int64_t w = in.s.n_head * in.s.head_dim;
  for (const AttentionSeq& sq : in.seqs) {
    const int64_t gap = sq.q_start + sq.n_tokens;
    for (int64_t i = gap * w; i < (gap + 1) * w; ++i) {
      if (!std::isnan(out[static_cast<size_t>(i)])) return false;
    }
  }
  return true;
}

// Fast vs reference on every sequence of `in`, for each pool.
inline void expect_fast_matches_reference(const PagedInputs& in,
                                          std::initializer_list<ThreadPool*> pools,
                                          const std::string& what) {
  const auto ref = run_paged({Impl::kReference}, in);
  EXPECT_TRUE(gaps_untouched(in, ref)) << what;
  for (ThreadPool* pool : pools) {
    const auto y = run_paged({Impl::kFast, pool}, in);
    EXPECT_TRUE(gaps_untouched(in, y)) << what;
    for (size_t i = 0; i < in.seqs.size(); ++i) {
      const AttentionSeq& sq = in.seqs[i];
      EXPECT_LE(rinfer::test::rel_l2(rows_of(in, y, sq), rows_of(in, ref, sq)), 1e-5)
          << what << " sequence " << i << " (" << sq.n_tokens << " tokens, n_kv " << sq.n_kv
          << ") threads " << (pool ? pool->size() : 1);
    }
  }
}

}  // namespace rinfer::cpu::test_paged
