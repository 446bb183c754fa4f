// Precision of an optimized variant against the baseline, on one token sequence, teacher-forced:
// both models read the same tokens and give the logits of every position; then
//
//   top-1 agreement  fraction of positions whose argmax matches the baseline's
//   mean KL          mean over positions of KL(p_baseline || p_variant), nats
//   ppl change       ppl_variant / ppl_baseline - 1, where ppl = exp(mean -log p(next token))
//                    over positions 0..n-2 (relative: +0.01 is 1% worse)
//
// The gate (the defaults below, each replaced by the recipe's `precision:` setting of that bound
// where it has one) passes when top-1 >=
// min_top1, mean KL <= max_mean_kl and ppl change <= max_ppl_change (one-sided: a perplexity
// drop passes). `rinfer bench` marks a
// failing variant and never picks it as the best (the rollback rule).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/logit_metrics.h"
#include "rinfer/status.h"

namespace rinfer {

// The thresholds checked (nullopt: not checked). One rule makes a variant's gate: every bound
// starts at its default below, and each bound its recipe's `precision:` section sets replaces
// that bound alone (gate_of_recipe); the others keep their defaults.
struct PrecisionThresholds {
  std::optional<double> min_top1 = 0.95;
  std::optional<double> max_mean_kl = 0.05;
  std::optional<double> max_ppl_change = 0.02;  // ppl_variant / ppl_baseline - 1 (a rise)
  // "top-1 >= 0.95, mean KL <= 0.05, ppl change <= +2%"
  std::string to_string() const;
};

struct PrecisionGate;  // recipe/recipe.h
// The gate of a recipe's `precision:` section by the rule above.
PrecisionThresholds gate_of_recipe(const PrecisionGate& recipe_gate);

struct PrecisionReport {
  int64_t positions = 0;
  LogitComparison logits;  // top1_agreement, mean_kl, max_kl, rel_l2, max_abs
  double ppl_baseline = 0;
  double ppl_variant = 0;
  double ppl_change = 0;  // ppl_variant / ppl_baseline - 1
  bool passed = true;
  std::string failures;  // "top-1 0.912 < 0.95; ..." ("" when passed)
};

// Teacher-forced logits of every position of `tokens`: [n, n_vocab] row-major, through the
// engine core (EngineCore::score: a sequence of its own, at most `chunk` tokens a pass, 0: the
// core's step budget). Errors: an empty sequence, more tokens than the context, a model failure.
Result<std::vector<float>> teacher_forced_logits(EngineCore& core, std::span<const int32_t> tokens,
                                                 int64_t chunk = 0);

// exp(mean over i in [0, n-1) of -log softmax(logits[i])[tokens[i + 1]]), in double.
double perplexity_of_logits(std::span<const float> logits, std::span<const int32_t> tokens,
                            int64_t n_vocab);

// Compares a variant's logits with the baseline's (both from teacher_forced_logits on `tokens`)
// and applies the gate.
PrecisionReport compare_precision(std::span<const float> baseline, std::span<const float> variant,
                                  std::span<const int32_t> tokens, int64_t n_vocab,
                                  const PrecisionThresholds& gate);

// Applies the gate to a report's numbers (sets passed and failures).
void apply_gate(PrecisionReport& r, const PrecisionThresholds& gate);

// Logits of positions [prefill - 1, n) of `tokens` as the core's decode steps compute them, for
// the gate of the decode path (the one-row kernels, the small-batch matvecs, the decode graphs
// and their kernel switches, which teacher_forced_logits never runs): `seats` requests of the
// same tokens (prompt tokens[0, prefill), the rest forced one step at a time; greedy, EOS
// ignored, each with a cache salt of its own) submitted together, so that their decode steps
// are batches of `seats` rows. The logits are read on the host, so sampling stays off the
// device. [seats][n - prefill + 1][n_vocab]. Steps the core until they end: nothing else may
// step it meanwhile. Errors: prefill outside [1, n), n not below the context, more seats than
// the scheduler's max_seqs, a request's error.
Result<std::vector<float>> decode_forced_logits(EngineCore& core, std::span<const int32_t> tokens,
                                                int64_t prefill, int64_t seats);

// The gate on the decode path: decode_forced_logits at each count of `seats` (those above the
// core's max_seqs skipped) over the last `steps` positions of `tokens` (cut to the context less
// one; at least one position stays the prompt), every seat's rows compared with the reference's
// teacher-forced rows of the same positions (`reference`: [n, n_vocab] of `tokens`); the report
// of the worst seat (lowest top-1, highest KL, largest ppl change; failed when any seat fails,
// its failures prefixed with "decode at S seats: ").
// The seat counts the gates use: one (the one-row step) and three (a batch, padded to a bucket).
inline constexpr int64_t kDecodeGateSteps = 64;
inline constexpr int64_t kDecodeGateSeats[] = {1, 3};
Result<PrecisionReport> decode_precision(EngineCore& variant, std::span<const float> reference,
                                         std::span<const int32_t> tokens, int64_t steps,
                                         std::span<const int64_t> seats,
                                         const PrecisionThresholds& gate);

// The worse of two reports of one variant (the teacher-forced and the decode-path one): lowest
// top-1, highest KL and ppl change, failed when either failed (both failure lists kept).
PrecisionReport worse_of(const PrecisionReport& a, const PrecisionReport& b);

}  // namespace rinfer
