// The generation loop: prefill the prompt, then decode token by token, streaming text.
//
//   prefill   the prompt's tokens go through the model in chunks of `prefill_chunk` (matmuls
//             with n_tokens > 1, which the fast kernels tile); only the last row's logits are
//             computed. With the KV cache on, tokens already in the cache from an earlier call
//             (the shared prefix of a chat history) are not recomputed.
//   decode    sample a token, turn it into text (postprocess: streaming detokenizer, then the
//             stop-string filter), hand the text to the callback, feed the token back.
//             With the KV cache off (the baseline) every step recomputes the whole sequence.
//   stop      end-of-generation token, stop string, max_tokens, a full context, or the
//             cancellation flag (checked before each chunk, between tokens, and inside the
//             forward: DecoderBatch::cancel, which the CPU model reads between layers).
//
// Nothing is allocated per token: the logits row, the token history and the sampler's buffers
// are sized once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "engine/stop_strings.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "ops/cpu/sampler.h"
#include "rinfer/status.h"

namespace rinfer {

struct GeneratorOptions {
  bool kv_cache = true;           // false: recompute the whole prefix every step (baseline)
  int64_t prefill_chunk = 512;    // tokens per prefill forward pass
  int64_t max_tokens = 256;       // reply length limit (0: until EOS / stop / full context)
  std::vector<std::string> stop;  // stop strings
  SamplingParams sampling;
};

class Generator {
 public:
  // `model`, `cache` and `text` must outlive the generator. `text` may be null (no text, no
  // stop strings, no end-of-generation check: tests drive the loop with ids).
  Generator(DecoderModel& model, KvCache& cache, TokenTextStream* text, GeneratorOptions opts);

  // Generates a reply to `prompt` (the full token sequence, e.g. the whole rendered chat).
  // With the KV cache on, the longest prefix shared with tokens() is reused. `cancel` may be
  // null. Errors: an empty prompt, sampling settings that fail validate(), a prompt that leaves
  // no room in the context (kOutOfRange), a model failure, logits that are not finite (kDataLoss:
  // "the model produced non-finite logits at generation step N ..."). After an error the cache
  // and tokens() still agree. Cancellation is not an error: finish says kAborted.
  Result<GenerationResult> generate(std::span<const int32_t> prompt, const PieceCallback& on_piece,
                                    const std::atomic<bool>* cancel = nullptr);

  // The tokens whose keys and values the cache holds (the last prompt and the reply fed back).
  std::span<const int32_t> tokens() const { return tokens_; }
  // Forgets the cached history.
  void reset();

  const GeneratorOptions& options() const { return opts_; }
  GeneratorOptions& mutable_options() { return opts_; }
  Sampler& sampler() { return sampler_; }

 private:
  // Evaluates tokens_[from, end) on top of the cache (which holds tokens_[0, from)) and leaves
  // the last row's logits in logits_. Chunked; checks `cancel` before each chunk and hands it to
  // the model (DecoderBatch::cancel): *cancelled, OK status, with the cache and the chunks
  // already done kept.
  Status evaluate(int64_t from, const std::atomic<bool>* cancel, bool* cancelled);

  DecoderModel& model_;
  KvCache& cache_;
  TokenTextStream* text_;
  GeneratorOptions opts_;
  Sampler sampler_;
  std::vector<int32_t> tokens_;     // [<= n_ctx] history, capacity n_ctx
  std::vector<int32_t> positions_;  // [n_ctx] 0, 1, 2, ...
  std::vector<float> logits_;       // [n_vocab]
};

}  // namespace rinfer
