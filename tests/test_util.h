// Shared helpers for the test suite.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// 1 in the sanitizer build (the debug preset, -O1 with ASan and UBSan) and in any unoptimized
// one: there the real-model end-to-end tests (golden replies, perplexity, 64 prompts served
// together) take minutes rather than seconds, and they skip; the optimized presets run them.
#if !defined(__OPTIMIZE__) || defined(__SANITIZE_ADDRESS__)
#define RINFER_TEST_SLOW_BUILD 1
#else
#define RINFER_TEST_SLOW_BUILD 0
#endif

namespace rinfer::test {

// The path of a reference model in the model cache, or nullopt when it was not fetched.
// Tests that need it call GTEST_SKIP() with the message from missing_model_message().
std::optional<std::string> reference_model(const std::string& name);
std::string missing_model_message(const std::string& name);

// The source tree: $RINFER_SOURCE_DIR when set (the GPU machine runs tests from a copied tree),
// else the directory the tests were built from. Fixtures live under source_dir()/tests/data.
std::string source_dir();
std::string test_data_path(const std::string& relative);

// Deterministic random data (never zeros): uniform in [lo, hi).
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed);

// ||a - b|| / ||b|| in float64.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);

// Runs a command through the shell; returns exit code, captures stdout and stderr separately.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult run_command(const std::string& cmd);

// Writes bytes to a fresh file under the test temp dir; returns its path.
std::string write_temp_file(const std::string& name, const std::string& bytes);

}  // namespace rinfer::test
