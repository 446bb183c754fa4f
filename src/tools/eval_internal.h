// What `rinfer eval` (eval.cpp) and its per-layer sweep (eval_layers.cpp) share: the arguments,
// a recipe loaded for scoring, the text both sides score, and the totals over its windows.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/logit_metrics.h"
#include "engine/precision.h"
#include "recipe/recipe.h"

namespace rinfer::eval_tool {

struct EvalArgs {
  std::string recipe;
  std::string reference;
  std::string text_file;
  int64_t tokens = 512;
  int64_t window = 256;
  std::string json;
  bool per_layer = false;  // --per-layer: the sensitivity sweep (eval_layers.cpp)
  int64_t max_keep = 8;    // --max-keep: layers the sweep may keep at most
};

struct Loaded {
  RecipeConfig recipe;
  std::unique_ptr<LlmEngine> engine;
  EngineCore* core = nullptr;
};

// A recipe's model, loaded for scoring at `seats` (error messages name `label`).
Result<Loaded> load(RecipeConfig recipe, const std::string& label, int64_t seats);
Result<Loaded> load(const std::string& path, int64_t seats);

// The text both score, tokenized by the reference (and checked against the variant's
// tokenizer), and the windows it is scored in.
struct Text {
  std::vector<int32_t> tokens;
  std::string source;
  int64_t window = 0;
  int64_t n_windows = 0;
};
Result<Text> text_of(const EvalArgs& a, const Loaded& ref, const Loaded& var);

// The report over every window: rows weighted alike; perplexities from the summed NLL.
struct Totals {
  int64_t rows = 0, nll_rows = 0;
  double top1 = 0, kl = 0, max_kl = 0, nll_ref = 0, nll_var = 0;

  void add(const LogitComparison& c, double ppl_ref, double ppl_var, int64_t n);
  PrecisionReport report(const PrecisionThresholds& gate) const;
};

nlohmann::ordered_json num_json(double v);

int run_eval_layers(const EvalArgs& a);

}  // namespace rinfer::eval_tool
