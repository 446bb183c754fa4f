// strategies.threads: the size of the engine's host thread pool (CPU kernels; host work on
// CUDA). Hook: the engine creates its ThreadPool with StrategyConfig::threads.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"count"}));
  RINFER_ASSIGN_OR_RETURN(auto count, m.get_int("count", 0, 1024));
  if (count) s.threads = static_cast<int>(*count);
  note_origin(m, "count", s);
  return ok_status();
}

Status validate(const StrategyConfig&, const Device&) { return ok_status(); }

std::string describe(const StrategyConfig& s, const Device&) {
  return s.threads == 0 ? std::string("threads all cores") : fmt::format("threads {}", s.threads);
}

}  // namespace

const StrategyInfo& threads_strategy() {
  static const StrategyInfo info{"threads",
                                 "host threads for the CPU kernels (on CUDA: host-side work only)",
                                 {{"count", "int in [0, 1024]", "0", "0: all cores"}},
                                 "{count: 1}",
                                 "the engine's ThreadPool size (LoadOptions::cpu.ops.pool)",
                                 "cpu, cuda",
                                 "docs/strategies/threads.md",
                                 parse,
                                 validate,
                                 describe};
  return info;
}

}  // namespace rinfer
