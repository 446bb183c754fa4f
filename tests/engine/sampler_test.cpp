// The sampler's stages on hand-made distributions, seeded reproducibility and the penalties.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace rinfer {
namespace {

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

SamplingParams plain(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.presence_penalty = 0.0f;
  p.seed = 7;
  return p;
}

std::vector<int32_t> ids_of(std::span<const TokenProb> c) {
  std::vector<int32_t> v;
  for (const TokenProb& t : c) v.push_back(t.id);
  std::sort(v.begin(), v.end());
  return v;
}

const std::vector<double> kProbs = {0.05, 0.5, 0.15, 0.3};  // sorted ids: 1, 3, 2, 0

TEST(SamplerTest, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f), 5);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(l, {}), 1);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{-3, -2, -2}), 1);
}

TEST(SamplerTest, NoFiltersKeepsTheWholeSoftmax) {
  Sampler s(plain(), 4);
  std::vector<float> l = logits_of(kProbs);
  s.sample(l, {});
  auto c = s.candidates();
  ASSERT_EQ(c.size(), 4u);
  for (const TokenProb& t : c) EXPECT_NEAR(t.p, kProbs[t.id], 1e-6);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  for (float t : {0.5f, 2.0f}) {
    Sampler s(plain(t), 4);
    std::vector<float> l = logits_of(kProbs);
    s.sample(l, {});
    double z = 0;
    for (double p : kProbs) z += std::pow(p, 1.0 / t);
    for (const TokenProb& c : s.candidates()) {
      EXPECT_NEAR(c.p, std::pow(kProbs[c.id], 1.0 / t) / z, 1e-6) << "T " << t;
    }
  }
}

TEST(SamplerTest, TopK) {
  SamplingParams p = plain();
  p.top_k = 2;
  Sampler s(p, 4);
  std::vector<float> l = logits_of(kProbs);
  const int32_t id = s.sample(l, {});
  EXPECT_EQ(ids_of(s.candidates()), (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(s.candidates()[0].p, 0.5 / 0.8, 1e-6);  // renormalized, most probable first
  EXPECT_TRUE(id == 1 || id == 3);

  p.top_k = 1;  // top-k 1 is greedy at any temperature
  p.temperature = 5.0f;
  Sampler one(p, 4);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> l2 = logits_of(kProbs);
    EXPECT_EQ(one.sample(l2, {}), 1);
  }
}

TEST(SamplerTest, TopP) {
  for (auto [top_p, want] : std::vector<std::pair<float, std::vector<int32_t>>>{
           {0.45f, {1}}, {0.75f, {1, 3}}, {0.81f, {1, 2, 3}}, {0.99f, {0, 1, 2, 3}}}) {
    SamplingParams p = plain();
    p.top_p = top_p;
    Sampler s(p, 4);
    std::vector<float> l = logits_of(kProbs);
    s.sample(l, {});
    EXPECT_EQ(ids_of(s.candidates()), want) << "top_p " << top_p;
  }
}

TEST(SamplerTest, TopPAfterTopKUsesTheRemainingMass) {
  SamplingParams p = plain();
  p.top_k = 3;      // {1, 3, 2}, mass 0.95
  p.top_p = 0.85f;  // 0.85 * 0.95 = 0.8075 > 0.8: needs the third
  Sampler s(p, 4);
  std::vector<float> l = logits_of(kProbs);
  s.sample(l, {});
  EXPECT_EQ(ids_of(s.candidates()), (std::vector<int32_t>{1, 2, 3}));
}

TEST(SamplerTest, TopPOnALargeFlatVocabulary) {
  // 10000 equal tokens: the growing sorted prefix must reach 5000 of them.
  SamplingParams p = plain();
  p.top_p = 0.5f;
  Sampler s(p, 10000);
  std::vector<float> l(10000, 0.25f);
  s.sample(l, {});
  EXPECT_NEAR(static_cast<double>(s.candidates().size()), 5000.0, 2.0);
}

TEST(SamplerTest, MinP) {
  SamplingParams p = plain();
  p.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1: drops 0.05
  Sampler s(p, 4);
  std::vector<float> l = logits_of(kProbs);
  s.sample(l, {});
  EXPECT_EQ(ids_of(s.candidates()), (std::vector<int32_t>{1, 2, 3}));
  p.min_p = 0.7f;  // threshold 0.35: only 0.5
  Sampler s2(p, 4);
  l = logits_of(kProbs);
  EXPECT_EQ(s2.sample(l, {}), 1);
  EXPECT_EQ(s2.candidates().size(), 1u);
}

TEST(SamplerTest, SameSeedSameDrawsAndFrequenciesMatch) {
  const int n = 20000;
  std::vector<int32_t> a, b, c;
  for (uint64_t seed : {11u, 11u, 12u}) {
    SamplingParams p = plain();
    p.seed = seed;
    Sampler s(p, 4);
    std::vector<int32_t>& out = seed == 12 ? c : (a.empty() ? a : b);
    for (int i = 0; i < n; ++i) {
      std::vector<float> l = logits_of(kProbs);
      out.push_back(s.sample(l, {}));
    }
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::map<int32_t, int> count;
  for (int32_t id : a) ++count[id];
  for (int id = 0; id < 4; ++id) {
    EXPECT_NEAR(count[id] / static_cast<double>(n), kProbs[id], 0.012) << "id " << id;
  }
  // reseed() restarts the sequence.
  SamplingParams p = plain();
  p.seed = 99;
  Sampler s(p, 4);
  std::vector<int32_t> first, again;
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = logits_of(kProbs);
    first.push_back(s.sample(l, {}));
  }
  s.reseed(99);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = logits_of(kProbs);
    again.push_back(s.sample(l, {}));
  }
  EXPECT_EQ(first, again);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveMultipliesNegativeOnce) {
  SamplingParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 3;
  Sampler s(p, 6);
  std::vector<float> l = {4.0f, -1.0f, 3.0f, 2.0f, 1.0f, 0.5f};
  // The window is the last 3 tokens: {1, 2, 2}; token 0 (earlier) is not penalized, token 2
  // appears twice but is penalized once.
  const std::vector<int32_t> history = {0, 1, 2, 2};
  s.apply_penalties(l, history);
  EXPECT_FLOAT_EQ(l[0], 4.0f);
  EXPECT_FLOAT_EQ(l[1], -2.0f);
  EXPECT_FLOAT_EQ(l[2], 1.5f);
  EXPECT_FLOAT_EQ(l[3], 2.0f);
  // A second call sees clean marks (nothing left over from the first).
  std::vector<float> l2 = {4.0f, -1.0f, 3.0f, 2.0f, 1.0f, 0.5f};
  s.apply_penalties(l2, history);
  EXPECT_FLOAT_EQ(l2[2], 1.5f);
}

TEST(SamplerTest, PresencePenaltyAndGreedyAfterPenalties) {
  SamplingParams p = plain(0.0f);
  p.presence_penalty = 1.5f;
  p.repeat_last_n = 64;
  Sampler s(p, 4);
  std::vector<float> l = {1.0f, 2.0f, 1.8f, 0.0f};
  const std::vector<int32_t> history = {1, 1, 1, 3};
  EXPECT_EQ(s.sample(l, history), 2);  // 2.0 - 1.5 < 1.8
  EXPECT_FLOAT_EQ(l[1], 0.5f);
  EXPECT_FLOAT_EQ(l[3], -1.5f);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
}

TEST(SamplerTest, PenaltiesOffByDefaultWindowZeroOrOutOfRangeIds) {
  SamplingParams p = plain(0.0f);
  p.repeat_penalty = 3.0f;
  p.repeat_last_n = 0;
  Sampler s(p, 3);
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  s.apply_penalties(l, std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  p.repeat_last_n = 8;
  Sampler s2(p, 3);
  s2.apply_penalties(l, std::vector<int32_t>{-1, 7, 2});  // bad ids are ignored
  EXPECT_FLOAT_EQ(l[2], 1.0f);
}

TEST(SamplerTest, Validate) {
  auto bad = [](auto edit, const std::string& needle) {
    SamplingParams p;
    edit(p);
    Status st = p.validate();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  EXPECT_TRUE(SamplingParams().validate().ok());
  bad([](SamplingParams& p) { p.temperature = -1; }, "temperature");
  bad([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  bad([](SamplingParams& p) { p.top_p = 0; }, "top_p");
  bad([](SamplingParams& p) { p.min_p = 1; }, "min_p");
  bad([](SamplingParams& p) { p.repeat_penalty = 0; }, "repeat_penalty");
  bad([](SamplingParams& p) { p.repeat_last_n = -1; }, "repeat_last_n");
}

}  // namespace
}  // namespace rinfer
