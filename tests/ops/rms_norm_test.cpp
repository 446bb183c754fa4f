// rms_norm: fast vs reference on odd sizes, with and without weight, in place, 1..3 threads,
// every SIMD target; a hand-checked row.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

TEST(RmsNorm, FastMatchesReference) {
  ThreadPool pool2(2), pool3(3);
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    for (auto [n_rows, n] :
         {std::pair<int64_t, int64_t>{1, 576}, {3, 37}, {64, 640}, {7, 1}, {2048, 1030}}) {
      const auto x = test::random_floats(static_cast<size_t>(n_rows * n), 11, -3, 3);
      const auto w = test::random_floats(static_cast<size_t>(n), 12);
      for (const float* wp : {static_cast<const float*>(nullptr), w.data()}) {
        std::vector<float> ref(x.size());
        rms_norm({Impl::kReference}, x.data(), wp, n_rows, n, 1e-6f, ref.data());
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          std::vector<float> y(x.size());
          rms_norm({Impl::kFast, pool}, x.data(), wp, n_rows, n, 1e-6f, y.data());
          EXPECT_LE(test::rel_l2(y, ref), 1e-6) << simd_target_name() << " " << n_rows << "x" << n;
          auto inplace = x;
          rms_norm({Impl::kFast, pool}, inplace.data(), wp, n_rows, n, 1e-6f, inplace.data());
          EXPECT_EQ(inplace, y);
        }
      }
    }
  }
}

TEST(RmsNorm, HandChecked) {
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    const std::vector<float> x = {3, 4}, w = {1, 2};
    std::vector<float> y(2);
    rms_norm({impl}, x.data(), w.data(), 1, 2, 0.0f, y.data());
    const float s = 1.0f / std::sqrt(12.5f);
    EXPECT_FLOAT_EQ(y[0], 3 * s);
    EXPECT_FLOAT_EQ(y[1], 8 * s);
  }
}

}  // namespace
}  // namespace rinfer::cpu
