#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace rinfer {

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Result<Device> parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view num = text.substr(5);
    int idx = -1;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), idx);
    if (ec == std::errc() && ptr == num.data() + num.size() && idx >= 0 && idx < 1024) {
      return Device::cuda(idx);
    }
  }
  return invalid_argument("device '{}': expected 'cpu', 'cuda' or 'cuda:N'", text);
}

}  // namespace rinfer
