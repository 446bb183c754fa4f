// Helpers of the CLI tests: run the rinfer binary built with them, read a file whole.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace rinfer::test {

inline CommandResult rinfer_cli(const std::string& args) {
  return run_command(std::string("'") + RINFER_BINARY + "' " + args);
}

// The file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace rinfer::test
