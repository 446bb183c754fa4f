// Teacher-forced perplexity over a token stream, as llama.cpp's perplexity tool computes it:
// the text is cut into windows of n_ctx tokens; each window is evaluated from an empty sequence
// through the engine core (EngineCore::score) and only its second half is scored (each of positions
// [n_ctx/2, n_ctx-1) predicts the next token), so every scored token sees at least n_ctx/2 tokens
// of context.
//   ppl = exp(mean over scored tokens of -log p(token | prefix))
// With `bos` >= 0 the first token of each window is replaced by BOS (models that expect one).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "engine/engine_core.h"
#include "rinfer/status.h"

namespace rinfer {

struct PerplexityOptions {
  int64_t n_ctx = 512;      // window length (<= the core's context)
  int64_t max_windows = 0;  // 0: every whole window of the text
  int32_t bos = -1;         // >= 0: replaces the first token of each window
  int64_t chunk = 0;        // tokens per forward pass (0: the core's step budget)
};

struct PerplexityResult {
  double ppl = 0;
  double ppl_stderr = 0;  // ppl * standard error of the mean negative log-likelihood
  double mean_nll = 0;
  int64_t windows = 0;
  int64_t scored_tokens = 0;
  double seconds = 0;
};

// Called after each window: (windows done, windows total, perplexity so far).
using PerplexityProgress = std::function<void(int64_t done, int64_t total, double ppl)>;

// Errors: fewer tokens than one window, a window longer than the context, a model failure, and
// (kDataLoss) a scored row whose logits hold NaN or +inf or give the next token logit -inf, or a
// result that is not finite: perplexity never reports NaN or inf.
Result<PerplexityResult> compute_perplexity(EngineCore& core, std::span<const int32_t> tokens,
                                            const PerplexityOptions& opts,
                                            const PerplexityProgress& progress = nullptr);

}  // namespace rinfer
