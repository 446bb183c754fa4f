// A seeded fuzz of the sampler: random vocabulary sizes, rows of logits with NaN, +inf, -inf,
// huge, tiny and ordinary values, every setting at the edges validate() accepts, random
// histories (out-of-vocabulary ids included) and uniforms at 0 and 1 - 2^-53.
//
// It guards the class of bugs where the sampler read out of bounds (an empty candidate set after
// NaN probabilities) or returned a garbage id for bad numbers: every call must either fail with
// kDataLoss (exactly when the row holds NaN or +inf, or no finite logit) or return an id in
// [0, n_vocab) whose logit is finite, the argmax when the temperature is 0, and otherwise one of
// the candidates, which form a distribution over finite-logit tokens. Runs in a few seconds
// under ASan/UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/cpu/sampler.h"

namespace rinfer {
namespace {

class Fuzz {
 public:
  explicit Fuzz(uint64_t seed) : rng_(seed) {}
  uint64_t next() { return rng_(); }
  int64_t range(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  double unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }
  template <typename T>
  T pick(std::initializer_list<T> v) {
    return *(v.begin() + range(0, static_cast<int64_t>(v.size()) - 1));
  }

 private:
  std::mt19937_64 rng_;
};

constexpr float kNaN = NAN;
constexpr float kInf = INFINITY;

std::vector<float> random_row(Fuzz& f, int64_t n) {
  std::vector<float> row(static_cast<size_t>(n));
  // How the row is made: ordinary values with a few specials sprinkled in, rows dominated by
  // specials, or a row that is all -inf but one finite value.
  const int style = static_cast<int>(f.range(0, 9));
  const bool allow_bad = f.chance(0.25);  // NaN / +inf allowed in this row
  const double special_rate = style < 6 ? 0.01 : (style < 9 ? 0.3 : 1.0);
  const double scale = f.pick({1.0, 10.0, 1e4, 1e30});
  for (float& v : row) {
    v = static_cast<float>((f.unit() * 2.0 - 1.0) * scale);
    if (!f.chance(special_rate)) continue;
    switch (f.range(0, allow_bad ? 9 : 6)) {
      case 0: v = -kInf; break;
      case 1: v = 1e38f; break;
      case 2: v = -1e38f; break;
      case 3: v = 1e-45f; break;
      case 4: v = FLT_MAX; break;
      case 5: v = -FLT_MAX; break;
      case 6: v = 0.0f; break;
      case 7: v = kNaN; break;
      case 8: v = kInf; break;
      default: v = -kNaN; break;
    }
  }
  if (style == 9 && f.chance(0.5)) {  // all masked but one (or none)
    std::fill(row.begin(), row.end(), -kInf);
    if (f.chance(0.8)) row[static_cast<size_t>(f.range(0, n - 1))] = f.pick({0.0f, -3e38f, 5.0f});
  }
  return row;
}

SamplingParams random_params(Fuzz& f, int64_t n) {
  SamplingParams p;
  p.temperature =
      f.pick({0.0f, 0.0f, SamplingParams::kMinTemperature, 2e-4f, 0.3f, 1.0f, 1.7f, 100.0f});
  p.top_k = static_cast<int32_t>(
      f.pick<int64_t>({0, 0, 1, 2, 40, n, n + 1, f.range(1, std::max<int64_t>(1, n)), 1 << 24}));
  p.top_p = f.pick({1.0f, 1.0f, 0.95f, 0.5f, 1e-6f, FLT_MIN, std::nextafter(1.0f, 0.0f)});
  p.min_p = f.pick({0.0f, 0.0f, 0.05f, 0.5f, std::nextafter(1.0f, 0.0f)});
  p.repeat_penalty = f.pick({1.0f, 1.0f, 1.1f, 0.5f, 10.0f, 1e-30f});
  p.presence_penalty = f.pick({0.0f, 0.0f, 0.5f, 10.0f, -10.0f});
  p.frequency_penalty = f.pick({0.0f, 0.0f, 0.3f, 2.0f, -2.0f, 10.0f});
  p.repeat_last_n = static_cast<int32_t>(f.pick<int64_t>({0, 1, 64, 100000}));
  p.seed = f.next();
  return p;
}

std::vector<int32_t> random_history(Fuzz& f, int64_t n) {
  std::vector<int32_t> h(static_cast<size_t>(f.range(0, 80)));
  for (int32_t& id : h) id = static_cast<int32_t>(f.range(-5, n + 5));
  return h;
}

// The penalties as documented (each distinct id in the window once, the frequency penalty times
// its count in the window; a finite logit stays finite).
std::vector<float> penalized(std::vector<float> l, const SamplingParams& p,
                             const std::vector<int32_t>& history) {
  const size_t w = std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
  std::vector<int32_t> seen;
  for (size_t i = history.size() - w; i < history.size(); ++i) {
    const int32_t id = history[i];
    if (id < 0 || id >= static_cast<int32_t>(l.size())) continue;
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    float& x = l[static_cast<size_t>(id)];
    if (!std::isfinite(x)) continue;
    if (p.repeat_penalty != 1.0f) x = x > 0.0f ? x / p.repeat_penalty : x * p.repeat_penalty;
    const auto count =
        std::count(history.end() - static_cast<std::ptrdiff_t>(w), history.end(), id);
    x = std::clamp(x - p.presence_penalty - p.frequency_penalty * static_cast<float>(count),
                   -FLT_MAX, FLT_MAX);
  }
  return l;
}

int32_t argmax_of(const std::vector<float>& l) {
  int32_t best = -1;
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isfinite(l[i]) && (best < 0 || l[i] > l[static_cast<size_t>(best)])) {
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

TEST(SamplerFuzzTest, EveryCallIsAnErrorOrAFiniteLogitToken) {
  Fuzz f(20240519);
  int errors = 0, greedy_checked = 0, draws = 0;
  const int kIterations = 4000;
  for (int it = 0; it < kIterations; ++it) {
    // Small vocabularies often (edge cases), up to 5000.
    const int64_t n = f.chance(0.3) ? f.range(1, 8) : f.range(1, 5000);
    const SamplingParams p = random_params(f, n);
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    const std::vector<float> row = random_row(f, n);
    const std::vector<int32_t> history = random_history(f, n);
    bool bad = false, any_finite = false;
    for (float v : row) {
      bad |= std::isnan(v) || v == kInf;
      any_finite |= std::isfinite(v);
    }
    const bool must_fail = bad || !any_finite;

    Sampler s(p, n);
    std::vector<float> l = row;
    Result<int32_t> r = Result<int32_t>(0);
    if (f.chance(0.3)) {
      r = s.sample(l, history);
    } else {
      r = s.sample_with_uniform(l, history, f.pick({0.0, 1.0 - 0x1.0p-53, 0.5, f.unit()}));
    }
    const std::string where =
        "iteration " + std::to_string(it) + ", n_vocab " + std::to_string(n) + ", " + p.to_string();
    if (must_fail) {
      ASSERT_FALSE(r.ok()) << where;
      ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << where << ": " << r.status().message();
      ++errors;
      continue;
    }
    ASSERT_TRUE(r.ok()) << where << ": " << r.status().to_string();
    const int32_t id = *r;
    ASSERT_GE(id, 0) << where;
    ASSERT_LT(id, n) << where;
    ASSERT_TRUE(std::isfinite(row[static_cast<size_t>(id)])) << where << ": token " << id;
    const std::vector<float> pen = penalized(row, p, history);
    ASSERT_EQ(l, pen) << where;  // the row as the sampler left it: the penalties, nothing else
    if (p.temperature == 0.0f) {
      ASSERT_EQ(id, argmax_of(pen)) << where;
      ++greedy_checked;
      continue;
    }
    // The candidates: a distribution over finite-logit tokens that holds the draw.
    const auto c = s.candidates();
    ASSERT_FALSE(c.empty()) << where;
    double mass = 0;
    bool has_id = false;
    for (const TokenProb& t : c) {
      ASSERT_TRUE(t.id >= 0 && t.id < n && std::isfinite(row[static_cast<size_t>(t.id)])) << where;
      ASSERT_TRUE(std::isfinite(t.p) && t.p >= 0.0f) << where;
      mass += t.p;
      has_id |= t.id == id;
    }
    ASSERT_NEAR(mass, 1.0, 1e-3) << where;
    ASSERT_TRUE(has_id) << where << ": token " << id;
    // top-k 1 keeps one token, the most probable (the argmax, unless probabilities that round
    // to the same float tie it with a lower id).
    if (p.top_k == 1) ASSERT_EQ(c.size(), 1u) << where;
    ++draws;
  }
  // The generator made every kind of case (a fuzz that never fails or never draws proves little).
  EXPECT_GT(errors, kIterations / 20);
  EXPECT_GT(greedy_checked, kIterations / 10);
  EXPECT_GT(draws, kIterations / 5);
}

// Any single NaN or +inf, wherever it sits (the first token, the last, next to the maximum), is an
// error for every setting, greedy included; a lone -inf is not.
TEST(SamplerFuzzTest, ASingleNaNOrPlusInfIsAlwaysAnError) {
  Fuzz f(7);
  for (int it = 0; it < 1500; ++it) {
    const int64_t n = f.range(1, 600);
    const SamplingParams p = random_params(f, n);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = static_cast<float>(f.unit() * 8.0 - 4.0);
    const auto at = static_cast<size_t>(f.pick<int64_t>({0, n - 1, f.range(0, n - 1)}));
    const float special = f.pick({kNaN, -kNaN, kInf, -kInf});
    row[at] = special;
    Sampler s(p, n);
    std::vector<float> l = row;
    const Result<int32_t> r = s.sample_with_uniform(l, random_history(f, n), f.unit());
    const bool masked_only = special == -kInf && n > 1;
    if (masked_only) {
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_NE(static_cast<size_t>(*r), at);
    } else {
      ASSERT_FALSE(r.ok()) << "n " << n << " at " << at << " " << special;
      ASSERT_EQ(r.status().code(), StatusCode::kDataLoss);
      if (special != -kInf) {
        ASSERT_NE(r.status().message().find("at token " + std::to_string(at)), std::string::npos)
            << r.status().message();
      }
    }
  }
}

}  // namespace
}  // namespace rinfer
