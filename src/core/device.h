// Where a tensor's bytes live.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rinfer/status.h"

namespace rinfer {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::kCuda, i}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda" (= cuda:0) and "cuda:N". Does not check that the device exists.
Result<Device> parse_device(std::string_view text);

}  // namespace rinfer
