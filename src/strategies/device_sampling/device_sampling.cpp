// strategies.device_sampling: decode with each token sampled on the device and the next step
// queued before the host reads it (no logits copy, no host round trip between steps). CUDA only;
// needs the KV cache (steps of one token). Hook: LoadOptions::device_sampling.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr const char* kKey = "strategies.device_sampling.enabled";

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"enabled"}));
  RINFER_ASSIGN_OR_RETURN(auto enabled, m.get_bool("enabled"));
  if (enabled) s.device_sampling = *enabled;
  note_origin(m, "enabled", s);
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  if (!(s.device_sampling && s.origins.has(kKey))) return ok_status();
  if (device.is_cpu()) {
    return key_conflict(s.origins, kKey, "device",
                        "true needs a CUDA device, but the device is cpu (the CPU samples on the "
                        "host, where its logits already are)");
  }
  if (!s.kv_cache) {
    return key_conflict(s.origins, kKey, "strategies.kv_cache.enabled",
                        "true needs the KV cache: a device decode step feeds one token, but "
                        "without the cache every step recomputes a growing sequence");
  }
  return ok_status();
}

bool effective(const StrategyConfig& s, const Device& device) {
  return device.is_cuda() && s.kv_cache && s.device_sampling;
}

void apply(const StrategyConfig& s, const Device& device, LoadOptions& load, GeneratorOptions&) {
  load.device_sampling = effective(s, device);
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
      "LoadOptions::device_sampling",
      "cuda",
      "docs/strategies/device_sampling.md",
      parse,
      validate,
      apply,
      describe};
  return info;
}

}  // namespace rinfer
