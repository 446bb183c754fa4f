// attention: the fast flash-attention path vs the double-precision reference, for GQA ratios
// 1, 3 and 4, head dims that are and are not multiples of the vector width, decode and prefill,
// n_kv up to 1024, a padded KV row stride, 1..3 threads and every SIMD target. Plus hand-checked
// values and argument errors.

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
}

}  // namespace
}  // namespace rinfer::cpu
