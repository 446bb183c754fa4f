#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "formats/model_cache.h"

namespace rinfer::test {

namespace fs = std::filesystem;

std::optional<std::string> reference_model(const std::string& name) {
  auto r = resolve_model(name);
  if (!r.ok()) return std::nullopt;
  return r.value();
}

std::string missing_model_message(const std::string& name) {
  return "reference model '" + name + "' not in " + model_cache_dir() +
         " (run scripts/fetch-models.sh)";
}

std::string source_dir() {
  if (const char* d = std::getenv("RINFER_SOURCE_DIR"); d != nullptr && *d != '\0') return d;
  return RINFER_SOURCE_DIR;
}

std::string test_data_path(const std::string& relative) {
  return source_dir() + "/tests/data/" + relative;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do {
      x = dist(rng);
    } while (x == 0.0f);
  }
  return v;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng() >> 56);
  return v;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  if (a.size() != b.size()) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

static std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CommandResult run_command(const std::string& cmd) {
  fs::path dir = fs::temp_directory_path() / ("rinfer_cmd_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path out = dir / "out", err = dir / "err";
  std::string full = cmd + " >" + out.string() + " 2>" + err.string() + " </dev/null";
  int rc = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string write_temp_file(const std::string& name, const std::string& bytes) {
  fs::path dir = fs::temp_directory_path() / ("rinfer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p.string();
}

}  // namespace rinfer::test
