// strategies.cuda_graphs: capture a decode step's kernel launches once and replay them as one
// CUDA graph. CUDA only; needs the KV cache (a step of one token has fixed shapes).
// Hook: LoadOptions::cuda.graphs.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr const char* kKey = "strategies.cuda_graphs.enabled";

Status parse(const YamlMap& m, StrategyConfig& s) { return parse_enabled(m, s, s.cuda_graphs); }

Status validate(const StrategyConfig& s, const Device& device) {
  return validate_cuda_decode_switch(
      s, device, s.cuda_graphs, kKey, "CUDA graphs replay GPU kernel launches",
      "a graph replays a decode step of one token, but without the cache every step recomputes a "
      "growing sequence");
}

bool effective(const StrategyConfig& s, const Device& device) {
  return cuda_decode_switch_on(s, device, s.cuda_graphs);
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
      "LoadOptions::cuda.graphs",
      "cuda",
      "docs/strategies/cuda_graphs.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
