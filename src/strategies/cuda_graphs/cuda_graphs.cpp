// strategies.cuda_graphs: capture a decode step's kernel launches once and replay them as one
// CUDA graph. CUDA only; needs the KV cache (a step of one token has fixed shapes).
// Hook: LoadOptions::cuda_graphs.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr const char* kKey = "strategies.cuda_graphs.enabled";

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"enabled"}));
  RINFER_ASSIGN_OR_RETURN(auto enabled, m.get_bool("enabled"));
  if (enabled) s.cuda_graphs = *enabled;
  note_origin(m, "enabled", s);
  return ok_status();
}

// Graphs are on by default on CUDA, but only an explicit `enabled: true` conflicts: the
// default quietly resolves to off where graphs cannot run.
bool explicit_on(const StrategyConfig& s) { return s.cuda_graphs && s.origins.has(kKey); }

Status validate(const StrategyConfig& s, const Device& device) {
  if (device.is_cpu() && explicit_on(s)) {
    return key_conflict(s.origins, kKey, "device",
                        "true needs a CUDA device, but the device is cpu (CUDA graphs replay GPU "
                        "kernel launches)");
  }
  if (device.is_cuda() && explicit_on(s) && !s.kv_cache) {
    return key_conflict(s.origins, kKey, "strategies.kv_cache.enabled",
                        "true needs the KV cache: a graph replays a decode step of one token, "
                        "but without the cache every step recomputes a growing sequence");
  }
  return ok_status();
}

bool effective(const StrategyConfig& s, const Device& device) {
  return device.is_cuda() && s.kv_cache && s.cuda_graphs;
}

void apply(const StrategyConfig& s, const Device& device, LoadOptions& load, GeneratorOptions&) {
  load.cuda_graphs = effective(s, device);
}

std::string describe(const StrategyConfig& s, const Device& device) {
  if (!device.is_cuda()) return "";
  return fmt::format("cuda_graphs {}", on_off(effective(s, device)));
}

}  // namespace

const StrategyInfo& cuda_graphs_strategy() {
  static const StrategyInfo info{
      "cuda_graphs",
      "replay each decode step's kernel launches from one captured CUDA graph",
      {{"enabled", "bool", "true (on cuda with the KV cache)",
        "false: launch every kernel from the host each step"}},
      "{enabled: false}",
      "LoadOptions::cuda_graphs",
      "cuda",
      "docs/strategies/cuda_graphs.md",
      parse,
      validate,
      apply,
      describe};
  return info;
}

}  // namespace rinfer
