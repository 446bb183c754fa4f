// An LLM engine built from a recipe: the text-generation sample plus the recipe's strategies
// (turned into the load and engine core options by engine/strategy_options.h: KV cache, kernels,
// threads, fusion, quantization, CUDA graphs, allocator, batching), its device, its context
// length and its sampling settings. Owns everything a conversation needs, created once: the
// thread pool and the engine core (engine/engine_core.h) with its KV arena, on every device:
// `rinfer run` and `rinfer bench` are its clients one request at a time (on CUDA the decode
// steps of a request alone are queued ahead of the host), `rinfer serve` with many seats;
// kv_cache off recomputes every sequence each step.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "engine/grammar.h"
#include "models/text_generation.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"

namespace rinfer {

struct LlmEngineOptions {
  // Requests the engine core serves at once (its KV pool holds this many full contexts); 0:
  // the recipe's batching.max_seqs.
  int64_t seats = 1;
  // The model alone: no engine core (callers that build their own cores:
  // rinfer bench-serve; or score through scoring_core(): perplexity). generate() is then an
  // error.
  bool model_only = false;
};

class LlmEngine {
 public:
  // Validates the strategies for the device, checks that the device exists (a CUDA device this
  // build or machine lacks is an error naming the recipe's `device` key), resolves and loads the
  // model on it (load_decoder_model picks the CUDA model for cuda:N), allocates the KV cache for
  // the context length. A recipe without sampling.seed gets a random seed (see seed()).
  static Result<std::unique_ptr<LlmEngine>> create(const RecipeConfig& recipe,
                                                   const LlmEngineOptions& options = {});

  const RecipeConfig& recipe() const { return recipe_; }
  const std::string& model_path() const { return model_path_; }
  TextGenerationSample& sample() { return *sample_; }
  DecoderModel& decoder() { return sample_->decoder(); }
  // The engine core (null with model_only).
  EngineCore* core() { return core_.get(); }
  // The engine core for teacher-forced scoring (perplexity, the precision gates): core(), or,
  // with model_only, a core of `seats` seats made on first use (the precision gates' decode
  // steps run several; past one seat its KV pool starts at one seat's worth and grows,
  // kv_cache.prealloc auto, unless the recipe sizes it).
  Result<EngineCore*> scoring_core(int64_t seats = 1);
  int64_t context_length() const { return recipe_.context_length; }

  // One reply to `prompt` with the recipe's sampling, max_tokens and stop strings, streamed to
  // on_piece, through the engine core. `cancel` (may be null) is checked
  // between steps; interrupt() stops a forward pass in flight. Each call draws from its own
  // random sequence (the seed plus the call's number).
  // `constraint` (may be null): the grammar the reply follows (grammars()).
  Result<GenerationResult> generate(std::span<const int32_t> prompt, const PieceCallback& on_piece,
                                    const std::atomic<bool>* cancel = nullptr,
                                    std::shared_ptr<const TokenConstraint> constraint = nullptr);
  // Structured output: the grammar compiler over this model's vocabulary, made on first use
  // (indexing a vocabulary takes a moment). An error for a model without a tokenizer.
  Result<GrammarCompiler*> grammars();
  // Safe in a signal handler.
  void interrupt() {
    if (core_) core_->interrupt();
  }
  // Forgets the conversation (the core's prefix cache).
  void reset();
  ThreadPool& pool() { return *pool_; }
  uint64_t seed() const { return seed_; }

  // A few lines: model, template, device, strategies, KV cache size, sampling.
  std::string describe() const;

 private:
  LlmEngine() = default;
  std::string tokenizer_text() const;
  RecipeConfig recipe_;
  std::string model_path_;
  uint64_t seed_ = 0;
  std::unique_ptr<ThreadPool> pool_;  // created once, before the model that uses it
  std::unique_ptr<TextGenerationSample> sample_;
  std::unique_ptr<EngineCore> core_;
  std::unique_ptr<GrammarCompiler> grammars_;
  std::mutex grammars_mu_;
  std::string memory_hint_;  // the engine core's, naming the recipe's keys
  SamplingParams sampling_;  // the recipe's, with the seed drawn (seed())
  uint64_t calls_ = 0;
};

}  // namespace rinfer
