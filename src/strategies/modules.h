// The strategy modules' entry points (one per folder) and small helpers they share. Internal
// to src/strategies: everything else goes through registry.h.
#pragma once

#include <string_view>

#include "recipe/yaml_fields.h"
#include "strategies/registry.h"
#include "strategies/strategy_config.h"

namespace rinfer {

const StrategyInfo& kv_cache_strategy();
const StrategyInfo& kernels_strategy();
const StrategyInfo& threads_strategy();
const StrategyInfo& fusion_strategy();
const StrategyInfo& quantization_strategy();
const StrategyInfo& cuda_graphs_strategy();
const StrategyInfo& device_sampling_strategy();
const StrategyInfo& allocator_strategy();

// Records where `key` of `m` was written, when it is present.
inline void note_origin(const YamlMap& m, std::string_view key, StrategyConfig& s) {
  if (m.has(key)) s.origins.set(m.key_path(key), m.location(key));
}

inline const char* on_off(bool b) { return b ? "on" : "off"; }

}  // namespace rinfer
