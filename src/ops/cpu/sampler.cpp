#include "ops/cpu/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/error.h"

namespace rinfer {

namespace {

bool by_prob_desc(const TokenProb& a, const TokenProb& b) {
  return a.p > b.p || (a.p == b.p && a.id < b.id);
}

std::string frequency_note(float frequency_penalty) {
  return frequency_penalty != 0.0f ? fmt::format(", frequency_penalty {}", frequency_penalty)
                                   : std::string();
}

}  // namespace

Status SamplingParams::validate() const {
  if (std::isnan(temperature) || temperature < 0.0f || temperature > kMaxTemperature) {
    return invalid_argument("temperature {} must be in [0, {}] (0 = greedy)", temperature,
                            kMaxTemperature);
  }
  if (temperature > 0.0f && temperature < kMinTemperature) {
    // 1 / T would overflow (or nearly): the softmax would be all NaN.
    return invalid_argument(
        "temperature {} is too small: use 0 for greedy, or a temperature of at least {}",
        temperature, kMinTemperature);
  }
  if (top_k < 0) return invalid_argument("top_k {} must be >= 0 (0 = off)", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) {  // NaN fails every comparison
    return invalid_argument("top_p {} must be in (0, 1] (1 = off)", top_p);
  }
  if (!(min_p >= 0.0f && min_p < 1.0f)) {
    return invalid_argument("min_p {} must be in [0, 1) (0 = off)", min_p);
  }
  if (!(repeat_penalty > 0.0f && repeat_penalty <= kMaxRepeatPenalty)) {
    return invalid_argument("repeat_penalty {} must be in (0, {}] (1 = off)", repeat_penalty,
                            kMaxRepeatPenalty);
  }
  if (repeat_last_n < 0) return invalid_argument("repeat_last_n {} must be >= 0", repeat_last_n);
  if (!(presence_penalty >= -kMaxPresencePenalty && presence_penalty <= kMaxPresencePenalty)) {
    return invalid_argument("presence_penalty {} must be in [{}, {}] (0 = off)", presence_penalty,
                            -kMaxPresencePenalty, kMaxPresencePenalty);
  }
  if (!(frequency_penalty >= -kMaxPresencePenalty && frequency_penalty <= kMaxPresencePenalty)) {
    return invalid_argument("frequency_penalty {} must be in [{}, {}] (0 = off)", frequency_penalty,
                            -kMaxPresencePenalty, kMaxPresencePenalty);
  }
  return ok_status();
}

std::string SamplingParams::to_string() const {
  if (temperature <= 0.0f) {
    return fmt::format("greedy, repeat_penalty {} over {}, presence_penalty {}{}", repeat_penalty,
                       repeat_last_n, presence_penalty, frequency_note(frequency_penalty));
  }
  return fmt::format(
      "temperature {}, top_k {}, top_p {}, min_p {}, repeat_penalty {} over {}, "
      "presence_penalty {}{}, seed {}",
      temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty,
      frequency_note(frequency_penalty), seed);
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params),
      params_status_(params.validate()),
      n_vocab_(n_vocab),
      rng_(params.seed),
      cand_(static_cast<size_t>(n_vocab)),
      seen_(static_cast<size_t>(n_vocab), 0) {}

void Sampler::reseed(uint64_t seed) {
  params_.seed = seed;
  rng_.seed(seed);
}

double Sampler::uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;  // 53 random bits
}

int32_t Sampler::argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Status Sampler::find_max(std::span<const float> logits, int32_t* best, float* max_logit) {
  size_t b = 0;
  float m = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!(l < INFINITY)) {  // NaN or +inf
      return data_loss("the logits hold {} at token {}", std::isnan(l) ? "NaN" : "+inf", i);
    }
    if (l > m) {
      m = l;
      b = i;
    }
  }
  if (m == -INFINITY) {
    return data_loss("no logit is finite (all {} are -inf): no token can be sampled",
                     logits.size());
  }
  *best = static_cast<int32_t>(b);
  *max_logit = m;
  return ok_status();
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  const bool repeat = params_.repeat_penalty != 1.0f;
  const bool presence = params_.presence_penalty != 0.0f;
  const bool frequency = params_.frequency_penalty != 0.0f;
  if ((!repeat && !presence && !frequency) || params_.repeat_last_n == 0 || history.empty()) {
    return;
  }
  const size_t n = std::min(history.size(), static_cast<size_t>(params_.repeat_last_n));
  const std::span<const int32_t> window = history.last(n);
  if (frequency) {
    if (counts_.size() != static_cast<size_t>(n_vocab_)) {
      counts_.assign(static_cast<size_t>(n_vocab_), 0);
    }
    for (int32_t id : window) {
      if (id >= 0 && id < n_vocab_) ++counts_[static_cast<size_t>(id)];
    }
  }
  for (int32_t id : window) {
    if (id < 0 || id >= n_vocab_ || static_cast<size_t>(id) >= logits.size()) continue;
    uint8_t& mark = seen_[static_cast<size_t>(id)];
    if (mark) continue;  // each distinct token is penalized once
    mark = 1;
    float& l = logits[static_cast<size_t>(id)];
    if (!std::isfinite(l)) continue;  // -inf stays masked; NaN and +inf are reported later
    if (repeat) l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    l -= params_.presence_penalty;
    if (frequency) {
      l -= params_.frequency_penalty * static_cast<float>(counts_[static_cast<size_t>(id)]);
    }
    l = std::clamp(l, -FLT_MAX, FLT_MAX);  // a finite logit stays finite (and sampleable)
  }
  for (int32_t id : window) {
    if (id < 0 || id >= n_vocab_) continue;
    seen_[static_cast<size_t>(id)] = 0;
    if (frequency) counts_[static_cast<size_t>(id)] = 0;
  }
}

void Sampler::softmax_candidates(std::span<const float> logits, float max_logit) {
  // T >= kMinTemperature (validate()): 1 / T is finite and > 0, so (l - max) / T is <= 0 or
  // -inf (a masked token, or a gap that overflows) and never NaN; the max maps to exactly 1.
  const float inv_t = 1.0f / params_.temperature;
  double sum = 0.0;
  size_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float p = std::exp((logits[i] - max_logit) * inv_t);
    if (p > 0.0f) {  // p == 0 can never be drawn
      cand_[n++] = {static_cast<int32_t>(i), p};
      sum += p;
    }
  }
  const auto inv = static_cast<float>(1.0 / sum);  // sum >= 1
  for (size_t i = 0; i < n; ++i) cand_[i].p *= inv;
  n_cand_ = n;
  sorted_ = false;
}

void Sampler::top_k(int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= n_cand_) return;
  const auto mid = cand_.begin() + k;
  std::partial_sort(cand_.begin(), mid, cand_.begin() + static_cast<std::ptrdiff_t>(n_cand_),
                    by_prob_desc);
  n_cand_ = static_cast<size_t>(k);
  sorted_ = true;
}

void Sampler::top_p(float p) {
  if (p >= 1.0f || n_cand_ <= 1) return;
  double total = 0.0;  // the live mass (top-k may have cut some)
  for (size_t i = 0; i < n_cand_; ++i) total += cand_[i].p;
  const double target = static_cast<double>(p) * total;
  // Sort a growing prefix until it holds the mass: usually a few dozen tokens of 49k.
  size_t m = sorted_ ? n_cand_ : std::min<size_t>(64, n_cand_);
  for (;;) {
    if (!sorted_) {
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(m),
                        cand_.begin() + static_cast<std::ptrdiff_t>(n_cand_), by_prob_desc);
    }
    double cum = 0.0;
    for (size_t i = 0; i < m; ++i) {
      cum += cand_[i].p;
      if (cum >= target) {
        n_cand_ = i + 1;
        sorted_ = true;
        return;
      }
    }
    if (m == n_cand_) return;  // rounding: the whole set is needed
    m = std::min(m * 8, n_cand_);
  }
}

void Sampler::min_p(float p) {
  if (p <= 0.0f || n_cand_ <= 1) return;
  float p_max = 0.0f;
  for (size_t i = 0; i < n_cand_; ++i) p_max = std::max(p_max, cand_[i].p);
  const float threshold = p * p_max;  // <= p_max: the most probable token stays
  size_t w = 0;
  for (size_t i = 0; i < n_cand_; ++i) {
    if (cand_[i].p >= threshold) cand_[w++] = cand_[i];  // keeps the order
  }
  n_cand_ = w;
}

int32_t Sampler::draw(double unit) {
  double total = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) total += cand_[i].p;
  const double u = unit * total;
  double cum = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) {
    cum += cand_[i].p;
    if (u < cum) return cand_[i].id;
  }
  return cand_[n_cand_ - 1].id;  // u rounded up to the total (n_cand_ >= 1: sample_impl)
}

Result<int32_t> Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  return sample_impl(logits, history, nullptr);
}

Result<int32_t> Sampler::sample_with_uniform(std::span<float> logits,
                                             std::span<const int32_t> history, double u) {
  return sample_impl(logits, history, &u);
}

Result<int32_t> Sampler::sample_impl(std::span<float> logits, std::span<const int32_t> history,
                                     const double* u) {
  n_cand_ = 0;
  if (!params_status_.ok()) return params_status_.with_context("sampling");
  if (static_cast<int64_t>(logits.size()) != n_vocab_) {
    return invalid_argument("sampling: the logits row has {} values, the vocabulary {}",
                            logits.size(), n_vocab_);
  }
  if (u != nullptr && !(*u >= 0.0 && *u < 1.0)) {
    return invalid_argument("sampling: the uniform draw {} is outside [0, 1)", *u);
  }
  apply_penalties(logits, history);
  int32_t best = 0;
  float max_logit = 0.0f;
  RINFER_RETURN_IF_ERROR(find_max(logits, &best, &max_logit));
  if (params_.temperature <= 0.0f) return best;
  softmax_candidates(logits, max_logit);
  top_k(params_.top_k);
  top_p(params_.top_p);
  min_p(params_.min_p);
  // Renormalize what is left, so candidates() reads as a distribution.
  double total = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) total += cand_[i].p;
  if (n_cand_ == 0 || !(total > 0.0 && std::isfinite(total))) {
    const size_t left = n_cand_;
    n_cand_ = 0;
    return internal_error("sampling: {} candidates (mass {}) left after top-k/top-p/min-p ({})",
                          left, total, params_.to_string());
  }
  const auto inv = static_cast<float>(1.0 / total);
  for (size_t i = 0; i < n_cand_; ++i) cand_[i].p *= inv;
  return draw(u != nullptr ? *u : uniform());
}

}  // namespace rinfer
