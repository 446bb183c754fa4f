#include "engine/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "recipe/recipe.h"

namespace rinfer {

std::string PrecisionThresholds::to_string() const {
  std::vector<std::string> parts;
  if (min_top1) parts.push_back(fmt::format("top-1 >= {:g}", *min_top1));
  if (max_mean_kl) parts.push_back(fmt::format("mean KL <= {:g}", *max_mean_kl));
  if (max_ppl_change) parts.push_back(fmt::format("ppl change <= +{:g}%", 100.0 * *max_ppl_change));
  if (parts.empty()) return "none";
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

PrecisionThresholds gate_of_recipe(const PrecisionGate& recipe_gate) {
  PrecisionThresholds t;
  if (recipe_gate.min_top1) t.min_top1 = recipe_gate.min_top1;
  if (recipe_gate.max_mean_kl) t.max_mean_kl = recipe_gate.max_mean_kl;
  if (recipe_gate.max_ppl_change) t.max_ppl_change = recipe_gate.max_ppl_change;
  return t;
}

Result<std::vector<float>> teacher_forced_logits(EngineCore& core, std::span<const int32_t> tokens,
                                                 int64_t chunk) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("teacher-forced logits: the token sequence is empty");
  const int64_t n_vocab = core.model().hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n * n_vocab));  // [n, n_vocab]
  const Status s = core.score(tokens, 0, chunk, [&](int64_t row, std::span<const float> l) {
    std::copy(l.begin(), l.end(), logits.begin() + row * n_vocab);
    return ok_status();
  });
  if (!s.ok()) return s.with_context("teacher-forced logits");
  return logits;
}

double perplexity_of_logits(std::span<const float> logits, std::span<const int32_t> tokens,
                            int64_t n_vocab) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 2 || n_vocab <= 0) return 0;
  double sum = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const float* l = logits.data() + i * n_vocab;  // [n_vocab]
    float max_l = l[0];
    for (int64_t v = 1; v < n_vocab; ++v) max_l = std::max(max_l, l[v]);
    double z = 0;
    for (int64_t v = 0; v < n_vocab; ++v) z += std::exp(static_cast<double>(l[v] - max_l));
    sum += std::log(z) - static_cast<double>(l[tokens[static_cast<size_t>(i + 1)]] - max_l);
  }
  return std::exp(sum / static_cast<double>(n - 1));
}

void apply_gate(PrecisionReport& r, const PrecisionThresholds& gate) {
  std::vector<std::string> f;
  // Written so that NaN fails every check.
  if (gate.min_top1 && !(r.logits.top1_agreement >= *gate.min_top1)) {
    f.push_back(fmt::format("top-1 {:.4f} < {:g}", r.logits.top1_agreement, *gate.min_top1));
  }
  if (gate.max_mean_kl && !(r.logits.mean_kl <= *gate.max_mean_kl)) {
    f.push_back(fmt::format("mean KL {:.4g} > {:g}", r.logits.mean_kl, *gate.max_mean_kl));
  }
  // One-sided: a perplexity drop is no loss of precision.
  if (gate.max_ppl_change && !(r.ppl_change <= *gate.max_ppl_change)) {
    f.push_back(fmt::format("ppl change {:+.2f}% above +{:g}%", 100.0 * r.ppl_change,
                            100.0 * *gate.max_ppl_change));
  }
  r.passed = f.empty();
  r.failures.clear();
  for (size_t i = 0; i < f.size(); ++i) r.failures += (i ? "; " : "") + f[i];
}

PrecisionReport compare_precision(std::span<const float> baseline, std::span<const float> variant,
                                  std::span<const int32_t> tokens, int64_t n_vocab,
                                  const PrecisionThresholds& gate) {
  PrecisionReport r;
  r.positions = static_cast<int64_t>(tokens.size());
  r.logits = compare_logits(baseline.data(), variant.data(), r.positions, n_vocab);
  r.ppl_baseline = perplexity_of_logits(baseline, tokens, n_vocab);
  r.ppl_variant = perplexity_of_logits(variant, tokens, n_vocab);
  r.ppl_change = r.ppl_baseline > 0 ? r.ppl_variant / r.ppl_baseline - 1.0 : 0.0;
  apply_gate(r, gate);
  return r;
}

}  // namespace rinfer
