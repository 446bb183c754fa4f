// Benchmark reports: provenance (git sha, date, machine), medians and spreads, and the outputs
// `rinfer bench` makes from its JSON: the Markdown table (printed, and the one between
// `<!-- bench:begin -->` and `<!-- bench:end -->` in a recipe folder's README.md) and an SVG
// bar chart. The table and the chart are functions of the JSON only, so a README table can
// always be regenerated from bench/results/<machine>/*.json and is never typed by hand.
// Also used by the programs in bench/ (bench_util.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "rinfer/status.h"

namespace rinfer::bench {

double median(std::vector<double> v);

struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
};
Spread spread(const std::vector<double>& v);

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

// The bench/results/<machine> folder name. On the CPU it names the model, its widest SIMD
// feature and the core count ("cpu-amd-epyc-avx512-2core", "cpu-intel-xeon-amx-2core"), so
// results from different CPUs never share a folder; for a CUDA device the GPU's short name
// ("h200"; `gpu_name` as the driver reports it, e.g. "NVIDIA H200").
std::string machine_short_name(bool cuda, const std::string& gpu_name);
// The CPU label from its parts: /proc/cpuinfo's model name, the feature ("amx", "avx512",
// "avx2" or "") and the core count.
std::string cpu_short_name(const std::string& model_name, const std::string& feature, long cores);
// This CPU's widest feature the kernels use: "amx" (AMX-BF16 tiles usable), "avx512", "avx2" or
// "".
std::string cpu_feature();

// {"kind", "name", "driver"} of the device a benchmark runs on (for cuda:N also "device"), and
// its bench/results folder name in *machine.
nlohmann::ordered_json device_json(const Device& device, std::string* machine);

// Writes `j` (pretty) to `path`, creating its folder, atomically (core/output_file.h: a FIFO,
// device, directory or dangling symlink is refused, a symlink to a file written through); prints
// "wrote PATH" or the failure on stderr. Exit code 0/1.
int write_json(const std::string& path, const nlohmann::ordered_json& j);
// Before a benchmark runs: makes the results JSON's folder (as write_json would) and checks the
// path (core/output_file.h), so that a bad output fails now, not after the measurements.
Status prepare_json_output(const std::string& path, const std::vector<std::string>& inputs);

// A variant this machine cannot run (its load answered kUnsupported: AMX tiles, a CPU or GPU
// feature) is left out with a note, as variants for another device are; the baseline must run.
// Returns true when `st` skips the variant, after printing why on stderr and recording {name,
// recipe, reason} under report["skipped"].
bool skip_unsupported(nlohmann::ordered_json& report, const std::string& name,
                      const std::string& recipe, const Status& st, bool is_baseline);
// "medians of N runs", or "a single run" when N is 1 (capitalized with `capital`).
std::string medians_of(int64_t runs, bool capital = false);
// The line under a table that names the skipped variants and why ("" when none).
std::string skipped_note(const nlohmann::ordered_json& report);

// ---- rinfer bench outputs, from its JSON report ----

// The Markdown results table with a line of settings under it (and skipped_note's).
std::string markdown_table(const nlohmann::ordered_json& report);

// A bar chart of decode and prefill tokens/s per variant (two panels, each with its own scale).
std::string svg_chart(const nlohmann::ordered_json& report);

// Replaces the text between the `<!-- bench:begin TAG -->` and `<!-- bench:end TAG -->` lines
// of `readme` with `table` (TAG: the machine, e.g. cpu-2core or h200, so each machine keeps its
// own table; an empty tag gives `<!-- bench:begin -->`). Appends a "## Measured on TAG"
// section with the markers when the file has none. Written atomically (core/output_file.h).
// Errors name the file.
Status replace_readme_table(const std::string& readme, const std::string& table,
                            const std::string& tag = "");

// The end of a folder bench: prints `table` (with skipped_note's line), writes the JSON and, with
// `readme`, the folder's README.md table for `machine`. Returns the exit code (errors reported on stderr).
int publish(const nlohmann::ordered_json& report, const std::string& table,
            const std::string& json_path, bool readme, const std::string& folder,
            const std::string& machine);

// Text with the table between the markers replaced (for tests; what replace_readme_table
// writes).
std::string replace_between_markers(const std::string& text, const std::string& table,
                                    const std::string& tag = "");

}  // namespace rinfer::bench
