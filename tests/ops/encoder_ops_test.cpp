// The encoder ops (layer_norm with and without the fused residual, add_bias, the erf GELU,
// pool_rows): fast vs the float64 reference on random data of odd and round sizes, 1..3
// threads, every SIMD target; hand-checked values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

const std::pair<int64_t, int64_t> kShapes[] = {{1, 384}, {3, 37}, {64, 1536}, {7, 1}, {300, 384}};

TEST(LayerNorm, FastMatchesReferenceWithAndWithoutResidual) {
  ThreadPool pool2(2), pool3(3);
  for (auto [n_rows, n] : kShapes) {
    const auto x = test::random_floats(static_cast<size_t>(n_rows * n), 21, -3, 3);
    const auto res = test::random_floats(x.size(), 22, -2, 2);
    const auto g = test::random_floats(static_cast<size_t>(n), 23, 0.5f, 1.5f);
    const auto b = test::random_floats(static_cast<size_t>(n), 24);
    for (const float* rp : {static_cast<const float*>(nullptr), res.data()}) {
      std::vector<float> ref(x.size());
      layer_norm({Impl::kReference}, x.data(), rp, g.data(), b.data(), n_rows, n, 1e-12f,
                 ref.data());
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> y(x.size());
        layer_norm({Impl::kFast, pool}, x.data(), rp, g.data(), b.data(), n_rows, n, 1e-12f,
                   y.data());
        // One element rows normalize to beta exactly; others by relative L2.
        EXPECT_LE(test::rel_l2(y, ref), 2e-6) << n_rows << "x" << n;
        // In place over the residual (how the encoder calls it).
        if (rp != nullptr) {
          auto inplace = res;
          layer_norm({Impl::kFast, pool}, x.data(), inplace.data(), g.data(), b.data(), n_rows, n,
                     1e-12f, inplace.data());
          EXPECT_EQ(inplace, y);
        }
      }
    }
  }
}

TEST(LayerNorm, HandChecked) {
  const float x[4] = {1, 2, 3, 4}, g[4] = {1, 1, 2, 2}, b[4] = {0, 0, 0, 1};
  float y[4];
  layer_norm({Impl::kReference}, x, nullptr, g, b, 1, 4, 0.0f, y);
  const double s = std::sqrt(1.25);  // variance of 1..4
  EXPECT_NEAR(y[0], -1.5 / s, 1e-6);
  EXPECT_NEAR(y[3], 2 * 1.5 / s + 1, 1e-6);
}

TEST(AddBias, AddsTheRowVectorToEveryRow) {
  ThreadPool pool(3);
  for (auto [n_rows, n] : kShapes) {
    auto x = test::random_floats(static_cast<size_t>(n_rows * n), 31);
    const auto b = test::random_floats(static_cast<size_t>(n), 32);
    auto want = x;
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t i = 0; i < n; ++i)
        want[static_cast<size_t>(r * n + i)] += b[static_cast<size_t>(i)];
    }
    add_bias({Impl::kFast, &pool}, x.data(), b.data(), n_rows, n);
    EXPECT_EQ(x, want);
  }
}

TEST(GeluErf, FastMatchesReference) {
  ThreadPool pool2(2), pool3(3);
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    for (auto [n_rows, n] : kShapes) {
      const auto x = test::random_floats(static_cast<size_t>(n_rows * n), 41, -6, 6);
      const auto bias = test::random_floats(static_cast<size_t>(n), 42);
      for (const float* bp : {static_cast<const float*>(nullptr), bias.data()}) {
        auto ref = x;
        gelu_erf({Impl::kReference}, ref.data(), bp, n_rows, n);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          auto y = x;
          gelu_erf({Impl::kFast, pool}, y.data(), bp, n_rows, n);
          EXPECT_LE(test::rel_l2(y, ref), 1e-6) << simd_target_name() << " " << n_rows << "x" << n;
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], ref[i], 4e-7 * (1 + std::fabs(ref[i]))) << "element " << i;
          }
        }
      }
    }
  }
}

TEST(GeluErf, HandCheckedAndExtremes) {
  float v[7] = {0.0f, 1.0f, -1.0f, 3.0f, -10.0f, 40.0f, -40.0f};
  gelu_erf({Impl::kFast}, v, nullptr, 1, 7);
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_NEAR(v[1], 0.8413447460685429, 3e-7);
  EXPECT_NEAR(v[2], -0.15865525393145707, 3e-7);
  EXPECT_NEAR(v[3], 2.995950197, 1e-6);
  EXPECT_NEAR(v[4], 0.0, 1e-20);
  EXPECT_EQ(v[5], 40.0f);
  EXPECT_TRUE(std::isfinite(v[6]));
  EXPECT_NEAR(v[6], 0.0, 1e-30);
}

TEST(PoolRows, MeanAndClsWithNormalization) {
  const int64_t n = 5;
  const auto h = test::random_floats(static_cast<size_t>(9 * n), 51);
  const std::vector<int32_t> starts{0, 4, 5};   // slots [0, 4), [4, 5), [5, 9)
  const std::vector<int32_t> lengths{3, 1, 4};  // the first slot has a padding row
  std::vector<float> mean(3 * n), cls(3 * n), unnorm(3 * n);
  pool_rows(PoolKind::kMean, true, h.data(), n, starts, lengths, mean.data());
  pool_rows(PoolKind::kCls, false, h.data(), n, starts, lengths, cls.data());
  pool_rows(PoolKind::kMean, false, h.data(), n, starts, lengths, unnorm.data());
  for (int64_t s = 0; s < 3; ++s) {
    double norm = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double m = 0.0;
      for (int64_t r = 0; r < lengths[static_cast<size_t>(s)]; ++r) {
        m += h[static_cast<size_t>((starts[static_cast<size_t>(s)] + r) * n + i)];
      }
      m /= lengths[static_cast<size_t>(s)];
      EXPECT_NEAR(unnorm[static_cast<size_t>(s * n + i)], m, 1e-6);
      EXPECT_EQ(cls[static_cast<size_t>(s * n + i)],
                h[static_cast<size_t>(starts[static_cast<size_t>(s)] * n + i)]);
      norm += m * m;
    }
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(mean[static_cast<size_t>(s * n + i)],
                  unnorm[static_cast<size_t>(s * n + i)] / std::sqrt(norm), 1e-6);
    }
  }
  std::vector<float> zero(n, 0.0f), out(n, 1.0f);
  const std::vector<int32_t> s0{0}, l1{1};
  pool_rows(PoolKind::kMean, true, zero.data(), n, s0, l1, out.data());
  EXPECT_EQ(out, zero);  // a zero vector stays zero (no NaN)
}

}  // namespace
}  // namespace rinfer::cpu
