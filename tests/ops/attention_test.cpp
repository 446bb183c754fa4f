// attention: the fast flash-attention path vs the double-precision reference, for GQA ratios
// 1, 3 and 4, head dims that are and are not multiples of the vector width, decode and prefill,
// n_kv up to 1024, a padded KV row stride, 1..3 threads and every SIMD target; sliding windows,
// and ring-addressed K/V (kv_rows) against the linear layout. Plus hand-checked values and
// argument errors.
// paged_attention: a mix of prefill, chunked-prefill and decode sequences over permuted block
// tables (block sizes 16 and 7, -1 before windows, NaN in every float that must not be read):
// fast vs reference per sequence, the reference vs attention() on contiguous copies (bit for
// bit) and alone vs batched (bit for bit), non-causal vs a direct computation, 64 decodes of
// lengths 1..600 and a few long sliced ones on pools of 2 and 4, and every argument error.

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
#include "ops_test_util.h"
#include "paged_inputs.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

using namespace test_paged;  // NOLINT(google-build-using-namespace)

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const AttentionShape& s, uint64_t seed) {
  Inputs in;
  in.q = test::random_floats(static_cast<size_t>(s.n_tokens * s.n_head * s.head_dim), seed, -2, 2);
  in.k = test::random_floats(static_cast<size_t>(s.n_kv * s.kv_row_stride), seed + 1, -2, 2);
  in.v = test::random_floats(static_cast<size_t>(s.n_kv * s.kv_row_stride), seed + 2);
  return in;
}

std::vector<float> run(const OpContext& ctx, const AttentionShape& s, const Inputs& in) {
  std::vector<float> out(in.q.size(), NAN);
  const Status st = attention(ctx, s, in.q.data(), in.k.data(), in.v.data(), out.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

AttentionShape shape(int64_t n_tokens, int64_t n_kv, int64_t n_head, int64_t n_head_kv,
                     int64_t head_dim, int64_t pad = 0) {
  AttentionShape s;
  s.n_tokens = n_tokens;
  s.n_kv = n_kv;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = head_dim;
  s.kv_row_stride = n_head_kv * head_dim + pad;
  s.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return s;
}

TEST(Attention, FastMatchesReference) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 1;
  for (auto [n_head, n_head_kv] : {std::pair<int64_t, int64_t>{4, 4}, {9, 3}, {8, 2}}) {
    for (int64_t head_dim : {64, 40}) {
      for (auto [n_tokens, n_kv] :
           {std::pair<int64_t, int64_t>{1, 1}, {1, 130}, {3, 3}, {7, 70}, {33, 33}, {2, 1024}}) {
        const AttentionShape s =
            shape(n_tokens, n_kv, n_head, n_head_kv, head_dim, seed % 2 ? 8 : 0);
        const Inputs in = make_inputs(s, seed++);
        const auto ref = run({Impl::kReference}, s, in);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          const auto y = run({Impl::kFast, pool}, s, in);
          EXPECT_LE(test::rel_l2(y, ref), 1e-5)
              << "heads " << n_head << "/" << n_head_kv << " head_dim " << head_dim << " tokens "
              << n_tokens << " n_kv " << n_kv << " threads " << (pool ? pool->size() : 1);
        }
      }
    }
  }
}

// Decode over more than 4 MB of K/V: slices spread over the pool, then merged.
TEST(Attention, LongDecodeOnThePool) {
  ThreadPool pool(2);
  const AttentionShape s = shape(1, 4200, 8, 2, 64);
  const Inputs in = make_inputs(s, 43);
  const auto ref = run({Impl::kReference}, s, in);
  EXPECT_LE(test::rel_l2(run({Impl::kFast, &pool}, s, in), ref), 1e-5);
  EXPECT_LE(test::rel_l2(run({Impl::kFast}, s, in), ref), 1e-5);
}

TEST(Attention, LongPrefill) {
  ThreadPool pool(2);
  const AttentionShape s = shape(200, 1000, 9, 3, 64);
  const Inputs in = make_inputs(s, 42);
  const auto ref = run({Impl::kReference}, s, in);
  EXPECT_LE(test::rel_l2(run({Impl::kFast, &pool}, s, in), ref), 1e-5);
}

TEST(Attention, EverySimdTarget) {
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    uint64_t seed = 5;
    for (int64_t head_dim : {64, 24, 7}) {
      for (auto [n_tokens, n_kv] : {std::pair<int64_t, int64_t>{1, 77}, {5, 140}}) {
        const AttentionShape s = shape(n_tokens, n_kv, 6, 2, head_dim);
        const Inputs in = make_inputs(s, seed++);
        const auto ref = run({Impl::kReference}, s, in);
        EXPECT_LE(test::rel_l2(run({Impl::kFast}, s, in), ref), 1e-5)
            << simd_target_name() << " head_dim " << head_dim << " tokens " << n_tokens;
      }
    }
  }
}

// Sliding window (Gemma's local layers): fast vs reference, and the reference against a
// brute-force copy where positions outside the window are dropped from K/V.
TEST(Attention, SlidingWindow) {
  ThreadPool pool2(2);
  uint64_t seed = 77;
  for (int64_t window : {1, 5, 64, 300}) {
    for (auto [n_tokens, n_kv] :
         {std::pair<int64_t, int64_t>{1, 1}, {1, 130}, {1, 700}, {7, 70}, {40, 40}, {33, 600}}) {
      const AttentionShape s0 = shape(n_tokens, n_kv, 4, 1, 32, seed % 2 ? 8 : 0);
      AttentionShape s = s0;
      s.window = window;
      const Inputs in = make_inputs(s, seed++);
      const auto ref = run({Impl::kReference}, s, in);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        EXPECT_LE(test::rel_l2(run({Impl::kFast, pool}, s, in), ref), 1e-5)
            << "window " << window << " tokens " << n_tokens << " n_kv " << n_kv;
      }
      // The last token sees exactly positions [n_kv - window, n_kv): a decode over only those.
      const int64_t lo = std::max<int64_t>(0, n_kv - window);
      AttentionShape sl = shape(1, n_kv - lo, 4, 1, 32, seed % 2 ? 0 : 8);
      sl.kv_row_stride = s.kv_row_stride;
      const int64_t dh = 32;
      std::vector<float> q_last(in.q.end() - 4 * dh, in.q.end());
      std::vector<float> out(static_cast<size_t>(4 * dh));
      ASSERT_TRUE(attention({Impl::kReference}, sl, q_last.data(),
                            in.k.data() + lo * s.kv_row_stride, in.v.data() + lo * s.kv_row_stride,
                            out.data())
                      .ok());
      const std::vector<float> ref_last(ref.end() - 4 * dh, ref.end());
      EXPECT_LE(test::rel_l2(out, ref_last), 1e-6) << "window " << window << " n_kv " << n_kv;
    }
  }
}

// Ring addressing (a sliding-window layer's KV cache holding kv_rows rows, position j in row
// j % kv_rows): the same K/V copied into a ring gives the same output as the linear layout, for
// both implementations, decode and prefill, chunks and windows that cross the ring's wrap point
// (and ones that start exactly on it), rings of exactly the rows needed and larger ones.
TEST(Attention, RingMatchesLinear) {
  ThreadPool pool2(2);
  uint64_t seed = 901;
  struct Case {
    int64_t window, n_tokens, n_kv, kv_rows;
  };
  const Case cases[] = {
      {5, 1, 5, 5},        // decode, ring exactly full, no wrap yet
      {5, 1, 13, 5},       // decode, the window [8, 13) wraps (rows 3, 4, 0, 1, 2)
      {5, 3, 13, 7},       // prefill of 3 with kv_rows = window + 3 - 1
      {64, 1, 200, 64},    // decode over more than one kKvBlock, wrapping mid-block
      {64, 10, 300, 73},   // prefill, window of 64, chunk of 10
      {64, 10, 300, 100},  // a larger ring than needed
      {300, 33, 1000, 332},
      {300, 1, 1000, 300},          // decode over 300 positions: several flash-decoding slices
      {16, 7, 23, 22},              // positions [1, 23) in 22 rows: the chunk's last rows wrap to 0
      {16, 8, 32, 16 + 8 - 1 + 1},  // the chunk starts exactly on the wrap (24 % 24 == 0)
      {4, 12, 12, 15},              // first chunk, n_kv < kv_rows: nothing wraps
      {1, 4, 40, 4},                // window 1: each token sees only itself
  };
  for (const Case& c : cases) {
    for (int64_t pad : {0, 8}) {
      AttentionShape lin = shape(c.n_tokens, c.n_kv, 4, 1, 32, pad);
      lin.window = c.window;
      const Inputs in = make_inputs(lin, seed++);
      // The ring: rows of positions [n_kv - kv_rows, n_kv) (the ones it holds) at j % kv_rows;
      // the other rows never read (NaN would poison a wrong read).
      Inputs ring = in;
      ring.k.assign(static_cast<size_t>(c.kv_rows * lin.kv_row_stride), NAN);
      ring.v.assign(ring.k.size(), NAN);
      for (int64_t j = std::max<int64_t>(0, c.n_kv - c.kv_rows); j < c.n_kv; ++j) {
        const auto src = static_cast<std::ptrdiff_t>(j * lin.kv_row_stride);
        const auto dst = static_cast<std::ptrdiff_t>((j % c.kv_rows) * lin.kv_row_stride);
        std::copy(in.k.begin() + src, in.k.begin() + src + lin.kv_row_stride, ring.k.begin() + dst);
        std::copy(in.v.begin() + src, in.v.begin() + src + lin.kv_row_stride, ring.v.begin() + dst);
      }
      AttentionShape rs = lin;
      rs.kv_rows = c.kv_rows;
      const auto ref = run({Impl::kReference}, lin, in);
      EXPECT_LE(test::rel_l2(run({Impl::kReference}, rs, ring), ref), 1e-12)
          << "reference, window " << c.window << " tokens " << c.n_tokens << " n_kv " << c.n_kv
          << " kv_rows " << c.kv_rows;
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        const auto fast_lin = run({Impl::kFast, pool}, lin, in);
        const auto fast_ring = run({Impl::kFast, pool}, rs, ring);
        EXPECT_LE(test::rel_l2(fast_ring, fast_lin), 1e-6)
            << "fast, window " << c.window << " tokens " << c.n_tokens << " n_kv " << c.n_kv
            << " kv_rows " << c.kv_rows;
        EXPECT_LE(test::rel_l2(fast_ring, ref), 1e-5);
      }
    }
  }
}

// A global layer may also be given as a "ring" that holds every position (kv_rows >= n_kv).
TEST(Attention, RingWithoutWindowHoldingEverything) {
  AttentionShape lin = shape(3, 20, 4, 2, 16);
  const Inputs in = make_inputs(lin, 1234);
  AttentionShape rs = lin;
  rs.kv_rows = 20;
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    EXPECT_LE(test::rel_l2(run({impl}, rs, in), run({impl}, lin, in)), 1e-7);
  }
}

// One KV position: the output is that position's value row, whatever the scores.
// Two positions with equal keys: the average of the two values. Causality: token 0 of a
// 2-token prefill sees only position 0.
TEST(Attention, HandChecked) {
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    AttentionShape s = shape(1, 1, 2, 1, 4);
    std::vector<float> q = {1, 2, 3, 4, -1, 0, 1, 0}, k = {0.5f, 0.5f, 0.5f, 0.5f},
                       v = {1, -2, 3, -4}, out(8);
    ASSERT_TRUE(attention({impl}, s, q.data(), k.data(), v.data(), out.data()).ok());
    for (int i = 0; i < 8; ++i)
      EXPECT_FLOAT_EQ(out[static_cast<size_t>(i)], v[static_cast<size_t>(i % 4)]);

    s = shape(2, 2, 1, 1, 2);
    q = {1, 0, 1, 0};
    k = {1, 1, 1, 1};
    v = {2, 4, 6, 8};
    out.assign(4, 0);
    ASSERT_TRUE(attention({impl}, s, q.data(), k.data(), v.data(), out.data()).ok());
    EXPECT_FLOAT_EQ(out[0], 2);  // token 0: position 0 only
    EXPECT_FLOAT_EQ(out[1], 4);
    EXPECT_FLOAT_EQ(out[2], 4);  // token 1: mean of positions 0 and 1
    EXPECT_FLOAT_EQ(out[3], 6);
  }
}

TEST(Attention, Errors) {
  std::vector<float> buf(1024);
  const float* p = buf.data();
  AttentionShape s = shape(1, 4, 9, 2, 8);  // 9 heads, 2 KV heads
  Status st = attention({}, s, p, p, p, buf.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("multiple"), std::string::npos) << st.message();
  s = shape(5, 4, 2, 2, 8);  // more tokens than kv positions
  EXPECT_EQ(attention({}, s, p, p, p, buf.data()).code(), StatusCode::kInvalidArgument);
  s = shape(1, 4, 2, 2, 8);
  s.kv_row_stride = 8;
  EXPECT_EQ(attention({}, s, p, p, p, buf.data()).code(), StatusCode::kInvalidArgument);
  s = shape(1, 4, 2, 2, 8);
  EXPECT_EQ(attention({}, s, nullptr, p, p, buf.data()).code(), StatusCode::kInvalidArgument);
  // Rings too small for what the tokens see.
  s = shape(3, 30, 2, 2, 8);
  s.window = 5;
  s.kv_rows = 6;  // 3 tokens with window 5 see 7 positions
  st = attention({}, s, p, p, p, buf.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ring of 6 kv rows"), std::string::npos) << st.message();
  s.kv_rows = 7;
  std::vector<float> out(48);
  EXPECT_TRUE(attention({}, s, p, p, p, out.data()).ok());
  s.window = 0;  // full attention over 30 positions in 7 rows
  EXPECT_EQ(attention({}, s, p, p, p, buf.data()).code(), StatusCode::kInvalidArgument);
  s.kv_rows = -1;
  EXPECT_EQ(attention({}, s, p, p, p, buf.data()).code(), StatusCode::kInvalidArgument);
}

// ---- paged_attention: many sequences over a paged KV cache ----

// Prefill, chunked prefill and decode sequences in one call.
const SeqSpec kMix[] = {{1, 1},   {1, 45},  {12, 12}, {1, 300}, {9, 150},
                        {1, 129}, {33, 33}, {5, 70},  {2, 17},  {1, 16}};

TEST(PagedAttention, FastMatchesReference) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 3000;
  for (auto [n_head, n_head_kv] : {std::pair<int64_t, int64_t>{9, 3}, {8, 8}}) {
    for (int64_t head_dim : {64, 80, 96}) {
      for (int64_t block_size : {16, 7}) {
        for (int64_t window : {0, 37}) {
          const PagedAttentionShape s =
              paged_shape(n_head, n_head_kv, head_dim, block_size, window, seed % 2 ? 8 : 0);
          const PagedInputs in = make_paged(s, kMix, seed++);
          expect_fast_matches_reference(
              in, {nullptr, &pool2, &pool3},
              "heads " + std::to_string(n_head) + "/" + std::to_string(n_head_kv) + " head_dim " +
                  std::to_string(head_dim) + " block " + std::to_string(block_size) + " window " +
                  std::to_string(window));
        }
      }
    }
  }
}

// The paged reference equals the single-sequence reference on a contiguous copy of each
// sequence's K/V, bit for bit.
TEST(PagedAttention, ReferenceMatchesSingleSequence) {
  uint64_t seed = 4000;
  for (int64_t window : {0, 37}) {
    for (int64_t block_size : {16, 7}) {
      const PagedAttentionShape s = paged_shape(9, 3, 80, block_size, window, 8);
      const PagedInputs in = make_paged(s, kMix, seed++);
      const auto ref = run_paged({Impl::kReference}, in);
      for (const AttentionSeq& sq : in.seqs) {
        // [n_kv, kv_row_stride]: the rows of the positions it has (NaN where its table is -1).
        std::vector<float> kc(static_cast<size_t>(sq.n_kv * s.kv_row_stride), NAN), vc = kc;
        for (int64_t j = 0; j < sq.n_kv; ++j) {
          const int32_t blk = sq.block_table[j / block_size];
          if (blk < 0) continue;
          const auto src =
              static_cast<std::ptrdiff_t>((blk * block_size + j % block_size) * s.kv_row_stride);
          const auto dst = static_cast<std::ptrdiff_t>(j * s.kv_row_stride);
          std::copy(in.k.begin() + src, in.k.begin() + src + s.kv_row_stride, kc.begin() + dst);
          std::copy(in.v.begin() + src, in.v.begin() + src + s.kv_row_stride, vc.begin() + dst);
        }
        AttentionShape as = shape(sq.n_tokens, sq.n_kv, s.n_head, s.n_head_kv, s.head_dim);
        as.kv_row_stride = s.kv_row_stride;
        as.window = window;
        const int64_t w = s.n_head * s.head_dim;
        std::vector<float> out(static_cast<size_t>(sq.n_tokens * w));
        ASSERT_TRUE(attention({Impl::kReference}, as, in.q.data() + sq.q_start * w, kc.data(),
                              vc.data(), out.data())
                        .ok());
        EXPECT_EQ(out, rows_of(in, ref, sq))
            << "window " << window << " block " << block_size << " n_kv " << sq.n_kv;
      }
    }
  }
}

// A sequence's output does not depend on the other sequences of the call, bit for bit, on both
// paths (batch invariance: the engine's batched requests give exactly the tokens they give
// alone): the fast path slices a decode by its own length and starts every walk at a multiple
// of its KV block, whatever else is in the call or however many threads run it.
TEST(PagedAttention, BatchIndependence) {
  ThreadPool pool2(2);
  const PagedInputs in = make_paged(paged_shape(8, 8, 64, 16, 0), kMix, 4100);
  const auto ref = run_paged({Impl::kReference}, in);
  const auto fast = run_paged({Impl::kFast, &pool2}, in);
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const std::span<const AttentionSeq> alone(&in.seqs[i], 1);
    const auto ref1 = run_paged({Impl::kReference}, in, alone);
    EXPECT_EQ(rows_of(in, ref1, in.seqs[i]), rows_of(in, ref, in.seqs[i])) << "sequence " << i;
    const auto fast1 = run_paged({Impl::kFast, &pool2}, in, alone);
    EXPECT_EQ(rows_of(in, fast1, in.seqs[i]), rows_of(in, fast, in.seqs[i])) << "sequence " << i;
    const auto fast_inline = run_paged({Impl::kFast, nullptr}, in, alone);
    EXPECT_EQ(rows_of(in, fast_inline, in.seqs[i]), rows_of(in, fast, in.seqs[i]))
        << "sequence " << i << " on one thread";
    // Nothing but its own rows is written.
    size_t written = 0;
    for (float x : ref1) written += std::isnan(x) ? 0 : 1;
    EXPECT_EQ(written, static_cast<size_t>(in.seqs[i].n_tokens * 8 * 64));
  }
}

// With a sliding window a prompt's rows give the same bits however the prompt is chunked (a
// chunk's token blocks start elsewhere, but the walk starts at a multiple of the KV block).
TEST(PagedAttention, WindowedRowsIndependentOfChunking) {
  const PagedInputs in = make_paged(paged_shape(9, 3, 64, 16, 37), kMix, 4200);
  const auto fast = run_paged({Impl::kFast, nullptr}, in);
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const AttentionSeq& sq = in.seqs[i];
    if (sq.n_tokens < 5) continue;
    // The same queries as two chunks of at least 2 rows (a one-row chunk is a decode, which
    // the engine never makes of a prompt's middle).
    for (int64_t c : {int64_t{2}, int64_t{3}}) {
      AttentionSeq a = sq, b = sq;
      a.n_tokens = sq.n_tokens - c;
      a.n_kv = sq.n_kv - c;
      b.q_start = sq.q_start + a.n_tokens;
      b.n_tokens = c;
      const AttentionSeq both[] = {a, b};
      const auto split = run_paged({Impl::kFast, nullptr}, in, both);
      EXPECT_EQ(rows_of(in, split, sq), rows_of(in, fast, sq)) << "sequence " << i << " c " << c;
    }
  }
}

// Encoders: every query sees all n_kv positions. Against a direct double computation.
TEST(PagedAttention, NonCausal) {
  ThreadPool pool2(2);
  const SeqSpec specs[] = {{5, 5}, {1, 40}, {20, 20}, {7, 30}, {1, 1}};
  PagedAttentionShape s = paged_shape(6, 2, 24, 7);
  s.causal = false;
  const PagedInputs in = make_paged(s, specs, 4200);
  const int64_t dh = s.head_dim, group = s.n_head / s.n_head_kv;
  std::vector<float> direct(in.q.size(), NAN);
  for (const AttentionSeq& sq : in.seqs) {
    for (int64_t t = 0; t < sq.n_tokens; ++t) {
      for (int64_t h = 0; h < s.n_head; ++h) {
        const float* qr = in.q.data() + ((sq.q_start + t) * s.n_head + h) * dh;
        const auto row = [&](const std::vector<float>& kv, int64_t j) {
          const int64_t r = int64_t{sq.block_table[j / 7]} * 7 + j % 7;
          return kv.data() + r * s.kv_row_stride + h / group * dh;
        };
        std::vector<double> sc(static_cast<size_t>(sq.n_kv));
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < sq.n_kv; ++j) {
          double d = 0;
          for (int64_t i = 0; i < dh; ++i) d += double{qr[i]} * row(in.k, j)[i];
          sc[static_cast<size_t>(j)] = d * s.scale;
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < dh; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < sq.n_kv; ++j)
            acc += sc[static_cast<size_t>(j)] / sum * row(in.v, j)[i];
          direct[static_cast<size_t>(((sq.q_start + t) * s.n_head + h) * dh + i)] =
              static_cast<float>(acc);
        }
      }
    }
  }
  const auto ref = run_paged({Impl::kReference}, in);
  PagedInputs causal_in = make_paged(paged_shape(6, 2, 24, 7), specs, 4200);
  const auto causal = run_paged({Impl::kReference}, causal_in);
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const AttentionSeq& sq = in.seqs[i];
    EXPECT_LE(test::rel_l2(rows_of(in, ref, sq), rows_of(in, direct, sq)), 1e-12) << i;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
      EXPECT_LE(test::rel_l2(rows_of(in, run_paged({Impl::kFast, pool}, in), sq),
                             rows_of(in, direct, sq)),
                1e-5)
          << i;
    }
    // Early tokens of a prefill see later positions, unlike causal attention.
    if (sq.n_tokens > 1)
      EXPECT_GT(test::rel_l2(rows_of(in, causal, sq), rows_of(in, ref, sq)), 1e-3);
  }
}

// The serving engine's decode step: 64 sequences of lengths 1..600, spread over the pool.
TEST(PagedAttention, DecodeHeavy64) {
  ThreadPool pool2(2), pool4(4);
  std::vector<SeqSpec> specs;
  for (int64_t i = 0; i < 64; ++i) specs.push_back({1, 1 + (i * 389 + 17) % 600});
  specs[5].n_kv = 600;
  specs[9].n_kv = 1;
  uint64_t seed = 4300;
  for (auto [window, block_size] : {std::pair<int64_t, int64_t>{0, 16}, {100, 7}}) {
    const PagedInputs in = make_paged(paged_shape(8, 2, 64, block_size, window), specs, seed++);
    expect_fast_matches_reference(in, {&pool2, &pool4, nullptr},
                                  "64 decodes, window " + std::to_string(window));
  }
}

// A few long decodes (and a chunk of prefill): their positions are sliced over the pool and
// the slices merged.
TEST(PagedAttention, FewLongSequencesSliced) {
  ThreadPool pool2(2), pool4(4);
  const SeqSpec specs[] = {{1, 3000}, {40, 200}, {1, 2500}};
  uint64_t seed = 4400;
  for (int64_t window : {0, 1000}) {
    const PagedInputs in = make_paged(paged_shape(8, 2, 64, 16, window), specs, seed++);
    expect_fast_matches_reference(in, {&pool2, &pool4},
                                  "long decodes, window " + std::to_string(window));
  }
}

TEST(PagedAttention, EverySimdTarget) {
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    uint64_t seed = 4500;
    for (int64_t head_dim : {80, 7}) {
      const PagedInputs in = make_paged(paged_shape(9, 3, head_dim, 7, 20), kMix, seed++);
      expect_fast_matches_reference(
          in, {nullptr}, std::string(simd_target_name()) + " head_dim " + std::to_string(head_dim));
    }
  }
}

TEST(PagedAttention, Errors) {
  const SeqSpec specs[] = {{1, 20}, {3, 40}};
  const PagedInputs base = make_paged(paged_shape(4, 2, 8, 7, 10), specs, 4600);
  const auto call = [&](const PagedAttentionShape& s, std::span<const AttentionSeq> seqs,
                        const float* q) {
    std::vector<float> out(base.q.size());
    return paged_attention({}, s, seqs, q, base.k.data(), base.v.data(), out.data());
  };
  const auto expect_error = [&](const PagedAttentionShape& s, std::span<const AttentionSeq> seqs,
                                std::initializer_list<const char*> words) {
    const Status st = call(s, seqs, base.q.data());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    for (const char* w : words) EXPECT_NE(st.message().find(w), std::string::npos) << st.message();
  };
  // The base case is valid with window 10 and blocks of 7: sequence 0 (position 19 sees 10..19)
  // has -1 for block 0, sequence 1 (positions 37..39 see 28..39) for blocks 0..3.
  ASSERT_EQ(base.tables[0][0], -1);
  ASSERT_EQ(base.tables[1][3], -1);
  EXPECT_TRUE(call(base.s, base.seqs, base.q.data()).ok());
  EXPECT_TRUE(call(base.s, {}, base.q.data()).ok());

  PagedAttentionShape s = base.s;
  s.n_head = 5;
  expect_error(s, base.seqs, {"multiple"});
  s = base.s;
  s.kv_row_stride = 15;
  expect_error(s, base.seqs, {"kv_row_stride"});
  s = base.s;
  s.block_size = 0;
  expect_error(s, base.seqs, {"block_size"});
  s = base.s;
  s.window = -1;
  expect_error(s, base.seqs, {"window"});
  s = base.s;
  s.causal = false;  // with a window
  expect_error(s, base.seqs, {"window", "causal"});
  s.window = 0;  // non-causal: both sequences now see their block 0, which is -1
  expect_error(s, base.seqs, {"sequence 0", "block_table[0] = -1"});
  s = base.s;
  s.window = 0;
  expect_error(s, base.seqs, {"sequence 0", "block_table[0] = -1", "positions 0..6"});

  std::vector<AttentionSeq> seqs = base.seqs;
  seqs[1].n_tokens = 41;
  expect_error(base.s, seqs, {"sequence 1", "n_tokens 41 > n_kv 40"});
  seqs = base.seqs;
  seqs[1].q_start = -1;
  expect_error(base.s, seqs, {"sequence 1", "q_start"});
  seqs = base.seqs;
  seqs[0].n_kv = -2;
  expect_error(base.s, seqs, {"sequence 0", "n_kv"});
  seqs = base.seqs;
  seqs[1].block_table = nullptr;
  expect_error(base.s, seqs, {"sequence 1", "null block_table"});
  // Table entries its queries see: out of range, -1.
  for (int32_t bad : {static_cast<int32_t>(base.s.n_blocks), -1, -7}) {
    std::vector<int32_t> table = base.tables[1];
    table[5] = bad;
    seqs = base.seqs;
    seqs[1].block_table = table.data();
    expect_error(
        base.s, seqs,
        {"sequence 1", ("block_table[5] = " + std::to_string(bad)).c_str(), "positions 35..39"});
  }
  // Block 4 (positions 28..34) is partly in the window of position 37: it is read.
  std::vector<int32_t> table = base.tables[1];
  table[4] = -1;
  seqs = base.seqs;
  seqs[1].block_table = table.data();
  expect_error(base.s, seqs, {"sequence 1", "block_table[4] = -1"});
  // A sequence with no queries reads nothing, whatever its table holds.
  table.assign(table.size(), -5);
  seqs[1].n_tokens = 0;
  EXPECT_TRUE(call(base.s, seqs, base.q.data()).ok());
  EXPECT_EQ(call(base.s, base.seqs, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rinfer::cpu
