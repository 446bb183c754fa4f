// swiglu, add and softmax: fast vs reference on odd sizes (and extreme inputs for swiglu),
// aliasing, 1..3 threads, every SIMD target; hand-checked values.

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

TEST(Swiglu, FastMatchesReference) {
  ThreadPool pool2(2), pool3(3);
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    for (int64_t n : {1, 17, 1536, 70001, 600001}) {
      auto g = test::random_floats(static_cast<size_t>(n), 1, -12, 12);
      const auto u = test::random_floats(static_cast<size_t>(n), 2, -2, 2);
      if (n > 3) {
        g[0] = -150.0f;  // exp overflow side: silu -> -0
        g[1] = 150.0f;   // silu -> g
        g[2] = -87.5f;
      }
      std::vector<float> ref(g.size());
      swiglu({Impl::kReference}, g.data(), u.data(), n, ref.data());
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> y(g.size());
        swiglu({Impl::kFast, pool}, g.data(), u.data(), n, y.data());
        EXPECT_LE(test::rel_l2(y, ref), 1e-6) << simd_target_name() << " n " << n;
        for (float v : y) ASSERT_TRUE(std::isfinite(v));
        auto inplace = g;
        swiglu({Impl::kFast, pool}, inplace.data(), u.data(), n, inplace.data());
        EXPECT_EQ(inplace, y);
      }
    }
  }
  const float g = 1.5f, u = 2.0f;
  float y = 0;
  swiglu({Impl::kReference}, &g, &u, 1, &y);
  EXPECT_FLOAT_EQ(y, 1.5f / (1.0f + std::exp(-1.5f)) * 2.0f);
}

// GeGLU with the tanh GELU against the formula written out in double, on odd sizes, aliasing
// and 1..3 threads.
TEST(GegluTanh, MatchesScalarFormula) {
  ThreadPool pool2(2), pool3(3);
  for (int64_t n : {1, 7, 33, 1000, 70001}) {
    const auto g = test::random_floats(static_cast<size_t>(n), 11 + n, -6, 6);
    const auto u = test::random_floats(static_cast<size_t>(n), 12 + n, -2, 2);
    std::vector<double> want(static_cast<size_t>(n));
    for (size_t i = 0; i < want.size(); ++i) {
      const double x = g[i];
      const double c = std::sqrt(2.0 / M_PI);
      want[i] = 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x))) * u[i];
    }
    std::vector<float> ref(static_cast<size_t>(n));
    geglu_tanh({Impl::kReference}, g.data(), u.data(), n, ref.data());
    std::vector<float> want_f(want.begin(), want.end());
    EXPECT_LE(test::rel_l2(ref, want_f), 1e-7) << n;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<float> y(static_cast<size_t>(n));
      geglu_tanh({Impl::kFast, pool}, g.data(), u.data(), n, y.data());
      EXPECT_LE(test::rel_l2(y, want_f), 1e-6) << n;
      std::vector<float> inplace = g;
      geglu_tanh({Impl::kFast, pool}, inplace.data(), u.data(), n, inplace.data());
      EXPECT_EQ(inplace, y) << n;
    }
  }
  // Hand-checked: gelu_tanh(0) = 0, gelu_tanh(1) = 0.8411920 (to 7 digits), large g -> g.
  const float gs[3] = {0.0f, 1.0f, 20.0f}, us[3] = {3.0f, 1.0f, 0.5f};
  float y[3];
  geglu_tanh({Impl::kReference}, gs, us, 3, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], 0.841192f, 1e-5);
  EXPECT_FLOAT_EQ(y[2], 10.0f);
}

TEST(Add, FastMatchesReferenceExactly) {
  ThreadPool pool2(2), pool3(3);
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    for (int64_t n : {1, 15, 576, 100003, 4200001}) {
      const auto a = test::random_floats(static_cast<size_t>(n), 3);
      const auto b = test::random_floats(static_cast<size_t>(n), 4);
      std::vector<float> ref(a.size());
      add({Impl::kReference}, a.data(), b.data(), n, ref.data());
      EXPECT_EQ(ref[0], a[0] + b[0]);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> y(a.size());
        add({Impl::kFast, pool}, a.data(), b.data(), n, y.data());
        EXPECT_EQ(y, ref);
        auto inplace = a;
        add({Impl::kFast, pool}, inplace.data(), b.data(), n, inplace.data());
        EXPECT_EQ(inplace, ref);
      }
    }
  }
}

TEST(Softmax, Values) {
  std::vector<float> x = {1, 2, 3};
  softmax(x.data(), 3);
  const double e1 = std::exp(-2.0), e2 = std::exp(-1.0), s = e1 + e2 + 1.0;
  EXPECT_FLOAT_EQ(x[0], static_cast<float>(e1 / s));
  EXPECT_FLOAT_EQ(x[1], static_cast<float>(e2 / s));
  EXPECT_FLOAT_EQ(x[2], static_cast<float>(1.0 / s));
  // Large values do not overflow; -inf gets probability 0.
  std::vector<float> y = {1000.0f, 1000.0f, -INFINITY};
  softmax(y.data(), 3);
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 0.0f);
  auto z = test::random_floats(1001, 5, -30, 30);
  softmax(z.data(), 1001);
  EXPECT_NEAR(std::accumulate(z.begin(), z.end(), 0.0), 1.0, 1e-6);
}

}  // namespace
}  // namespace rinfer::cpu
