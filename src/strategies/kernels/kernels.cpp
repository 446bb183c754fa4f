// strategies.kernels: the CPU kernel set, fast (SIMD, tiled, integer dot products) or the
// scalar reference (f64 accumulation). Hook: LoadOptions::cpu.ops.impl. CUDA has one kernel set.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"impl"}));
  RINFER_ASSIGN_OR_RETURN(auto impl, m.get_enum("impl", {"reference", "fast"}));
  if (impl) s.kernels = *impl == 0 ? cpu::Impl::kReference : cpu::Impl::kFast;
  note_origin(m, "impl", s);
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  if (device.is_cuda() && s.kernels == cpu::Impl::kReference) {
    return key_conflict(s.origins, "strategies.kernels.impl", "device",
                        fmt::format("reference selects the scalar CPU kernels; device {} runs the "
                                    "CUDA kernels (there is one set): use fast or remove the key",
                                    device.to_string()));
  }
  return ok_status();
}

std::string describe(const StrategyConfig& s, const Device& device) {
  if (!device.is_cpu()) return "";
  return fmt::format("kernels {}", s.kernels == cpu::Impl::kFast ? "fast" : "reference");
}

}  // namespace

const StrategyInfo& kernels_strategy() {
  static const StrategyInfo info{
      "kernels",
      "the CPU kernel set: SIMD fast kernels or the scalar reference",
      {{"impl", "reference|fast", "fast",
        "fast: Highway SIMD, tiled prefill, integer dot products; reference: scalar, f64 sums"}},
      "{impl: reference}",
      "LoadOptions::cpu.ops.impl",
      "cpu",
      "docs/strategies/kernels.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
