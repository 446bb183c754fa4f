#include "bench_util.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

namespace rinfer::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string run_cmd(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) {
    out.pop_back();
  }
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string git_sha(const std::string& source_dir) {
  return run_cmd("git -C '" + source_dir + "' rev-parse HEAD 2>/dev/null");
}

bool git_dirty(const std::string& source_dir, const std::string& paths) {
  return !run_cmd("git -C '" + source_dir + "' status --porcelain -- " + paths + " 2>/dev/null")
              .empty();
}

std::string utc_date() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

nlohmann::ordered_json machine_json(const std::string& name) {
  utsname u{};
  uname(&u);
  double load = 0;
  if (getloadavg(&load, 1) != 1) load = -1;
  return {{"name", name},
          {"cpu", cpu_model()},
          {"hardware_threads", sysconf(_SC_NPROCESSORS_ONLN)},
          {"load_average_1min", load},
          {"os", std::string(u.sysname) + " " + u.release}};
}

int write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return 0;
}

}  // namespace rinfer::bench
