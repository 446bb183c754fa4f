// The strategy modules' entry points (one per folder) and small helpers they share. Internal
// to src/strategies: everything else goes through registry.h.
#pragma once

#include <string_view>

#include "strategies/registry.h"
#include "strategies/strategy_config.h"
#include "strategies/yaml_fields.h"

namespace rinfer {

const StrategyInfo& kv_cache_strategy();
const StrategyInfo& kernels_strategy();
const StrategyInfo& threads_strategy();
const StrategyInfo& fusion_strategy();
const StrategyInfo& quantization_strategy();
const StrategyInfo& cuda_graphs_strategy();
const StrategyInfo& device_sampling_strategy();
const StrategyInfo& allocator_strategy();
const StrategyInfo& batching_strategy();
const StrategyInfo& dynamic_batching_strategy();

// Records where `key` of `m` was written, when it is present.
inline void note_origin(const YamlMap& m, std::string_view key, StrategyConfig& s) {
  if (m.has(key)) s.origins.set(m.key_path(key), m.location(key));
}

inline const char* on_off(bool b) { return b ? "on" : "off"; }

// A CUDA decode switch (`enabled`, a bool on by default: cuda_graphs, device_sampling). Its
// value is `enabled` when the mapping has it.
Status parse_enabled(const YamlMap& m, StrategyConfig& s, bool& enabled);
// Only an explicit `enabled: true` (origin recorded for `key`) conflicts: on the CPU
// (`cpu_why`) or without the KV cache (`kv_why`), each an error naming both keys; the default
// quietly resolves to off there (cuda_decode_switch_on).
Status validate_cuda_decode_switch(const StrategyConfig& s, const Device& device, bool enabled,
                                   std::string_view key, std::string_view cpu_why,
                                   std::string_view kv_why);

}  // namespace rinfer
