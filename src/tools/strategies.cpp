// `rinfer strategies`: the strategy registry (src/strategies/registry.h) as a table; with a
// name, one strategy's keys, baseline, engine hooks and document.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <string>

#include "strategies/registry.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

void print_one(const StrategyInfo& s) {
  std::cout << fmt::format("{}: {}\n", s.name, s.summary);
  std::cout << fmt::format("  devices   {}\n", s.devices);
  std::cout << fmt::format("  baseline  strategies.{}: {}\n", s.name, s.baseline);
  std::cout << fmt::format("  hooks     {}\n", s.hooks);
  std::cout << fmt::format("  doc       {}\n", s.doc);
  std::cout << "  keys\n";
  size_t width = 14;  // the longest key's, so the columns line up
  for (const StrategyKey& k : s.keys) width = std::max(width, k.name.size());
  for (const StrategyKey& k : s.keys) {
    std::cout << fmt::format("    {:<{}} {:<38} default {}\n", k.name, width, k.type, k.fallback);
    std::cout << fmt::format("    {:<{}} {}\n", "", width, k.meaning);
  }
}

}  // namespace

void add_strategies_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "strategies", "List the optimization strategies a recipe can switch (or one, by name)");
  auto name = std::make_shared<std::string>();
  cmd->add_option("name", *name, "a strategy (kv_cache, fusion, quantization, ...)");
  cmd->callback([&exit_code, name] {
    if (!name->empty()) {
      const StrategyInfo* s = find_strategy(*name);
      if (s == nullptr) {
        std::string names;
        for (const StrategyInfo& i : strategy_registry()) {
          names += names.empty() ? "" : ", ";
          names += i.name;
        }
        exit_code =
            report_error(fmt::format("no strategy named '{}' (there are: {})", *name, names));
        return;
      }
      print_one(*s);
      exit_code = 0;
      return;
    }
    // Aligned columns of the widest entry; a strategy's devices are named per key in its own
    // view (rinfer strategies NAME), here only which devices it has keys for.
    size_t name_w = 8;
    for (const StrategyInfo& s : strategy_registry()) name_w = std::max(name_w, s.name.size());
    auto devices_of = [](const StrategyInfo& s) {
      const bool cpu = s.devices.find("cpu") != std::string::npos;
      const bool cuda = s.devices.find("cuda") != std::string::npos;
      return std::string(cpu && cuda ? "cpu, cuda" : cpu ? "cpu" : cuda ? "cuda" : "-");
    };
    const size_t dev_w = 9;
    std::cout << fmt::format("{:<{}}  {:<{}}  {}\n", "strategy", name_w, "devices", dev_w,
                             "summary / baseline");
    for (const StrategyInfo& s : strategy_registry()) {
      std::cout << fmt::format("{:<{}}  {:<{}}  {}\n", s.name, name_w, devices_of(s), dev_w,
                               s.summary);
      std::cout << fmt::format("{:<{}}  {:<{}}  baseline {}\n", "", name_w, "", dev_w,
                               s.baseline);
    }
    std::cout << "\nKeys, hooks and documents: rinfer strategies NAME; the schema: "
                 "docs/recipes.md\n";
    exit_code = 0;
  });
}

}  // namespace rinfer
