// An LLM engine built from a recipe: the text-generation sample plus the recipe's strategies
// (composed by strategies/registry.h apply_strategies into the load and generator options:
// KV cache, kernels, threads, fusion, quantization, CUDA graphs, allocator), its device, its
// context length and its sampling settings. Owns everything a
// conversation needs, created once: the thread pool, the KV cache, the generator.
#pragma once

#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/kv_cache.h"
#include "models/text_generation.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"

namespace rinfer {

class LlmEngine {
 public:
  // Validates the strategies for the device, checks that the device exists (a CUDA device this
  // build or machine lacks is an error naming the recipe's `device` key), resolves and loads the
  // model on it (load_decoder_model picks the CUDA model for cuda:N), allocates the KV cache for
  // the context length. A recipe without sampling.seed gets a random seed (see seed()).
  static Result<std::unique_ptr<LlmEngine>> create(const RecipeConfig& recipe);

  const RecipeConfig& recipe() const { return recipe_; }
  const std::string& model_path() const { return model_path_; }
  TextGenerationSample& sample() { return *sample_; }
  DecoderModel& decoder() { return sample_->decoder(); }
  KvCache& kv_cache() { return cache_; }
  Generator& generator() { return *generator_; }
  ThreadPool& pool() { return *pool_; }
  uint64_t seed() const { return seed_; }

  // A few lines: model, template, device, strategies, KV cache size, sampling.
  std::string describe() const;

 private:
  LlmEngine() = default;
  RecipeConfig recipe_;
  std::string model_path_;
  uint64_t seed_ = 0;
  std::unique_ptr<ThreadPool> pool_;  // created once, before the model that uses it
  std::unique_ptr<TextGenerationSample> sample_;
  KvCache cache_;
  std::unique_ptr<TokenTextStream> text_;
  std::unique_ptr<Generator> generator_;
};

}  // namespace rinfer
