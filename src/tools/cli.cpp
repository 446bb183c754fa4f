#include "tools/cli.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

// A standard descriptor the caller closed (`>&-`) is reopened on /dev/null, read-only for
// stdout so that every write to it still fails (and is reported), and so that no file this
// process opens later can take descriptor 1 and receive the output meant for stdout.
void guard_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int flags = fd == 2 ? O_WRONLY : O_RDONLY;
    const int got = ::open("/dev/null", flags | O_CLOEXEC);
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
  }
}

// Diagnostics go to stderr, never into the result on stdout.
void log_to_stderr() {
  auto logger = spdlog::stderr_color_mt("rinfer");
  spdlog::set_default_logger(logger);
}

// The subcommand's usage line, for usage errors: "Usage: rinfer run [OPTIONS] recipe".
std::string usage_of(const CLI::App* failed) {
  if (failed == nullptr) return {};
  const std::string name =
      failed->get_parent() != nullptr ? "rinfer " + failed->get_name() : std::string("rinfer");
  CLI::Formatter f;
  std::string usage = f.make_usage(failed, name);
  while (!usage.empty() && (usage.back() == '\n' || usage.back() == ' ')) usage.pop_back();
  return usage;
}

}  // namespace

int report_error(const std::string& message) {
  std::fprintf(stderr, "rinfer: error: %s\n", message.c_str());
  return 1;
}

int run_cli(int argc, char** argv) {
  guard_standard_descriptors();
  // A reader that went away (`rinfer run ... | head -1`) makes writes fail with EPIPE, which
  // the output checks report, instead of a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  log_to_stderr();
  CLI::App app{
      "recipes-infer: LLM and multimodal inference, with optimization recipes measured "
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
  add_diff_command(app, exit_code);
  add_eval_command(app, exit_code);
  add_calibrate_command(app, exit_code);
  add_profile_command(app, exit_code);
  add_tune_command(app, exit_code);
  add_strategies_command(app, exit_code);
  add_quantize_command(app, exit_code);
  add_bench_command(app, exit_code);
  add_bench_serve_command(app, exit_code);
  add_serve_command(app, exit_code);
  add_loadgen_command(app, exit_code);
  add_embed_command(app, exit_code);
  add_classify_command(app, exit_code);
  add_index_commands(app, exit_code);
  add_bench_search_command(app, exit_code);

  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version
      app.exit(e);
      return check_stdout_written(0);
    }
    // A usage error: the error, then the usage of the subcommand it was given to, on stderr.
    const std::vector<CLI::App*> used = app.get_subcommands();
    const CLI::App* failed = used.empty() ? &app : used.front();
    std::fprintf(stderr, "rinfer: error: %s\n%s\n(see '%s --help')\n", e.what(),
                 usage_of(failed).c_str(),
                 failed == &app ? "rinfer" : ("rinfer " + failed->get_name()).c_str());
    return 2;
  } catch (const std::exception& e) {
    // No exception may end the process with an abort: every one is a clean error.
    exit_code = report_error(fmt::format("internal error: {}", e.what()));
  } catch (...) {
    exit_code = report_error("internal error: an unknown exception");
  }
  return check_stdout_written(exit_code);
}

}  // namespace rinfer
