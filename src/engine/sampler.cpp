#include "engine/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rinfer {

namespace {

bool by_prob_desc(const TokenProb& a, const TokenProb& b) {
  return a.p > b.p || (a.p == b.p && a.id < b.id);
}

}  // namespace

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return invalid_argument("temperature {} must be >= 0", temperature);
  }
  if (top_k < 0) return invalid_argument("top_k {} must be >= 0 (0 = off)", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return invalid_argument("top_p {} must be in (0, 1] (1 = off)", top_p);
  }
  if (!(min_p >= 0.0f && min_p < 1.0f)) {
    return invalid_argument("min_p {} must be in [0, 1) (0 = off)", min_p);
  }
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty)) {
    return invalid_argument("repeat_penalty {} must be > 0 (1 = off)", repeat_penalty);
  }
  if (repeat_last_n < 0) return invalid_argument("repeat_last_n {} must be >= 0", repeat_last_n);
  if (!std::isfinite(presence_penalty)) {
    return invalid_argument("presence_penalty {} must be finite", presence_penalty);
  }
  return ok_status();
}

std::string SamplingParams::to_string() const {
  if (temperature <= 0.0f) {
    return fmt::format("greedy, repeat_penalty {} over {}, presence_penalty {}", repeat_penalty,
                       repeat_last_n, presence_penalty);
  }
  return fmt::format(
      "temperature {}, top_k {}, top_p {}, min_p {}, repeat_penalty {} over {}, "
      "presence_penalty {}, seed {}",
      temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, seed);
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params),
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

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  const bool repeat = params_.repeat_penalty != 1.0f;
  const bool presence = params_.presence_penalty != 0.0f;
  if ((!repeat && !presence) || params_.repeat_last_n == 0 || history.empty()) return;
  const size_t n = std::min(history.size(), static_cast<size_t>(params_.repeat_last_n));
  const std::span<const int32_t> window = history.last(n);
  for (int32_t id : window) {
    if (id < 0 || id >= n_vocab_) continue;
    uint8_t& mark = seen_[static_cast<size_t>(id)];
    if (mark) continue;  // each distinct token is penalized once
    mark = 1;
    float& l = logits[static_cast<size_t>(id)];
    if (repeat) l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    l -= params_.presence_penalty;
  }
  for (int32_t id : window) {
    if (id >= 0 && id < n_vocab_) seen_[static_cast<size_t>(id)] = 0;
  }
}

void Sampler::softmax_candidates(std::span<const float> logits) {
  const float inv_t = 1.0f / params_.temperature;
  float max_l = -INFINITY;
  for (float l : logits) max_l = std::max(max_l, l);
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float p = std::exp((logits[i] - max_l) * inv_t);  // the max maps to 1
    cand_[i] = {static_cast<int32_t>(i), p};
    sum += p;
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < logits.size(); ++i) cand_[i].p *= inv;
  n_cand_ = logits.size();
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
  const float threshold = p * p_max;
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
  return cand_[n_cand_ - 1].id;  // u rounded up to the total
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  return sample_impl(logits, history, nullptr);
}

int32_t Sampler::sample_with_uniform(std::span<float> logits, std::span<const int32_t> history,
                                     double u) {
  return sample_impl(logits, history, &u);
}

int32_t Sampler::sample_impl(std::span<float> logits, std::span<const int32_t> history,
                             const double* u) {
  apply_penalties(logits, history);
  const int32_t best = argmax(logits);
  if (params_.temperature <= 0.0f) return best;
  if (!std::isfinite(logits[static_cast<size_t>(best)])) return best;  // NaN/inf logits
  softmax_candidates(logits);
  top_k(params_.top_k);
  top_p(params_.top_p);
  min_p(params_.min_p);
  // Renormalize what is left, so candidates() reads as a distribution.
  double total = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) total += cand_[i].p;
  const auto inv = static_cast<float>(1.0 / total);
  for (size_t i = 0; i < n_cand_; ++i) cand_[i].p *= inv;
  return draw(u != nullptr ? *u : uniform());
}

}  // namespace rinfer
