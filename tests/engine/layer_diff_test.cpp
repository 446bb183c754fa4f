// TapRecorder / TapComparer (engine/layer_diff.h) against sums worked by hand, the errors of
// runs that tap differently, and the two summaries (first past a threshold, largest growth).
#include "engine/layer_diff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace rinfer {
namespace {

TEST(LayerDiff, MetricsAcrossPassesMatchTheirDefinitions) {
  TapRecorder a;
  // Two passes of the same stream (2 rows, then 1), width 2.
  const std::vector<float> ra1 = {1, 2, 3, 4}, ra2 = {-1, 0.5f};
  a.record(TapKind::kAttnOut, 3, ra1.data(), 2, 2);
  a.record(TapKind::kAttnOut, 3, ra2.data(), 1, 2);
  ASSERT_TRUE(a.status().ok());
  ASSERT_NE(a.find(TapKind::kAttnOut, 3), nullptr);
  EXPECT_EQ(a.find(TapKind::kAttnOut, 3)->rows(), 3);
  EXPECT_EQ(a.find(TapKind::kAttnOut, 2), nullptr);

  TapComparer c(a);
  // B's passes cut elsewhere (1 row, then 2): compared row by row all the same.
  const std::vector<float> rb1 = {1.5f, 2}, rb2 = {3, 3, -1, 0.25f};
  c.record(TapKind::kAttnOut, 3, rb1.data(), 1, 2);
  c.record(TapKind::kAttnOut, 3, rb2.data(), 2, 2);
  auto r = c.results();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  const TapDiff& d = (*r)[0];
  const std::vector<double> x = {1, 2, 3, 4, -1, 0.5}, y = {1.5, 2, 3, 3, -1, 0.25};
  double d2 = 0, a2 = 0, b2 = 0, ab = 0, mx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d2 += (y[i] - x[i]) * (y[i] - x[i]);
    a2 += x[i] * x[i];
    b2 += y[i] * y[i];
    ab += x[i] * y[i];
    mx = std::max(mx, std::fabs(y[i] - x[i]));
  }
  EXPECT_EQ(d.rows, 3);
  EXPECT_EQ(d.width, 2);
  EXPECT_NEAR(d.rel_l2, std::sqrt(d2 / a2), 1e-12);
  EXPECT_NEAR(d.cosine, ab / std::sqrt(a2 * b2), 1e-12);
  EXPECT_DOUBLE_EQ(d.max_abs, 1.0);
  EXPECT_EQ(tap_label(d.kind, d.layer), "layer 3 attn_out");
}

TEST(LayerDiff, RunsThatTapDifferentlyAreErrors) {
  TapRecorder a;
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  a.record(TapKind::kBlockOut, 0, v.data(), 2, 3);
  {  // B lacks the stream.
    TapComparer c(a);
    auto r = c.results();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("layer 0 block_out: the first run has it"),
              std::string::npos)
        << r.status().message();
  }
  {  // Other width.
    TapComparer c(a);
    c.record(TapKind::kBlockOut, 0, v.data(), 3, 2);
    auto r = c.results();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("rows of 2 values against 3"), std::string::npos);
  }
  {  // More rows than A, then fewer.
    TapComparer c(a);
    c.record(TapKind::kBlockOut, 0, v.data(), 2, 3);
    c.record(TapKind::kBlockOut, 0, v.data(), 1, 3);
    EXPECT_FALSE(c.results().ok());
    TapComparer d(a);
    d.record(TapKind::kBlockOut, 0, v.data(), 1, 3);
    auto r = d.results();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("1 rows in the second run, 2 in the first"),
              std::string::npos);
  }
  {  // A stream A never had.
    TapComparer c(a);
    c.record(TapKind::kMlpOut, 0, v.data(), 2, 3);
    EXPECT_FALSE(c.results().ok());
  }
  {  // A recorder that wants only block_out ignores the rest.
    TapRecorder only(tap_bit(TapKind::kBlockOut));
    EXPECT_TRUE(only.wants(TapKind::kBlockOut));
    EXPECT_FALSE(only.wants(TapKind::kAttnNorm));
    only.record(TapKind::kAttnNorm, 0, v.data(), 2, 3);
    EXPECT_TRUE(only.streams().empty());
  }
}

TEST(LayerDiff, NanPropagatesAndZeroReferenceIsInfinite) {
  TapRecorder a;
  const std::vector<float> zero = {0, 0}, one = {1, 1};
  const std::vector<float> nan = {1, std::numeric_limits<float>::quiet_NaN()};
  a.record(TapKind::kEmbed, -1, zero.data(), 1, 2);
  a.record(TapKind::kBlockOut, 0, one.data(), 1, 2);
  TapComparer c(a);
  c.record(TapKind::kEmbed, -1, one.data(), 1, 2);
  c.record(TapKind::kBlockOut, 0, nan.data(), 1, 2);
  auto r = c.results();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_TRUE(std::isinf((*r)[0].rel_l2));
  EXPECT_TRUE(std::isnan((*r)[1].rel_l2));
  EXPECT_TRUE(std::isnan((*r)[1].max_abs));
  // A NaN is past any threshold.
  EXPECT_EQ(first_past(std::span<const TapDiff>(&(*r)[1], 1), 1e9), std::optional<size_t>(0));
}

TEST(LayerDiff, FirstPastAndLargestGrowth) {
  auto row = [](TapKind k, int32_t layer, double e) {
    TapDiff d;
    d.kind = k;
    d.layer = layer;
    d.rel_l2 = e;
    return d;
  };
  const std::vector<TapDiff> diffs = {
      row(TapKind::kEmbed, -1, 0.001),     row(TapKind::kAttnOut, 0, 0.02),
      row(TapKind::kBlockOut, 0, 0.002),   row(TapKind::kMlpOut, 1, 0.07),
      row(TapKind::kBlockOut, 1, 0.03),    row(TapKind::kBlockOut, 2, 0.04),
      row(TapKind::kLogits, 3, 0.2)};
  EXPECT_EQ(first_past(diffs, 0.05), std::optional<size_t>(3));
  EXPECT_EQ(first_past(diffs, 0.01), std::optional<size_t>(1));
  EXPECT_EQ(first_past(diffs, 0.5), std::nullopt);
  auto g = largest_growth(diffs);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->first, 4u);  // layer 1: x15 over layer 0 (layer 0 x2 over the embedding)
  EXPECT_NEAR(g->second, 15.0, 1e-9);
  EXPECT_EQ(first_difference(diffs), std::optional<size_t>(0));
  // A planted fault: no difference before layer 2; growth counts only from a non-zero error.
  const std::vector<TapDiff> fault = {
      row(TapKind::kEmbed, -1, 0),       row(TapKind::kBlockOut, 0, 0),
      row(TapKind::kMlpOut, 1, 0),       row(TapKind::kBlockOut, 1, 0),
      row(TapKind::kMlpOut, 2, 0.5),     row(TapKind::kBlockOut, 2, 0.3),
      row(TapKind::kBlockOut, 3, 0.45),  row(TapKind::kBlockOut, 4, 0.9)};
  EXPECT_EQ(first_difference(fault), std::optional<size_t>(4));
  g = largest_growth(fault);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->first, 7u);  // x2 (layer 3: x1.5)
  EXPECT_NEAR(g->second, 2.0, 1e-12);
  EXPECT_EQ(largest_growth(std::span<const TapDiff>(fault.data(), 6)), std::nullopt);
  EXPECT_EQ(first_difference(std::span<const TapDiff>(fault.data(), 4)), std::nullopt);
}

TEST(LayerDiff, TapNamesRoundTrip) {
  for (int k = 0; k < kTapKindCount; ++k) {
    const auto kind = static_cast<TapKind>(k);
    EXPECT_EQ(tap_kind_of(tap_name(kind)), kind);
  }
  EXPECT_EQ(tap_kind_of("attention"), std::nullopt);
  EXPECT_EQ(tap_label(TapKind::kEmbed, -1), "embed");
  EXPECT_EQ(tap_label(TapKind::kLogits, 30), "logits");
}

}  // namespace
}  // namespace rinfer
