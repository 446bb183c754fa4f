// Shared by the benchmark programs: medians, machine description, provenance (git sha and
// whether the measured sources were dirty), and writing the JSON next to the printed table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rinfer::bench {

double median(std::vector<double> v);

// stdout of a shell command, trailing newlines and spaces removed ("" when it fails).
std::string run_cmd(const std::string& cmd);

// "model name" from /proc/cpuinfo, or "unknown".
std::string cpu_model();

// HEAD of the source tree, and whether `paths` (relative to it) have uncommitted changes.
std::string git_sha(const std::string& source_dir);
bool git_dirty(const std::string& source_dir, const std::string& paths = "src");

// Current UTC time as 2026-11-30T07:24:04Z.
std::string utc_date();

// {"name", "cpu", "hardware_threads", "load_average_1min", "os"}.
nlohmann::ordered_json machine_json(const std::string& name);

// Writes `j` (pretty) to `path`; prints "wrote PATH" or the failure on stderr. Exit code 0/1.
int write_json(const std::string& path, const nlohmann::ordered_json& j);

}  // namespace rinfer::bench
