// What rinfer tune searches (tools/tune.cpp): the knobs of the strategy registry that act on a
// recipe's device and scenario, each with the values of the domain its key declares (bool: both;
// "a|b|c": each; "int in [lo, hi]": a few points of it), and the recipes it makes: a trial is a
// base recipe file plus one value per knob it changes, written as YAML over `base:`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"

namespace rinfer {

struct TuneKnob {
  std::string path;                 // "kernels.cuda.matvec_split" (under strategies:)
  std::vector<std::string> values;  // YAML scalars: "true", "q8_0", "16"
};

// The values a key's declared type spans: bool -> true, false; "a | b" -> a, b; "int in [lo,
// hi]" -> lo, the powers of two inside, hi (at most max_int_points, spread over the range, and
// none above `int_cap` when it is > 0). Types tune cannot span (lists, real numbers) -> none.
std::vector<std::string> domain_values(const std::string& type, int64_t int_cap = 0,
                                       size_t max_int_points = 6);

// Every knob for `device` and `scenario` ("llm-chat", "llm-serve"): the strategies acting on the
// device (StrategyInfo::devices), without the image classifiers' keys and dynamic_batching;
// batching only for llm-serve (its policy, seats up to `seats_cap`, token budget up to 16384,
// chunked prefill and preemption); CUDA kernel switches only on CUDA; thread counts up to
// `cores` on the CPU.
std::vector<TuneKnob> tune_space(const Device& device, const std::string& scenario, int64_t cores,
                                 int64_t seats_cap = 0);

// knob path -> value.
using TuneSettings = std::map<std::string, std::string>;

// A recipe over `base` (a path, written as given) with `settings` under strategies:, nested by
// the paths' dots; `header` (comment lines without '#') first.
std::string tune_recipe_yaml(const std::string& base, const TuneSettings& settings,
                             const std::vector<std::string>& header = {});

// "threads.count=1, fusion.qkv=false" ("" for none).
std::string describe_settings(const TuneSettings& settings);

// What a recipe runs as, field by field: two recipes with the same fingerprint run the same
// kernels with the same settings (a knob that does nothing on the device changes nothing here).
std::string recipe_fingerprint(const RecipeConfig& r);

// 64-bit FNV-1a of `s` as 16 hex digits (the trial cache's keys: stable across builds).
std::string fnv1a_hex(const std::string& s);

}  // namespace rinfer
