#include "engine/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

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

Result<std::vector<float>> decode_forced_logits(EngineCore& core, std::span<const int32_t> tokens,
                                                int64_t prefill, int64_t seats) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = core.model().hparams().n_vocab;
  if (prefill < 1 || prefill >= n) {
    return invalid_argument("decode logits: a prompt of {} of {} tokens (it takes 1 to {})",
                            prefill, n, n - 1);
  }
  if (n >= core.options().n_ctx) {
    return out_of_range(
        "decode logits: {} tokens and the step after them do not fit the context "
        "of {} positions",
        n, core.options().n_ctx);
  }
  if (seats < 1 || seats > core.options().scheduler.max_seqs) {
    return invalid_argument("decode logits: {} seats, where the engine core runs 1 to {}", seats,
                            core.options().scheduler.max_seqs);
  }
  const int64_t rows = n - prefill + 1;  // positions prefill - 1 .. n - 1
  const auto per_seat = static_cast<size_t>(rows * n_vocab);
  std::vector<float> logits(static_cast<size_t>(seats) * per_seat);
  std::vector<int64_t> got(static_cast<size_t>(seats), 0);
  std::vector<RequestId> ids;
  Status error;
  int64_t finished = 0;
  for (int64_t s = 0; s < seats; ++s) {
    RequestParams p;
    p.prompt.assign(tokens.begin(), tokens.begin() + prefill);
    p.forced.assign(tokens.begin() + prefill, tokens.end());
    p.max_tokens = rows;
    p.ignore_eos = true;
    p.want_logits = true;
    p.sampling.temperature = 0.0f;
    p.cache_salt = 0x64ec0de000000000ULL + static_cast<uint64_t>(s);
    p.on_event = [&, s](const RequestEvent& ev) {
      int64_t& k = got[static_cast<size_t>(s)];
      if (!ev.logits.empty() && k < rows && static_cast<int64_t>(ev.logits.size()) == n_vocab) {
        std::copy(ev.logits.begin(), ev.logits.end(),
                  logits.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(s) * per_seat +
                                                               static_cast<size_t>(k * n_vocab)));
        ++k;
      }
      if (ev.finish != FinishReason::kNone) {
        ++finished;
        if (ev.finish == FinishReason::kError && error.ok()) error = ev.error;
      }
    };
    auto id = core.submit(std::move(p));
    if (!id.ok()) {
      for (RequestId r : ids) core.abort(r);
      (void)core.run_until_idle();
      return id.status().with_context("decode logits");
    }
    ids.push_back(*id);
  }
  while (finished < seats) {
    const auto st = core.step();
    if (!st.ok()) return st.status().with_context("decode logits");
  }
  if (!error.ok()) return error.with_context("decode logits");
  for (int64_t s = 0; s < seats; ++s) {
    if (got[static_cast<size_t>(s)] != rows) {
      return internal_error("decode logits: seat {} handed out {} logit rows of {}", s,
                            got[static_cast<size_t>(s)], rows);
    }
  }
  return logits;
}

PrecisionReport worse_of(const PrecisionReport& a, const PrecisionReport& b) {
  PrecisionReport r = a;
  r.positions = std::max(a.positions, b.positions);
  r.logits.rows = std::max(a.logits.rows, b.logits.rows);
  // Written so that a NaN in either side carries over.
  const auto hi = [](double x, double y) { return std::isnan(x) || x >= y ? x : y; };
  const auto lo = [](double x, double y) { return std::isnan(x) || x <= y ? x : y; };
  r.logits.rel_l2 = hi(a.logits.rel_l2, b.logits.rel_l2);
  r.logits.max_abs = hi(a.logits.max_abs, b.logits.max_abs);
  r.logits.top1_agreement = lo(a.logits.top1_agreement, b.logits.top1_agreement);
  r.logits.mean_kl = hi(a.logits.mean_kl, b.logits.mean_kl);
  r.logits.max_kl = hi(a.logits.max_kl, b.logits.max_kl);
  if (std::isnan(b.ppl_change) || b.ppl_change > a.ppl_change) {
    r.ppl_baseline = b.ppl_baseline;
    r.ppl_variant = b.ppl_variant;
    r.ppl_change = b.ppl_change;
  }
  r.passed = a.passed && b.passed;
  r.failures = a.failures;
  if (!b.failures.empty()) r.failures += (r.failures.empty() ? "" : "; ") + b.failures;
  return r;
}

Result<PrecisionReport> decode_precision(EngineCore& variant, std::span<const float> reference,
                                         std::span<const int32_t> tokens, int64_t steps,
                                         std::span<const int64_t> seats,
                                         const PrecisionThresholds& gate) {
  const int64_t n_vocab = variant.model().hparams().n_vocab;
  if (static_cast<int64_t>(reference.size()) != static_cast<int64_t>(tokens.size()) * n_vocab) {
    return invalid_argument("decode precision: {} reference logits for {} tokens of {}",
                            reference.size(), tokens.size(), n_vocab);
  }
  const int64_t n =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), variant.options().n_ctx - 1);
  if (n < 2) return invalid_argument("decode precision: {} tokens, where it takes 2", n);
  tokens = tokens.first(static_cast<size_t>(n));
  const int64_t prefill = n - std::clamp<int64_t>(steps, 1, n - 1);
  std::optional<PrecisionReport> worst;
  const int64_t rows = n - prefill + 1;
  const auto ref = reference.subspan(static_cast<size_t>((prefill - 1) * n_vocab));
  const auto toks = tokens.subspan(static_cast<size_t>(prefill - 1));
  for (const int64_t s : seats) {
    if (s > variant.options().scheduler.max_seqs) continue;
    RINFER_ASSIGN_OR_RETURN(std::vector<float> l,
                            decode_forced_logits(variant, tokens, prefill, s));
    for (int64_t i = 0; i < s; ++i) {
      const std::span<const float> seat(l.data() + i * rows * n_vocab,
                                        static_cast<size_t>(rows * n_vocab));
      PrecisionReport r = compare_precision(ref, seat, toks, n_vocab, gate);
      if (!r.passed)
        r.failures = fmt::format("decode at {} seat{}: {}", s, s == 1 ? "" : "s", r.failures);
      worst = worst ? worse_of(*worst, r) : r;
      if (!r.passed) break;  // the other seats add nothing to the verdict
    }
  }
  if (!worst) return invalid_argument("decode precision: no seat count fits the engine core");
  return *worst;
}

}  // namespace rinfer
