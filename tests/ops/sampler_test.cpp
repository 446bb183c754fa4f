// The sampler's stages on hand-made distributions, seeded reproducibility and the penalties.
#include "ops/cpu/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
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

// The id of a sample that must succeed (-1, and a failure, when it does not).
int32_t ok_id(const Result<int32_t>& r) {
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : -1;
}

const std::vector<double> kProbs = {0.05, 0.5, 0.15, 0.3};  // sorted ids: 1, 3, 2, 0

TEST(SamplerTest, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f), 5);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(ok_id(s.sample(l, {})), 1);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{-3, -2, -2}), 1);
}

TEST(SamplerTest, NoFiltersKeepsTheWholeSoftmax) {
  Sampler s(plain(), 4);
  std::vector<float> l = logits_of(kProbs);
  ok_id(s.sample(l, {}));
  auto c = s.candidates();
  ASSERT_EQ(c.size(), 4u);
  for (const TokenProb& t : c) EXPECT_NEAR(t.p, kProbs[t.id], 1e-6);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  for (float t : {0.5f, 2.0f}) {
    Sampler s(plain(t), 4);
    std::vector<float> l = logits_of(kProbs);
    ok_id(s.sample(l, {}));
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
  const int32_t id = ok_id(s.sample(l, {}));
  EXPECT_EQ(ids_of(s.candidates()), (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(s.candidates()[0].p, 0.5 / 0.8, 1e-6);  // renormalized, most probable first
  EXPECT_TRUE(id == 1 || id == 3);

  p.top_k = 1;  // top-k 1 is greedy at any temperature
  p.temperature = 5.0f;
  Sampler one(p, 4);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> l2 = logits_of(kProbs);
    EXPECT_EQ(ok_id(one.sample(l2, {})), 1);
  }
}

TEST(SamplerTest, TopP) {
  for (auto [top_p, want] : std::vector<std::pair<float, std::vector<int32_t>>>{
           {0.45f, {1}}, {0.75f, {1, 3}}, {0.81f, {1, 2, 3}}, {0.99f, {0, 1, 2, 3}}}) {
    SamplingParams p = plain();
    p.top_p = top_p;
    Sampler s(p, 4);
    std::vector<float> l = logits_of(kProbs);
    ok_id(s.sample(l, {}));
    EXPECT_EQ(ids_of(s.candidates()), want) << "top_p " << top_p;
  }
}

TEST(SamplerTest, TopPAfterTopKUsesTheRemainingMass) {
  SamplingParams p = plain();
  p.top_k = 3;      // {1, 3, 2}, mass 0.95
  p.top_p = 0.85f;  // 0.85 * 0.95 = 0.8075 > 0.8: needs the third
  Sampler s(p, 4);
  std::vector<float> l = logits_of(kProbs);
  ok_id(s.sample(l, {}));
  EXPECT_EQ(ids_of(s.candidates()), (std::vector<int32_t>{1, 2, 3}));
}

TEST(SamplerTest, TopPOnALargeFlatVocabulary) {
  // 10000 equal tokens: the growing sorted prefix must reach 5000 of them.
  SamplingParams p = plain();
  p.top_p = 0.5f;
  Sampler s(p, 10000);
  std::vector<float> l(10000, 0.25f);
  ok_id(s.sample(l, {}));
  EXPECT_NEAR(static_cast<double>(s.candidates().size()), 5000.0, 2.0);
}

TEST(SamplerTest, MinP) {
  SamplingParams p = plain();
  p.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1: drops 0.05
  Sampler s(p, 4);
  std::vector<float> l = logits_of(kProbs);
  ok_id(s.sample(l, {}));
  EXPECT_EQ(ids_of(s.candidates()), (std::vector<int32_t>{1, 2, 3}));
  p.min_p = 0.7f;  // threshold 0.35: only 0.5
  Sampler s2(p, 4);
  l = logits_of(kProbs);
  EXPECT_EQ(ok_id(s2.sample(l, {})), 1);
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
      out.push_back(ok_id(s.sample(l, {})));
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
    first.push_back(ok_id(s.sample(l, {})));
  }
  s.reseed(99);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = logits_of(kProbs);
    again.push_back(ok_id(s.sample(l, {})));
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
  EXPECT_EQ(ok_id(s.sample(l, history)), 2);  // 2.0 - 1.5 < 1.8
  EXPECT_FLOAT_EQ(l[1], 0.5f);
  EXPECT_FLOAT_EQ(l[3], -1.5f);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
}

TEST(SamplerTest, FrequencyPenaltyCountsOccurrencesInTheWindow) {
  SamplingParams p = plain(0.0f);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.repeat_last_n = 4;
  Sampler s(p, 4);
  std::vector<float> l = {1.0f, 2.0f, 1.8f, 0.0f};
  // The window is the last 4 ids: 1 three times, 3 once (the leading 2 is outside it).
  const std::vector<int32_t> history = {2, 1, 1, 1, 3};
  EXPECT_EQ(ok_id(s.sample(l, history)), 2);
  EXPECT_FLOAT_EQ(l[1], 2.0f - 0.25f - 1.5f);
  EXPECT_FLOAT_EQ(l[3], 0.0f - 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[2], 1.8f);
  // The counts are cleared between calls: the same call again penalizes the same amount.
  std::vector<float> l2 = {1.0f, 2.0f, 1.8f, 0.0f};
  s.apply_penalties(l2, history);
  EXPECT_FLOAT_EQ(l2[1], 2.0f - 0.25f - 1.5f);
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

// Guards the bad numbers that used to pass validate(): a temperature so small that 1/T
// overflows (the softmax turned NaN and the draw read past the candidates), NaN and inf in every
// float field, and the documented ranges (docs/recipes.md: temperature [0, 100], repeat_penalty
// (0, 10], presence_penalty [-10, 10]). The message names the field and the value.
TEST(SamplerTest, ValidateRejectsNonFiniteAndTinyValues) {
  auto bad = [](auto edit, const std::string& needle) {
    SamplingParams p;
    edit(p);
    Status st = p.validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  const float nan = std::nanf(""), inf = INFINITY;
  bad([](SamplingParams& p) { p.temperature = 1e-40f; }, "temperature 1e-40 is too small");
  bad([](SamplingParams& p) { p.temperature = 1e-5f; }, "use 0 for greedy");
  bad([&](SamplingParams& p) { p.temperature = nan; }, "temperature nan");
  bad([&](SamplingParams& p) { p.temperature = inf; }, "temperature inf");
  bad([](SamplingParams& p) { p.temperature = 100.5f; }, "temperature 100.5 must be in [0, 100]");
  bad([&](SamplingParams& p) { p.top_p = nan; }, "top_p nan");
  bad([&](SamplingParams& p) { p.top_p = inf; }, "top_p inf");
  bad([&](SamplingParams& p) { p.min_p = nan; }, "min_p nan");
  bad([&](SamplingParams& p) { p.min_p = -inf; }, "min_p -inf");
  bad([&](SamplingParams& p) { p.repeat_penalty = nan; }, "repeat_penalty nan");
  bad([&](SamplingParams& p) { p.repeat_penalty = inf; }, "repeat_penalty inf");
  bad([](SamplingParams& p) { p.repeat_penalty = 10.5f; },
      "repeat_penalty 10.5 must be in (0, 10]");
  bad([&](SamplingParams& p) { p.presence_penalty = nan; }, "presence_penalty nan");
  bad([&](SamplingParams& p) { p.presence_penalty = -inf; }, "presence_penalty -inf");
  bad([&](SamplingParams& p) { p.frequency_penalty = nan; }, "frequency_penalty nan");
  bad([](SamplingParams& p) { p.frequency_penalty = -11; },
      "frequency_penalty -11 must be in [-10, 10]");
  bad([](SamplingParams& p) { p.presence_penalty = 11; },
      "presence_penalty 11 must be in [-10, 10]");
  // The edges that stay accepted.
  for (float t : {0.0f, SamplingParams::kMinTemperature, 100.0f}) {
    SamplingParams p;
    p.temperature = t;
    p.repeat_penalty = 10.0f;
    p.presence_penalty = -10.0f;
    EXPECT_TRUE(p.validate().ok()) << t;
  }
}

// Guards the out-of-bounds read: with a temperature below ~1e-38 the sampler used to make NaN
// probabilities, min-p dropped every candidate and draw() read cand_[-1]. Settings that fail
// validate() are now an error from sample() itself, and the floor temperature on a row with a
// huge spread still gives the argmax.
TEST(SamplerTest, TinyTemperatureIsAnErrorNotAnOutOfBoundsRead) {
  SamplingParams p = plain(1e-40f);
  p.min_p = 0.05f;
  Sampler s(p, 4);
  std::vector<float> l = logits_of(kProbs);
  auto r = s.sample(l, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("temperature"), std::string::npos) << r.status().message();

  Sampler floor(plain(SamplingParams::kMinTemperature), 4);
  std::vector<float> wide = {-3e38f, 2.5f, 3e38f, 2.0f};
  EXPECT_EQ(ok_id(floor.sample(wide, {})), 2);
  ASSERT_EQ(floor.candidates().size(), 1u);
  EXPECT_FLOAT_EQ(floor.candidates()[0].p, 1.0f);
}

// Guards non-finite logits: NaN or +inf anywhere in the row is an error naming the token, on the
// greedy path too (an argmax over NaN is meaningless), and the RNG is not advanced by a failed
// call.
TEST(SamplerTest, NaNOrPlusInfLogitsAreAnErrorNamingTheToken) {
  for (float t : {0.0f, 0.8f}) {
    for (float badv : {std::nanf(""), INFINITY}) {
      Sampler s(plain(t), 5);
      std::vector<float> l = {0.1f, 2.0f, -1.0f, badv, 1.0f};
      auto r = s.sample(l, {});
      ASSERT_FALSE(r.ok()) << "T " << t << " bad " << badv;
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
      const std::string want =
          std::string("the logits hold ") + (std::isnan(badv) ? "NaN" : "+inf") + " at token 3";
      EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
      EXPECT_TRUE(s.candidates().empty());
    }
  }
  Sampler all_masked(plain(), 3);
  std::vector<float> masked(3, -INFINITY);
  auto r = all_masked.sample(masked, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no logit is finite"), std::string::npos);

  // A failed call draws nothing: the next draws are those of a fresh sampler.
  Sampler a(plain(), 4), b(plain(), 4);
  std::vector<float> nan_row = {1.0f, std::nanf(""), 0.5f, 0.2f};
  EXPECT_FALSE(a.sample(nan_row, {}).ok());
  for (int i = 0; i < 20; ++i) {
    std::vector<float> la = logits_of(kProbs), lb = logits_of(kProbs);
    EXPECT_EQ(ok_id(a.sample(la, {})), ok_id(b.sample(lb, {})));
  }
}

// Guards masked tokens: -inf logits are legitimate and never drawn, even with the largest uniform
// (1 - 2^-53, which rounds u * mass up to the mass) and with penalties that would push a finite
// logit past -FLT_MAX.
TEST(SamplerTest, MinusInfIsAMaskedTokenNeverDrawn) {
  SamplingParams p = plain(2.0f);
  p.repeat_penalty = 10.0f;
  p.repeat_last_n = 8;
  Sampler s(p, 6);
  const double u_max = 1.0 - 0x1.0p-53;
  for (double u : {0.0, 0.5, u_max}) {
    std::vector<float> l = {-INFINITY, 0.3f, -INFINITY, -3e38f, 0.7f, -INFINITY};
    const std::vector<int32_t> history = {3};  // -3e38 * 10 would be -inf
    auto r = s.sample_with_uniform(l, history, u);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(*r == 1 || *r == 3 || *r == 4) << "u " << u << ": " << *r;
    EXPECT_EQ(l[3], -FLT_MAX);
  }
  std::vector<float> l = {0.5f, 0.1f};
  EXPECT_FALSE(s.sample_with_uniform(l, {}, 0.5).ok());  // a row of the wrong length
  std::vector<float> l6 = {0.5f, 0.1f, 0.2f, 0.3f, 0.4f, 0.6f};
  EXPECT_FALSE(s.sample_with_uniform(l6, {}, 1.0).ok());  // u outside [0, 1)
}

}  // namespace
}  // namespace rinfer
