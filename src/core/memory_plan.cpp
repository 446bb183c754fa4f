#include "core/memory_plan.h"

#include <fmt/format.h>

#include <charconv>

#include "core/cuda_info.h"
#include "core/error.h"
#include "core/input_file.h"

namespace rinfer {

uint64_t MemoryPlan::total_bytes() const {
  uint64_t total = 0;
  for (const MemoryItem& it : items) total += it.bytes;
  return total;
}

std::string format_mib(uint64_t bytes, bool round_up) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t mib = round_up ? bytes / kMiB + (bytes % kMiB != 0 ? 1 : 0) : bytes / kMiB;
  std::string digits = std::to_string(mib);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out + " MiB";
}

Status check_memory_plan(const MemoryPlan& plan, const MemoryAvailable& available) {
  const uint64_t total = plan.total_bytes();
  if (total <= available.bytes) return ok_status();
  std::string what;
  if (plan.items.size() == 1) {
    what = plan.items[0].what;
  } else {
    for (size_t i = 0; i < plan.items.size(); ++i) {
      if (i > 0) what += i + 1 == plan.items.size() ? " and " : ", ";
      what += fmt::format("{} ({})", plan.items[i].what, format_mib(plan.items[i].bytes));
    }
  }
  return out_of_memory("{} {} {} but {} {} available ({}){}{}", what,
                       plan.items.size() == 1 ? "needs" : "need", format_mib(total),
                       format_mib(available.bytes, /*round_up=*/false),
                       available.bytes >> 20 == 1 ? "is" : "are", available.source,
                       plan.hint.empty() ? "" : ": ", plan.hint);
}

Result<uint64_t> parse_meminfo_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t pos = 0;
  while (pos < meminfo.size()) {
    size_t end = meminfo.find('\n', pos);
    if (end == std::string_view::npos) end = meminfo.size();
    std::string_view line = meminfo.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    uint64_t kib = 0;
    const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), kib);
    const std::string_view unit = line.substr(static_cast<size_t>(p - line.data()));
    if (ec != std::errc() || (unit != " kB" && unit != " kB\r") || kib > (~uint64_t{0} >> 10)) {
      return data_loss("/proc/meminfo: cannot read the MemAvailable line '{}'", line);
    }
    return kib << 10;
  }
  return not_found("/proc/meminfo has no MemAvailable line");
}

Result<MemoryAvailable> memory_available(const Device& device) {
  if (device.is_cuda()) {
    RINFER_ASSIGN_OR_RETURN(CudaMemoryInfo m, cuda_memory_info(device.index));
    return MemoryAvailable{
        m.free_bytes, fmt::format("{}: free device memory, cudaMemGetInfo", device.to_string())};
  }
  RINFER_ASSIGN_OR_RETURN(std::string text, read_regular_file("/proc/meminfo"));
  RINFER_ASSIGN_OR_RETURN(uint64_t bytes, parse_meminfo_available(text));
  return MemoryAvailable{bytes, "host: MemAvailable in /proc/meminfo"};
}

}  // namespace rinfer
