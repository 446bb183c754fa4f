// Random-weight models of a real shape, for serving benchmarks where the real weights are not
// at hand: a recipe's `model: random:<shape>[:<dtype>]` (shapes of models/llama/shapes.h:
// llama3-8b, smollm2; dtype bf16 (default), f16, q8_0, q4_0, q4_1 or q4_k), made on the recipe's
// CUDA device. They have no tokenizer: their clients send token ids, and their replies' text
// is each token's id (IdTextStream).
#pragma once

#include <memory>
#include <string>

#include "models/model.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"

namespace rinfer {

bool is_random_model(const RecipeConfig& r);

// The model of `r.model` (random:...), with the recipe's strategies applied to its load.
Result<std::unique_ptr<DecoderModel>> make_random_model(const RecipeConfig& r);

// Detokenizer stand-in for a model without a tokenizer: "<id>" per token, never an end.
class IdTextStream : public TokenTextStream {
 public:
  bool is_end_of_generation(int32_t) const override { return false; }
  std::string push(int32_t token) override { return "<" + std::to_string(token) + ">"; }
  std::string finish() override { return {}; }
};

}  // namespace rinfer
