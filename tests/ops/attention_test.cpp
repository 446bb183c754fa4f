// attention: the fast flash-attention path vs the double-precision reference, for GQA ratios
// 1, 3 and 4, head dims that are and are not multiples of the vector width, decode and prefill,
// n_kv up to 1024, a padded KV row stride, 1..3 threads and every SIMD target; sliding windows,
// and ring-addressed K/V (kv_rows) against the linear layout. Plus hand-checked values and
// argument errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

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

}  // namespace
}  // namespace rinfer::cpu
