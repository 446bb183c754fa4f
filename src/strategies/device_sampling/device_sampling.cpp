// strategies.device_sampling: decode with each token sampled on the device and the next step
// queued before the host reads it (no logits copy, no host round trip between steps). CUDA only;
// needs the KV cache (steps of one token). Hook: LoadOptions::cuda.device_sampling.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr const char* kKey = "strategies.device_sampling.enabled";

Status parse(const YamlMap& m, StrategyConfig& s) { return parse_enabled(m, s, s.device_sampling); }

Status validate(const StrategyConfig& s, const Device& device) {
  return validate_cuda_decode_switch(
      s, device, s.device_sampling, kKey,
      "the CPU samples on the host, where its logits already are",
      "a device decode step feeds one token, but without the cache every step recomputes a "
      "growing sequence");
}

bool effective(const StrategyConfig& s, const Device& device) {
  return cuda_decode_switch_on(s, device, s.device_sampling);
}

std::string describe(const StrategyConfig& s, const Device& device) {
  if (!device.is_cuda()) return "";
  return fmt::format("device_sampling {}", on_off(effective(s, device)));
}

}  // namespace

const StrategyInfo& device_sampling_strategy() {
  static const StrategyInfo info{
      "device_sampling",
      "sample each decode token on the device and queue the next step before the host reads it",
      {{"enabled", "bool", "true (on cuda with the KV cache)",
        "false: copy the logits to the host every step and sample there"}},
      "{enabled: false}",
      "LoadOptions::cuda.device_sampling",
      "cuda",
      "docs/strategies/device_sampling.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
