// Picks the next token from a row of logits.
//
// The chain, in order (each stage optional, as in HF transformers):
//   1. penalties over the last repeat_last_n tokens of the history (prompt and reply):
//      repetition (CTRL-style: a seen token's logit is divided by the penalty when positive,
//      multiplied when negative) and presence (a seen token's logit minus the penalty)
//   2. temperature 0: greedy, the argmax (lowest id on ties); nothing below runs
//   3. softmax(logits / temperature)
//   4. top-k: keep the k most probable tokens
//   5. top-p: keep the smallest most-probable prefix whose mass reaches top_p
//   6. min-p: keep tokens with p >= min_p * p_max
//   7. draw from what is left (renormalized) with a seeded RNG: same seed, same draws, on every
//      platform (mt19937_64 and our own conversion to [0, 1), no std distributions)
//
// Numbers: a -inf logit is a masked token (never drawn) and is fine as long as one logit is
// finite; NaN or +inf anywhere in the row (a model whose numbers broke) is an error, found in the
// same pass that finds the maximum. The penalties keep a finite logit finite (clamped to
// +-FLT_MAX), and the softmax maps the maximum to 1 with a temperature of at least
// kMinTemperature, so no stage makes a NaN or an empty candidate set of a finite row.
//
// Nothing is allocated per call: the candidate buffer and the seen-token marks are sized to
// the vocabulary once.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

struct SamplingParams {
  // The ranges validate() accepts (docs/recipes.md lists the same).
  static constexpr float kMinTemperature = 1e-4f;  // below: 0 (greedy) or an error
  static constexpr float kMaxTemperature = 100.0f;
  static constexpr float kMaxRepeatPenalty = 10.0f;
  static constexpr float kMaxPresencePenalty = 10.0f;

  float temperature = 0.7f;       // 0: greedy
  int32_t top_k = 40;             // 0: off
  float top_p = 0.95f;            // 1: off
  float min_p = 0.05f;            // 0: off
  float repeat_penalty = 1.1f;    // 1: off
  int32_t repeat_last_n = 64;     // window of the penalties; 0: off
  float presence_penalty = 0.0f;  // 0: off
  // Subtracted once per occurrence in the window (OpenAI's frequency_penalty); 0: off.
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;

  // Checks ranges: temperature 0 or in [kMinTemperature, kMaxTemperature], top_k >= 0, top_p in
  // (0, 1], min_p in [0, 1), repeat_penalty in (0, kMaxRepeatPenalty], repeat_last_n >= 0,
  // presence_penalty and frequency_penalty in [-kMaxPresencePenalty, kMaxPresencePenalty]; NaN
  // and inf are rejected everywhere. The error names the field and the value.
  Status validate() const;
  std::string to_string() const;
};

struct TokenProb {
  int32_t id;
  float p;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t n_vocab);

  const SamplingParams& params() const { return params_; }
  // Restarts the random sequence.
  void reseed(uint64_t seed);

  // Applies the chain to logits [n_vocab] (modified in place by the penalties) and returns the
  // chosen id, in [0, n_vocab) and never a token whose logit is -inf. `history` is every token
  // so far (the penalties look at its last repeat_last_n; ids outside the vocabulary are
  // ignored). Errors (the RNG is not advanced):
  //   kDataLoss         the row holds NaN or +inf, or no finite logit ("the logits hold NaN at
  //                     token 123"): the model's numbers are broken
  //   kInvalidArgument  settings that fail SamplingParams::validate(), a row that is not
  //                     n_vocab long, a uniform outside [0, 1)
  //   kInternal         no candidate left after the filters (cannot happen with a finite row)
  Result<int32_t> sample(std::span<float> logits, std::span<const int32_t> history);
  // The same chain with the draw's uniform [0, 1) number given (this sampler's RNG untouched):
  // what a sampler elsewhere that took u = next_uniform() computes.
  Result<int32_t> sample_with_uniform(std::span<float> logits, std::span<const int32_t> history,
                                      double u);

  // The candidates left after the last sample() (renormalized, most probable first when top-k or
  // top-p sorted them; empty after a greedy or a failed one): for tests and `--verbose` output.
  std::span<const TokenProb> candidates() const { return {cand_.data(), n_cand_}; }

  // The next uniform [0, 1) number of the draw's RNG: a sampler elsewhere (the device, see
  // DecoderModel::decode_on_device) draws from the same sequence as this one would.
  double next_uniform() { return uniform(); }
  // The RNG's state: saved and restored to take back a draw made for a step that was dropped.
  const std::mt19937_64& rng() const { return rng_; }
  void set_rng(const std::mt19937_64& rng) { rng_ = rng; }

  // The stages on their own (public for the unit tests).
  void apply_penalties(std::span<float> logits, std::span<const int32_t> history);
  static int32_t argmax(std::span<const float> logits);
  // One pass over the row: the argmax (lowest id on ties) and its logit, or kDataLoss naming the
  // first NaN or +inf, or saying that no logit is finite.
  static Status find_max(std::span<const float> logits, int32_t* best, float* max_logit);

 private:
  // The tokens with p = exp((l - max_logit) / T) > 0, normalized.
  void softmax_candidates(std::span<const float> logits, float max_logit);
  void top_k(int32_t k);
  void top_p(float p);
  void min_p(float p);
  Result<int32_t> sample_impl(std::span<float> logits, std::span<const int32_t> history,
                              const double* u);
  int32_t draw(double unit);
  double uniform();  // [0, 1)

  SamplingParams params_;
  Status params_status_;  // params_.validate(): sample() returns it when not OK
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<TokenProb> cand_;  // [n_vocab]; the live candidates are the first n_cand_
  size_t n_cand_ = 0;
  bool sorted_ = false;          // cand_[0, n_cand_) sorted by p, descending
  std::vector<uint8_t> seen_;    // [n_vocab] marks for the penalties, all 0 between calls
  std::vector<int32_t> counts_;  // [n_vocab] occurrences (frequency_penalty), 0 between calls
};

}  // namespace rinfer
