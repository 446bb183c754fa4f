// The strategy registry (layer 2): every optimization a recipe can switch, with its config
// schema, its baseline setting, the engine hooks it selects and its document. One module per
// strategy in src/strategies/<name>/ provides the StrategyInfo below; this file composes them.
//
//   parse_strategies     the `strategies:` mapping of one recipe file -> StrategyConfig
//                        (applied over what a base recipe already set)
//   validate_strategies  the combination for a device: each strategy's own rules, then the
//                        cross-strategy ones (errors name both keys and where they were set)
// and the engine (engine/strategy_options.h) turns the validated values into its options.
//
// The YAML side uses the generic strict reader in strategies/yaml_fields.h (not the recipe
// itself), so strategies stay below the recipe layer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "rinfer/status.h"
#include "strategies/strategy_config.h"
#include "strategies/yaml_fields.h"

namespace rinfer {

struct StrategyKey {
  std::string_view name;      // "enabled"
  std::string_view type;      // "bool", "int in [0, 1024]", "keep|f32|f16|..."
  std::string_view fallback;  // the default, as YAML
  std::string_view meaning;   // one line
};

struct StrategyInfo {
  std::string_view name;     // the key under `strategies:`
  std::string_view summary;  // one line: what it does
  std::vector<StrategyKey> keys;
  std::string_view baseline;  // the setting that turns it off, as YAML
  std::string_view hooks;     // the engine options it sets
  std::string_view devices;   // where it applies: "cpu", "cuda", "cpu, cuda"
  std::string_view doc;       // docs/strategies/<name>.md

  // Reads `strategies.<name>` (a mapping; keys checked) into `s`, recording each key's origin.
  Status (*parse)(const YamlMap& m, StrategyConfig& s);
  // This strategy's own rules for `device` (the cross-strategy ones are in the registry).
  Status (*validate)(const StrategyConfig& s, const Device& device);
  // "kv_cache on"; empty when the strategy does nothing on `device`.
  std::string (*describe)(const StrategyConfig& s, const Device& device);
};

// Every strategy, in the order recipes list them.
const std::vector<StrategyInfo>& strategy_registry();
// nullptr when there is none by that name.
const StrategyInfo* find_strategy(std::string_view name);

Status parse_strategies(const YamlMap& m, StrategyConfig& s);

// `device` is the recipe's; its origin is s.origins.where("device").
Status validate_strategies(const StrategyConfig& s, const Device& device);

// The engine turns a validated StrategyConfig into its options (engine/strategy_options.h:
// each StrategyInfo::hooks names what a strategy sets there).

// Whether a CUDA decode switch (cuda_graphs, device_sampling) is on: CUDA, the KV cache, and
// the switch.
inline bool cuda_decode_switch_on(const StrategyConfig& s, const Device& device, bool enabled) {
  return device.is_cuda() && s.kv_cache && enabled;
}

// strategies.kernels.cuda as a mapping of its own (the benchmarks' --kernels flag): applied
// over `k`; keys and domains as in a recipe.
Status parse_cuda_kernels(const YamlMap& m, cuda::KernelConfig& k);
// "{matvec_split: auto, matvec_stream: auto, ...}": every switch, as YAML.
std::string describe_cuda_kernels(const cuda::KernelConfig& k);

// One line: "kv_cache on, kernels fast, threads all cores, activations int8" (the strategies
// that act on `device`).
std::string describe_strategies(const StrategyConfig& s, const Device& device);

// At load: a CUDA device that this build or machine does not have is an error naming the
// recipe's `device` key ("r.yaml:3:9: device: cuda:1 is not available: ..."). CPU is always ok.
Status check_device_available(const Device& device, const KeyOrigins& origins);

// Helpers for the modules: an error at an explicit key ("file:l:c: key: message"), and a
// conflict between two keys that names both and where the other one was set.
Status key_error(const KeyOrigins& o, std::string_view key, const std::string& message);
Status key_conflict(const KeyOrigins& o, std::string_view key, std::string_view other,
                    const std::string& message);

}  // namespace rinfer
