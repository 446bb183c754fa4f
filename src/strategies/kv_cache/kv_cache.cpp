// strategies.kv_cache: keep each position's keys and values so a decode step runs one token.
// Baseline: recompute the whole prefix every step. Hooks: GeneratorOptions::kv_cache, and the
// cache's element type LoadOptions::kv_dtype (auto: bf16 on CUDA, f32 on the CPU).
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"enabled", "dtype"}));
  RINFER_ASSIGN_OR_RETURN(auto enabled, m.get_bool("enabled"));
  if (enabled) s.kv_cache = *enabled;
  RINFER_ASSIGN_OR_RETURN(auto dtype, m.get_enum("dtype", {"auto", "bf16", "f32"}));
  if (dtype) {
    s.kv_dtype = *dtype == 0   ? std::nullopt
                 : *dtype == 1 ? std::optional<DType>(DType::kBF16)
                               : std::optional<DType>(DType::kF32);
  }
  for (const char* k : {"enabled", "dtype"}) note_origin(m, k, s);
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  if (device.is_cpu() && s.kv_dtype && *s.kv_dtype != DType::kF32) {
    return key_conflict(s.origins, "strategies.kv_cache.dtype", "device",
                        "bf16: the CPU keeps its KV cache in f32 only (use auto or f32 there)");
  }
  return ok_status();
}

void apply(const StrategyConfig& s, const Device&, LoadOptions& load, GeneratorOptions& gen) {
  gen.kv_cache = s.kv_cache;
  load.kv_dtype = s.kv_dtype;
}

std::string describe(const StrategyConfig& s, const Device&) {
  if (!s.kv_dtype) return fmt::format("kv_cache {}", on_off(s.kv_cache));
  return fmt::format("kv_cache {} ({})", on_off(s.kv_cache), dtype_name(*s.kv_dtype));
}

}  // namespace

const StrategyInfo& kv_cache_strategy() {
  static const StrategyInfo info{
      "kv_cache",
      "keep every position's keys and values so a decode step runs only the new token",
      {{"enabled", "bool", "true", "false: every step recomputes the whole sequence"},
       {"dtype", "auto | bf16 | f32", "auto",
        "the cache's element type: auto is bf16 on CUDA (half the bytes a decode step reads) "
        "and f32 on the CPU (its only type); f32 on CUDA keeps keys and values unrounded"}},
      "{enabled: false}",
      "GeneratorOptions::kv_cache (the generator keeps or clears the cache each step); "
      "LoadOptions::kv_dtype (the cache's element type)",
      "cpu, cuda",
      "docs/strategies/kv_cache.md",
      parse,
      validate,
      apply,
      describe};
  return info;
}

}  // namespace rinfer
