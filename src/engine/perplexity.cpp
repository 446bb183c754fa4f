#include "engine/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace rinfer {

namespace {

// A scored row whose logits cannot give a finite log-likelihood.
Status non_finite(int64_t window, int64_t pos, int64_t token, float value) {
  return data_loss(
      "perplexity: the model produced non-finite logits (window {}, position {}: logit {} of "
      "token {}): the weights may be corrupt (NaN or inf in the model file)",
      window, pos, std::isnan(value) ? "NaN" : fmt::format("{}", value), token);
}

}  // namespace

Result<PerplexityResult> compute_perplexity(EngineCore& core, std::span<const int32_t> tokens,
                                            const PerplexityOptions& opts,
                                            const PerplexityProgress& progress) {
  const int64_t n_ctx = opts.n_ctx;
  if (n_ctx < 16) return invalid_argument("perplexity: window of {} tokens is < 16", n_ctx);
  if (n_ctx > core.options().n_ctx) {
    return invalid_argument("perplexity: window of {} tokens exceeds the context ({})", n_ctx,
                            core.options().n_ctx);
  }
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  int64_t n_windows = n_tokens / n_ctx;
  if (n_windows == 0) {
    return invalid_argument("perplexity: the text is {} tokens, shorter than one window of {}",
                            n_tokens, n_ctx);
  }
  if (opts.max_windows > 0) n_windows = std::min(n_windows, opts.max_windows);

  const int64_t n_vocab = core.model().hparams().n_vocab;
  const int64_t first = n_ctx / 2;                          // first scored logit row
  std::vector<int32_t> window(static_cast<size_t>(n_ctx));  // [n_ctx]

  const auto t0 = std::chrono::steady_clock::now();
  double sum = 0, sum_sq = 0;
  int64_t count = 0;
  for (int64_t w = 0; w < n_windows; ++w) {
    std::copy_n(tokens.begin() + w * n_ctx, n_ctx, window.begin());
    if (opts.bos >= 0) window[0] = opts.bos;
    // Rows [first, n_ctx - 1) each predict the next token; the last row predicts nothing.
    auto on_rows = [&](int64_t row0, std::span<const float> logits) -> Status {
      const auto n_rows = static_cast<int64_t>(logits.size()) / n_vocab;
      for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t pos = row0 + r;
        if (pos + 1 >= n_ctx) break;
        const float* l = logits.data() + r * n_vocab;  // [n_vocab]
        const int32_t next = window[static_cast<size_t>(pos + 1)];
        float max_l = -INFINITY;
        for (int64_t i = 0; i < n_vocab; ++i) {
          if (!(l[i] < INFINITY)) return non_finite(w, pos, i, l[i]);  // NaN or +inf
          max_l = std::max(max_l, l[i]);
        }
        if (!std::isfinite(l[next])) return non_finite(w, pos, next, l[next]);  // p(next) = 0
        // In double: the differences of finite floats do not overflow.
        const auto m = static_cast<double>(max_l);
        double z = 0;
        for (int64_t i = 0; i < n_vocab; ++i) z += std::exp(static_cast<double>(l[i]) - m);
        const double nll = std::log(z) - (static_cast<double>(l[next]) - m);
        sum += nll;
        sum_sq += nll * nll;
        ++count;
      }
      return ok_status();
    };
    RINFER_RETURN_IF_ERROR(core.score(window, first, opts.chunk, on_rows));
    const double so_far = std::exp(sum / static_cast<double>(count));
    if (!std::isfinite(so_far)) {  // exp() of a huge mean
      return data_loss("perplexity: the result is not finite (mean negative log-likelihood {})",
                       sum / static_cast<double>(count));
    }
    if (progress) progress(w + 1, n_windows, so_far);
  }
  PerplexityResult r;
  r.windows = n_windows;
  r.scored_tokens = count;
  r.mean_nll = sum / static_cast<double>(count);
  r.ppl = std::exp(r.mean_nll);
  const double var = std::max(0.0, sum_sq / static_cast<double>(count) - r.mean_nll * r.mean_nll);
  r.ppl_stderr = r.ppl * std::sqrt(var / static_cast<double>(count));
  if (!std::isfinite(r.ppl) || !std::isfinite(r.ppl_stderr)) {  // exp() of a huge mean
    return data_loss("perplexity: the result is not finite (mean negative log-likelihood {})",
                     r.mean_nll);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace rinfer
