// strategies.kv_cache: keep each position's keys and values so a decode step runs one token.
// Baseline: recompute the whole prefix every step. Hook: GeneratorOptions::kv_cache.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"enabled"}));
  RINFER_ASSIGN_OR_RETURN(auto enabled, m.get_bool("enabled"));
  if (enabled) s.kv_cache = *enabled;
  note_origin(m, "enabled", s);
  return ok_status();
}

Status validate(const StrategyConfig&, const Device&) { return ok_status(); }

void apply(const StrategyConfig& s, const Device&, LoadOptions&, GeneratorOptions& gen) {
  gen.kv_cache = s.kv_cache;
}

std::string describe(const StrategyConfig& s, const Device&) {
  return fmt::format("kv_cache {}", on_off(s.kv_cache));
}

}  // namespace

const StrategyInfo& kv_cache_strategy() {
  static const StrategyInfo info{
      "kv_cache",
      "keep every position's keys and values so a decode step runs only the new token",
      {{"enabled", "bool", "true", "false: every step recomputes the whole sequence"}},
      "{enabled: false}",
      "GeneratorOptions::kv_cache (the generator keeps or clears the cache each step)",
      "cpu, cuda",
      "docs/strategies/kv_cache.md",
      parse,
      validate,
      apply,
      describe};
  return info;
}

}  // namespace rinfer
