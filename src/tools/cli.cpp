#include "tools/cli.h"

#include <CLI/CLI.hpp>

namespace rinfer {

int run_cli(int argc, char** argv) {
  CLI::App app{"recipes-infer: LLM and multimodal inference recipes"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

}  // namespace rinfer
