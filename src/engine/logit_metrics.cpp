#include "engine/logit_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rinfer {

namespace {

// log(sum(exp(x))) of one row, stable: max + log(sum(exp(x - max))).
double log_sum_exp(const float* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  if (!std::isfinite(m)) {
    // All -inf (or a +inf / NaN): let it propagate as NaN unless every entry is -inf.
    return m;
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

// The first maximum; -1 when the row holds a NaN (such a row never agrees).
int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return -1;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

LogitComparison compare_logits(const float* ref, const float* test, int64_t rows, int64_t n_vocab) {
  LogitComparison c;
  if (rows <= 0 || n_vocab <= 0) return c;
  c.rows = rows;
  double diff2 = 0, ref2 = 0, kl_sum = 0;
  int64_t agree = 0;
  bool any_nan = false;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ref + r * n_vocab;
    const float* b = test + r * n_vocab;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double d = static_cast<double>(b[i]) - static_cast<double>(a[i]);
      diff2 += d * d;
      ref2 += static_cast<double>(a[i]) * static_cast<double>(a[i]);
      const double ad = std::fabs(d);
      if (std::isnan(ad)) any_nan = true;
      c.max_abs = std::max(c.max_abs, ad);
    }
    const int64_t top_a = argmax(a, n_vocab);
    if (top_a >= 0 && top_a == argmax(b, n_vocab)) ++agree;

    // KL(p || q) = sum_i p_i (log p_i - log q_i), log p_i = a_i - lse(a).
    const double lse_a = log_sum_exp(a, n_vocab);
    const double lse_b = log_sum_exp(b, n_vocab);
    double kl = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double lp = static_cast<double>(a[i]) - lse_a;
      const double lq = static_cast<double>(b[i]) - lse_b;
      const double p = std::exp(lp);
      if (p > 0) kl += p * (lp - lq);
      if (std::isnan(lp) || std::isnan(lq)) kl = std::numeric_limits<double>::quiet_NaN();
    }
    if (!std::isnan(kl)) kl = std::max(kl, 0.0);
    kl_sum += kl;
    c.max_kl = std::isnan(kl) || std::isnan(c.max_kl) ? std::numeric_limits<double>::quiet_NaN()
                                                      : std::max(c.max_kl, kl);
  }
  if (any_nan) c.max_abs = std::numeric_limits<double>::quiet_NaN();
  if (ref2 > 0) {
    c.rel_l2 = std::sqrt(diff2 / ref2);
  } else {
    c.rel_l2 = diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (std::isnan(diff2)) c.rel_l2 = std::numeric_limits<double>::quiet_NaN();
  c.top1_agreement = static_cast<double>(agree) / static_cast<double>(rows);
  c.mean_kl = kl_sum / static_cast<double>(rows);
  return c;
}

}  // namespace rinfer
