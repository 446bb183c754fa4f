// rope: fast vs reference in both modes, n_rot < head_dim (the tail passes through), large
// positions, 1..3 threads; hand-checked rotations.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

TEST(Rope, FastMatchesReference) {
  ThreadPool pool2(2), pool3(3);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (auto [head_dim, n_rot] : {std::pair<int64_t, int64_t>{64, 64}, {64, 32}, {10, 6}}) {
      for (int64_t n_tokens : {1, 3, 33}) {
        const int64_t n_heads = 3;
        RopeParams p;
        p.n_rot = n_rot;
        p.mode = mode;
        p.freq_base = 500000.0f;
        p.freq_scale = 0.5f;
        std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
        for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int32_t>(t * 977 + 5);
        const auto x = test::random_floats(static_cast<size_t>(n_tokens * n_heads * head_dim), 3);
        auto ref = x;
        rope({Impl::kReference}, ref.data(), n_tokens, n_heads, head_dim, pos, p);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          auto y = x;
          rope({Impl::kFast, pool}, y.data(), n_tokens, n_heads, head_dim, pos, p);
          EXPECT_LE(test::rel_l2(y, ref), 1e-6) << "mode " << static_cast<int>(mode) << " head_dim "
                                                << head_dim << " n_rot " << n_rot;
          // Dims past n_rot are untouched.
          for (int64_t r = 0; r < n_tokens * n_heads; ++r) {
            for (int64_t d = n_rot; d < head_dim; ++d) {
              const auto i = static_cast<size_t>(r * head_dim + d);
              EXPECT_EQ(y[i], x[i]);
            }
          }
        }
        EXPECT_GT(test::rel_l2(ref, x), 0.1);  // it did rotate
      }
    }
  }
}

// Consecutive positions (a prefill) take the angle-addition path; long runs stay exact.
TEST(Rope, ConsecutivePositions) {
  ThreadPool pool(2);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    RopeParams p;
    p.n_rot = 64;
    p.mode = mode;
    const int64_t n_tokens = 300, n_heads = 2, head_dim = 64;
    std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
    for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int32_t>(100000 + t);
    pos[150] = 7;  // a jump in the middle restarts the recurrence
    const auto x = test::random_floats(static_cast<size_t>(n_tokens * n_heads * head_dim), 8);
    auto ref = x;
    rope({Impl::kReference}, ref.data(), n_tokens, n_heads, head_dim, pos, p);
    for (ThreadPool* pl : {static_cast<ThreadPool*>(nullptr), &pool}) {
      auto y = x;
      rope({Impl::kFast, pl}, y.data(), n_tokens, n_heads, head_dim, pos, p);
      EXPECT_LE(test::rel_l2(y, ref), 1e-6);
    }
  }
}

TEST(Rope, HandChecked) {
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    // head_dim 4, n_rot 4, base 100: pair 0 rotates by p, pair 1 by p / 10.
    RopeParams p;
    p.n_rot = 4;
    p.freq_base = 100.0f;
    const std::vector<int32_t> pos = {0, 2};
    std::vector<float> x = {1, 2, 3, 4, 1, 0, 0, 1};
    rope({impl}, x.data(), 2, 1, 4, pos, p);
    EXPECT_FLOAT_EQ(x[0], 1);  // position 0: identity
    EXPECT_FLOAT_EQ(x[3], 4);
    // normal mode at position 2: (x0, x1) = (1, 0) rotated by 2 rad, (x2, x3) = (0, 1) by 0.2.
    EXPECT_NEAR(x[4], std::cos(2.0), 1e-6);
    EXPECT_NEAR(x[5], std::sin(2.0), 1e-6);
    EXPECT_NEAR(x[6], -std::sin(0.2), 1e-6);
    EXPECT_NEAR(x[7], std::cos(0.2), 1e-6);
    // neox mode pairs (0, 2) and (1, 3).
    p.mode = RopeMode::kNeox;
    std::vector<float> y = {1, 0, 0, 1};
    const std::vector<int32_t> pos2 = {2};
    rope({impl}, y.data(), 1, 1, 4, pos2, p);
    EXPECT_NEAR(y[0], std::cos(2.0), 1e-6);
    EXPECT_NEAR(y[2], std::sin(2.0), 1e-6);
    EXPECT_NEAR(y[1], -std::sin(0.2), 1e-6);
    EXPECT_NEAR(y[3], std::cos(0.2), 1e-6);
  }
}

}  // namespace
}  // namespace rinfer::cpu
