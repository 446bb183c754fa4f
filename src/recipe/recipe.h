// Recipes: the YAML files under recipes/<scenario>/<model>/ that say which model to run, on
// which device, with which optimization strategies, and how to sample.
//
//   model: smollm2-135m-instruct-q4_1   # a cache name, or a path (./ and ../ are relative to
//                                       # the recipe's folder)
//   device: cpu                         # cpu | cuda:N (CUDA: not built yet)
//   scenario: llm-chat
//   context_length: 2048                # 0: the model's training context
//   strategies:
//     kv_cache: {enabled: true}
//     kernels: {impl: fast}             # reference | fast
//     threads: {count: 0}               # 0: all cores
//   sampling: {temperature: 0.2, top_k: 40, top_p: 0.9, min_p: 0.05, repeat_penalty: 1.1,
//              repeat_last_n: 64, presence_penalty: 0, seed: 42, max_tokens: 256, stop: []}
//   chat_template: chatml               # optional: override the model's template
//
// Parsing is strict: an unknown key, a wrong type (a quoted "0.5" is a string, not a number),
// an out-of-range value, a duplicate key or a YAML syntax error is a Status naming the file,
// the line, the key path (`sampling.top_p`) and what was expected. yaml-cpp's exceptions are
// caught here and never escape.
//
// The schema grows with the strategies: each strategy is a mapping under `strategies`, parsed
// by its own small function in recipe.cpp against a key table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "engine/sampler.h"
#include "ops/cpu/ops.h"
#include "rinfer/status.h"

namespace rinfer {

struct StrategyConfig {
  bool kv_cache = true;                  // strategies.kv_cache.enabled
  cpu::Impl kernels = cpu::Impl::kFast;  // strategies.kernels.impl
  int threads = 0;                       // strategies.threads.count (0: all cores)
};

struct RecipeConfig {
  std::string path;       // the recipe file as given
  std::string model;      // `model` as written
  std::string model_ref;  // what resolve_model() gets: a path made relative to the recipe's
                          // folder for ./ and ../, else the value as written (cache name/path)
  Device device;
  std::string scenario;           // "llm-chat"
  int64_t context_length = 2048;  // 0: the model's training context
  StrategyConfig strategies;
  SamplingParams sampling;  // sampling.seed absent: seed_set is false (a random seed)
  bool seed_set = false;
  int64_t max_tokens = 256;       // sampling.max_tokens (0: until end of generation / context)
  std::vector<std::string> stop;  // sampling.stop
  std::optional<std::string> chat_template;

  // One line for logs: "kv_cache on, kernels fast, threads 2, context 2048".
  std::string strategies_summary() const;
};

// Reads and validates a recipe file.
Result<RecipeConfig> load_recipe(const std::string& path);

// Parses recipe text; `path` names it in messages and anchors ./ and ../ model paths.
Result<RecipeConfig> parse_recipe(const std::string& text, const std::string& path);

}  // namespace rinfer
