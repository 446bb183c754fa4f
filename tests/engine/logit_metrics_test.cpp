#include "engine/logit_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace rinfer {
namespace {

TEST(LogitMetrics, HandCheckedTwoRows) {
  // Row 0 differs by 0.5 in one logit; row 1 by -1, 0, +3.5 and changes its argmax (0 -> 2).
  const std::vector<float> ref = {0.0f, 1.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  const std::vector<float> test = {0.0f, 1.0f, 2.5f, 2.0f, -1.0f, 4.0f};
  const LogitComparison c = compare_logits(ref.data(), test.data(), 2, 3);
  EXPECT_EQ(c.rows, 2);
  // sum of squared differences 0.25 + 1 + 12.25 = 13.5; of the reference 5 + 9 + 1 + 0.25.
  EXPECT_NEAR(c.rel_l2, std::sqrt(13.5 / 15.25), 1e-12);
  EXPECT_NEAR(c.rel_l2, 0.94087507228077, 1e-12);
  EXPECT_DOUBLE_EQ(c.max_abs, 3.5);
  EXPECT_DOUBLE_EQ(c.top1_agreement, 0.5);
  // KL(p || q) = sum p (a - b) - lse(a) + lse(b).
  auto lse = [](double x, double y, double z) {
    return std::log(std::exp(x) + std::exp(y) + std::exp(z));
  };
  const double p02 = std::exp(2.0 - lse(0, 1, 2));
  const double kl0 = p02 * -0.5 - lse(0, 1, 2) + lse(0, 1, 2.5);
  const double p10 = std::exp(3.0 - lse(3, -1, 0.5)), p12 = std::exp(0.5 - lse(3, -1, 0.5));
  const double kl1 = p10 * 1.0 + p12 * -3.5 - lse(3, -1, 0.5) + lse(2, -1, 4);
  EXPECT_NEAR(kl0, 0.02614146, 1e-8);  // the same values from numpy
  EXPECT_NEAR(kl1, 1.68484638, 1e-8);
  EXPECT_NEAR(c.mean_kl, (kl0 + kl1) / 2, 1e-12);
  EXPECT_NEAR(c.max_kl, kl1, 1e-12);
}

TEST(LogitMetrics, KlClosedFormTwoTokens) {
  // p = (1/2, 1/2), q = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3).
  const float ref[] = {0.0f, 0.0f};
  const float test[] = {static_cast<float>(std::log(3.0)), 0.0f};
  const LogitComparison c = compare_logits(ref, test, 1, 2);
  EXPECT_NEAR(c.mean_kl, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(c.max_kl, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_DOUBLE_EQ(c.top1_agreement, 1.0);  // ref ties -> index 0, the test's max is index 0
}

TEST(LogitMetrics, IdenticalAndShiftedLogits) {
  std::vector<float> ref(4 * 1000);
  // Multiples of 1/8, so that x + 1e4 is exact in f32.
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = std::round(std::sin(0.37f * static_cast<float>(i)) * 72.0f) / 8.0f;
  }
  LogitComparison c = compare_logits(ref.data(), ref.data(), 4, 1000);
  EXPECT_EQ(c.rel_l2, 0.0);
  EXPECT_EQ(c.max_abs, 0.0);
  EXPECT_EQ(c.top1_agreement, 1.0);
  EXPECT_EQ(c.mean_kl, 0.0);
  EXPECT_EQ(c.max_kl, 0.0);

  // A constant shift leaves the softmax (and KL) unchanged; huge offsets stay finite
  // (log-sum-exp), where a naive exp would overflow.
  std::vector<float> shifted = ref;
  for (float& v : shifted) v += 1.0e4f;
  c = compare_logits(ref.data(), shifted.data(), 4, 1000);
  EXPECT_TRUE(std::isfinite(c.mean_kl));
  EXPECT_LT(c.max_kl, 1e-12);
  EXPECT_EQ(c.top1_agreement, 1.0);
  EXPECT_EQ(c.max_abs, 1.0e4);
}

TEST(LogitMetrics, TiesPickTheLowestIndex) {
  const float ref[] = {1.0f, 5.0f, 5.0f, 0.0f};
  const float test[] = {1.0f, 5.0f, 4.0f, 0.0f};
  EXPECT_DOUBLE_EQ(compare_logits(ref, test, 1, 4).top1_agreement, 1.0);
  const float test2[] = {1.0f, 4.0f, 5.0f, 0.0f};
  EXPECT_DOUBLE_EQ(compare_logits(ref, test2, 1, 4).top1_agreement, 0.0);
}

TEST(LogitMetrics, NanNeverPasses) {
  const float ref[] = {0.0f, 1.0f, 2.0f};
  const float test[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  const LogitComparison c = compare_logits(ref, test, 1, 3);
  EXPECT_TRUE(std::isnan(c.rel_l2));
  EXPECT_TRUE(std::isnan(c.max_abs));
  EXPECT_TRUE(std::isnan(c.mean_kl));
  EXPECT_TRUE(std::isnan(c.max_kl));
  EXPECT_EQ(c.top1_agreement, 0.0);
}

TEST(LogitMetrics, EmptyAndZeroReference) {
  EXPECT_EQ(compare_logits(nullptr, nullptr, 0, 10).rows, 0);
  const float zero[] = {0.0f, 0.0f};
  const float one[] = {0.0f, 1.0f};
  EXPECT_EQ(compare_logits(zero, zero, 1, 2).rel_l2, 0.0);
  EXPECT_TRUE(std::isinf(compare_logits(zero, one, 1, 2).rel_l2));
}

}  // namespace
}  // namespace rinfer
