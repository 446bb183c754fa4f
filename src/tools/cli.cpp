#include "tools/cli.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "tools/tools.h"

namespace rinfer {

int report_error(const std::string& message) {
  std::fprintf(stderr, "rinfer: error: %s\n", message.c_str());
  return 1;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"recipes-infer: LLM and multimodal inference, with optimization recipes measured "
               "side by side.",
               "rinfer"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.set_version_flag("--version", "rinfer 0.1.0");

  int exit_code = 0;
  add_info_command(app, exit_code);
  add_devices_command(app, exit_code);
  add_tokenize_commands(app, exit_code);
  add_run_command(app, exit_code);
  add_perplexity_command(app, exit_code);
  add_parity_command(app, exit_code);
  add_strategies_command(app, exit_code);
  add_quantize_command(app, exit_code);
  add_bench_command(app, exit_code);

  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  // Usage errors: one line on stderr, exit code 2. --help and --version exit 0.
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return fmt::format("rinfer: error: {} (see '{} --help')\n", e.what(),
                       failed->get_parent() ? "rinfer " + failed->get_name() : "rinfer");
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace rinfer
