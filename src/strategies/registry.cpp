#include "strategies/registry.h"

#include <fmt/format.h>

#include "core/cuda_info.h"
#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

std::string KeyOrigins::where(std::string_view key) const {
  auto it = where_.find(std::string(key));
  return it == where_.end() ? file : it->second;
}

Status parse_enabled(const YamlMap& m, StrategyConfig& s, bool& enabled) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"enabled"}));
  RINFER_ASSIGN_OR_RETURN(auto v, m.get_bool("enabled"));
  if (v) enabled = *v;
  note_origin(m, "enabled", s);
  return ok_status();
}

Status validate_cuda_decode_switch(const StrategyConfig& s, const Device& device, bool enabled,
                                   std::string_view key, std::string_view cpu_why,
                                   std::string_view kv_why) {
  if (!(enabled && s.origins.has(key))) return ok_status();
  if (device.is_cpu()) {
    return key_conflict(
        s.origins, key, "device",
        fmt::format("true needs a CUDA device, but the device is cpu ({})", cpu_why));
  }
  if (!s.kv_cache) {
    return key_conflict(s.origins, key, "strategies.kv_cache.enabled",
                        fmt::format("true needs the KV cache: {}", kv_why));
  }
  return ok_status();
}

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> all{
      kv_cache_strategy(),         kernels_strategy(),      threads_strategy(),
      fusion_strategy(),           quantization_strategy(), cuda_graphs_strategy(),
      device_sampling_strategy(),  allocator_strategy(),    batching_strategy(),
      dynamic_batching_strategy(),
  };
  return all;
}

const StrategyInfo* find_strategy(std::string_view name) {
  for (const StrategyInfo& s : strategy_registry()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Status key_error(const KeyOrigins& o, std::string_view key, const std::string& message) {
  return invalid_argument("{}: {}: {}", o.where(key), key, message);
}

Status key_conflict(const KeyOrigins& o, std::string_view key, std::string_view other,
                    const std::string& message) {
  const std::string other_where =
      o.has(other) ? "set at " + o.where(other) : std::string("the default");
  return invalid_argument("{}: {}: {} (conflicts with {}: {})", o.where(key), key, message, other,
                          other_where);
}

Status parse_strategies(const YamlMap& m, StrategyConfig& s) {
  std::vector<std::string_view> names;
  for (const StrategyInfo& info : strategy_registry()) names.push_back(info.name);
  RINFER_RETURN_IF_ERROR(m.check_keys(names));
  for (const StrategyInfo& info : strategy_registry()) {
    RINFER_ASSIGN_OR_RETURN(auto sub, m.get_map(info.name));
    if (sub) RINFER_RETURN_IF_ERROR(info.parse(*sub, s));
  }
  return ok_status();
}

Status validate_strategies(const StrategyConfig& s, const Device& device) {
  for (const StrategyInfo& info : strategy_registry()) {
    RINFER_RETURN_IF_ERROR(info.validate(s, device));
  }
  return ok_status();
}

std::string describe_strategies(const StrategyConfig& s, const Device& device) {
  std::string out;
  for (const StrategyInfo& info : strategy_registry()) {
    const std::string d = info.describe(s, device);
    if (d.empty()) continue;
    if (!out.empty()) out += ", ";
    out += d;
  }
  return out;
}

Status check_device_available(const Device& device, const KeyOrigins& origins) {
  if (!device.is_cuda()) return ok_status();
  const std::string what = fmt::format("{} is not available", device.to_string());
  if (!cuda_compiled()) {
    return key_error(origins, "device",
                     what +
                         ": this rinfer was built without CUDA (configure with "
                         "`cmake --preset cuda`), or use device: cpu");
  }
  auto devices = cuda_devices();
  if (!devices.ok()) {
    return key_error(
        origins, "device",
        fmt::format("{}: no usable CUDA device ({})", what, devices.status().message()));
  }
  if (device.index < 0 || static_cast<size_t>(device.index) >= devices->size()) {
    std::string list;
    for (const CudaDeviceInfo& d : *devices) {
      if (!list.empty()) list += ", ";
      list += fmt::format("cuda:{} {}", d.index, d.name);
    }
    return key_error(
        origins, "device",
        fmt::format("{}: this machine has {} CUDA device{} ({})", what, devices->size(),
                    devices->size() == 1 ? "" : "s", list.empty() ? std::string("none") : list));
  }
  return ok_status();
}

}  // namespace rinfer
