// strategies.allocator: the CUDA device memory allocator, caching (freed blocks reused by size
// class) or plain (cudaMalloc/cudaFree every time). Hook: LoadOptions::cuda.allocator. On the CPU
// the model allocates its buffers once at load from the process-wide caching host allocator
// (src/core/allocator.h), so there is nothing to switch.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr const char* kKey = "strategies.allocator.kind";

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"kind"}));
  RINFER_ASSIGN_OR_RETURN(auto kind, m.get_enum("kind", {"caching", "plain"}));
  if (kind) s.allocator = *kind == 0 ? AllocatorKind::kCaching : AllocatorKind::kPlain;
  note_origin(m, "kind", s);
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  if (device.is_cpu() && s.origins.has(kKey)) {
    return key_conflict(s.origins, kKey, "device",
                        "chooses the CUDA device allocator; on cpu the model allocates its "
                        "buffers once at load from the process-wide host allocator, which is not "
                        "switchable (remove the key, or use device cuda:N)");
  }
  return ok_status();
}

std::string describe(const StrategyConfig& s, const Device& device) {
  if (!device.is_cuda()) return "";
  return fmt::format("allocator {}", s.allocator == AllocatorKind::kCaching ? "caching" : "plain");
}

}  // namespace

const StrategyInfo& allocator_strategy() {
  static const StrategyInfo info{
      "allocator",
      "CUDA device memory: a caching allocator (blocks reused by size class) or plain "
      "cudaMalloc/cudaFree",
      {{"kind", "caching|plain", "caching", "plain: every allocation goes to the driver"}},
      "{kind: plain}",
      "LoadOptions::cuda.allocator",
      "cuda",
      "docs/strategies/allocator.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
