#include "tools/bench_report.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/cuda_info.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "ops/cpu/matmul_bf16.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer::bench {

using nlohmann::ordered_json;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Spread spread(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return s;
  s.median = median(v);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
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

// RINFER_GIT_SHA (set by the GPU machine's scripts from the bundle, whose copy of .git may be
// stale) overrides the checkout's HEAD and already says "+dirty" when the build was.
std::string git_sha(const std::string& source_dir) {
  const char* e = std::getenv("RINFER_GIT_SHA");
  if (e != nullptr && *e != '\0') return e;
  return run_cmd("git -C '" + source_dir + "' rev-parse HEAD 2>/dev/null");
}

bool git_dirty(const std::string& source_dir, const std::string& paths) {
  const char* e = std::getenv("RINFER_GIT_SHA");
  if (e != nullptr && *e != '\0') return false;
  return !run_cmd("git -C '" + source_dir + "' status --porcelain -- " + paths + " 2>/dev/null")
              .empty();
}

std::string utc_date() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

ordered_json machine_json(const std::string& name) {
  utsname u{};
  uname(&u);
  double load = 0;
  if (getloadavg(&load, 1) != 1) load = -1;
  return {{"name", name},
          {"cpu", cpu_model()},
          {"cpu_feature", cpu_feature()},
          {"hardware_threads", sysconf(_SC_NPROCESSORS_ONLN)},
          {"load_average_1min", load},
          {"os", std::string(u.sysname) + " " + u.release}};
}

namespace {

// Lower-case letters and digits, every other run of characters one '-'.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

}  // namespace

std::string cpu_feature() {
  if (cpu::amx_bf16_available()) return "amx";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "";
}

std::string cpu_short_name(const std::string& model_name, const std::string& feature,
                           long cores) {
  // "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz" -> "intel-xeon-platinum-8481c": the
  // frequency, trademarks and the words that every model name carries are left out.
  std::string name = model_name.substr(0, model_name.find('@'));
  for (const char* noise : {"(R)", "(r)", "(TM)", "(tm)", " CPU", " Processor"}) {
    for (size_t at = name.find(noise); at != std::string::npos; at = name.find(noise)) {
      name.erase(at, std::string(noise).size());
    }
  }
  std::string s = slug(name);
  if (s.size() > 40) s = s.substr(0, 40);
  while (!s.empty() && s.back() == '-') s.pop_back();
  std::string out = "cpu-";
  if (!s.empty() && s != "unknown") out += s + "-";
  if (!feature.empty()) out += feature + "-";
  return out + fmt::format("{}core", cores);
}

std::string machine_short_name(bool cuda, const std::string& gpu_name) {
  if (!cuda) return cpu_short_name(cpu_model(), cpu_feature(), sysconf(_SC_NPROCESSORS_ONLN));
  // "NVIDIA H200" -> "h200", "NVIDIA GeForce RTX 4090" -> "rtx-4090".
  std::string s = gpu_name;
  for (const char* prefix : {"NVIDIA ", "GeForce "}) {
    if (s.rfind(prefix, 0) == 0) s = s.substr(std::string(prefix).size());
  }
  s = slug(s);
  return s.empty() ? "gpu" : s;
}

nlohmann::ordered_json device_json(const Device& device, std::string* machine) {
  nlohmann::ordered_json d;
  if (device.is_cpu()) {
    d["kind"] = "cpu";
    d["name"] = cpu_model();
    d["driver"] = nullptr;
    *machine = machine_short_name(false, "");
    return d;
  }
  d["kind"] = "cuda";
  std::string name = "unknown GPU";
  if (auto devs = cuda_devices(); devs.ok()) {
    for (const auto& dev : *devs) {
      if (dev.index == device.index) name = dev.name;
    }
  }
  d["name"] = name;
  d["device"] = device.to_string();
  d["driver"] = cuda_versions();
  *machine = machine_short_name(true, name);
  return d;
}

int write_json(const std::string& path, const ordered_json& j) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  const Status st = write_file_atomically(path, json_text(j) + "\n");
  if (!st.ok()) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), st.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return 0;
}

Status prepare_json_output(const std::string& path, const std::vector<std::string>& inputs) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  return check_output_path(path, inputs).status();
}

// ---- tables and charts ----

namespace {

double num(const ordered_json& j, const char* key, double dflt = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}

std::string str(const ordered_json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// 3 significant digits, no exponent: 1858, 276, 27.4, 1.62, 0.041.
std::string sig3(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

std::string with_range(const ordered_json& v, const char* metric) {
  const double m = num(v["median"], metric);
  const double lo = num(v["min"], metric);
  const double hi = num(v["max"], metric);
  if (lo == hi) return sig3(m);
  return fmt::format("{} ({}–{})", sig3(m), sig3(lo), sig3(hi));
}

std::string percent(double f) { return fmt::format("{:+.1f}%", 100.0 * f); }

}  // namespace

// The footer's precision sentence: the gates as applied (each variant's own, from its JSON).
std::string precision_note(const ordered_json& report) {
  const int64_t tokens = report["settings"].value("precision_tokens", int64_t{0});
  if (tokens == 0) return "Precision: not measured (--no-precision).";
  std::vector<std::pair<std::string, std::string>> gates;  // variant, gate text
  for (const auto& v : report["variants"]) {
    if (v.value("baseline", false) || !v.contains("gate") || !v["gate"].is_object()) continue;
    gates.emplace_back(str(v, "name"), str(v["gate"], "text"));
  }
  std::string out = fmt::format("Precision: teacher-forced over {} tokens against `{}`", tokens,
                                str(report, "baseline"));
  const bool one_gate = std::all_of(gates.begin(), gates.end(), [&](const auto& g) {
    return g.second == gates.front().second;
  });
  if (gates.empty()) return out + ".";
  if (one_gate) return out + fmt::format("; gate {}.", gates.front().second);
  out += "; gates:";
  for (size_t i = 0; i < gates.size(); ++i) {
    out += fmt::format("{} `{}` {}", i ? ";" : "", gates[i].first, gates[i].second);
  }
  return out + ".";
}

std::string markdown_table(const ordered_json& report) {
  std::ostringstream o;
  o << "| variant | strategy change | TTFT ms | decode tok/s | prefill tok/s | latency reduction "
       "| throughput gain | memory saving | precision (top-1 / KL / Δppl) | gate |\n";
  o << "|---|---|---|---|---|---|---|---|---|---|\n";
  const std::string best = report.contains("best") && report["best"].is_string()
                               ? report["best"].get<std::string>()
                               : std::string();
  for (const auto& v : report["variants"]) {
    const std::string name = str(v, "name");
    const bool is_baseline = v.value("baseline", false);
    const bool is_best = !best.empty() && name == best;
    std::string cell_name = "`" + name + "`";
    if (is_best) cell_name = "**" + cell_name + "** (best)";
    std::string change = str(v, "change");
    if (is_baseline) change = "baseline: " + str(v, "strategies");
    std::string lat = "—", thr = "—", mem = "—", prec = "reference", gate = "—";
    if (!is_baseline) {
      const auto& rel = v["relative"];
      lat = percent(num(rel, "latency_reduction"));
      thr = fmt::format("{:.2f}x", num(rel, "throughput_gain"));
      mem = percent(num(rel, "memory_saving"));
      const auto& p = v["precision"];
      if (p.is_object()) {
        prec = fmt::format("{:.3f} / {:.2g} / {:+.2f}%", num(p, "top1_agreement"),
                           num(p, "mean_kl"), 100.0 * num(p, "ppl_change"));
        if (v.value("gate_passed", true)) {
          gate = is_best ? "pass, **best**" : "pass";
        } else {
          gate = "**fail** (" + str(v, "gate_failures") + "): rolled back";
        }
      } else {
        prec = "not measured";
        gate = is_best ? "**best** (unchecked)" : "unchecked";
      }
    }
    o << "| " << cell_name << " | " << change << " | " << with_range(v, "ttft_ms") << " | "
      << with_range(v, "decode_tps") << " | " << with_range(v, "prefill_tps") << " | " << lat
      << " | " << thr << " | " << mem << " | " << prec << " | " << gate << " |\n";
  }
  const auto& s = report["settings"];
  const auto& m = report["machine"];
  o << "\n"
    << fmt::format(
           "{}{} after {} warm-up, prompt {} tokens, {} generated "
           "tokens (greedy, end-of-text ignored), on {} ({}, {} threads; device {}), {} at "
           "{}{}. Latency reduction: per-token decode latency; throughput gain: decode tok/s; "
           "memory saving: peak host + device memory; all relative to `{}`. {} Shared machine: "
           "numbers move between runs.",
           medians_of(s.value("repeat", int64_t{0}), true),
           s.value("repeat", int64_t{0}) == 1 ? "" : " (min–max)", num(s, "warmup"),
           num(s, "prompt_tokens"), num(s, "gen_tokens"),
           str(m, "name"), str(m, "cpu"), num(m, "hardware_threads"), str(report["device"], "name"),
           str(report, "date"), str(report, "git_sha").substr(0, 10),
           report.value("git_dirty", false) ? "+dirty" : "", str(report, "baseline"),
           precision_note(report))
    << "\n"
    << skipped_note(report);
  return o.str();
}

std::string svg_chart(const ordered_json& report) {
  const auto& vs = report["variants"];
  const int n = static_cast<int>(vs.size());
  const int bar_h = 18, gap = 8, label_w = 170, panel_w = 300, top = 40;
  const int height = top + n * (bar_h + gap) + 30;
  const int width = label_w + 2 * (panel_w + 80);
  std::ostringstream o;
  o << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height);
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const char* metrics[2] = {"decode_tps", "prefill_tps"};
  const char* titles[2] = {"decode tok/s (median)", "prefill tok/s (median)"};
  const char* colors[2] = {"#4e79a7", "#f28e2b"};
  for (int p = 0; p < 2; ++p) {
    double max_v = 0;
    for (const auto& v : vs) max_v = std::max(max_v, num(v["median"], metrics[p]));
    if (max_v <= 0) max_v = 1;
    const int x0 = label_w + p * (panel_w + 80);
    o << fmt::format("<text x=\"{}\" y=\"20\" font-weight=\"bold\">{}</text>\n", x0, titles[p]);
    int i = 0;
    for (const auto& v : vs) {
      const double val = num(v["median"], metrics[p]);
      const int y = top + i * (bar_h + gap);
      const int w = std::max(1, static_cast<int>(panel_w * val / max_v));
      const bool failed = !v.value("gate_passed", true);
      o << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}/>\n", x0,
                       y, w, bar_h, colors[p], failed ? " fill-opacity=\"0.35\"" : "");
      o << fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", x0 + w + 4, y + bar_h - 5, sig3(val));
      if (p == 0) {
        o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}{}</text>\n", label_w - 8,
                         y + bar_h - 5, str(v, "name"), failed ? " (gate fail)" : "");
      }
      ++i;
    }
  }
  o << fmt::format("<text x=\"8\" y=\"{}\" fill=\"#555\">{} · {} · {}</text>\n", height - 10,
                   str(report["machine"], "name"), str(report, "date"),
                   str(report, "git_sha").substr(0, 10));
  o << "</svg>\n";
  return o.str();
}

std::string replace_between_markers(const std::string& text, const std::string& table,
                                    const std::string& tag) {
  const std::string sfx = tag.empty() ? " -->" : " " + tag + " -->";
  const std::string kBegin = "<!-- bench:begin" + sfx;
  const std::string kEnd = "<!-- bench:end" + sfx;
  const std::string block =
      kBegin +
      "\n<!-- generated by `rinfer bench --readme` from the bench JSON: do not edit -->\n" + table +
      kEnd;
  const size_t b = text.find(kBegin);
  const size_t e = b == std::string::npos ? std::string::npos : text.find(kEnd, b);
  if (b == std::string::npos || e == std::string::npos) {
    std::string out = text;
    if (!out.empty() && out.back() != '\n') out += '\n';
    return out + "\n## Measured " + (tag.empty() ? std::string("results") : "on " + tag) + "\n\n" +
           block + "\n";
  }
  return text.substr(0, b) + block + text.substr(e + kEnd.size());
}

Status replace_readme_table(const std::string& readme, const std::string& table,
                            const std::string& tag) {
  std::string text;  // a missing README is made
  auto read = read_regular_file(readme);
  if (read.ok()) {
    text = std::move(read).value();
  } else if (read.status().code() != StatusCode::kNotFound) {
    return read.status();
  }
  return write_file_atomically(readme, replace_between_markers(text, table, tag));
}

bool skip_unsupported(nlohmann::ordered_json& report, const std::string& name,
                      const std::string& recipe, const Status& st, bool is_baseline) {
  if (is_baseline || st.code() != StatusCode::kUnsupported) return false;
  std::fprintf(stderr, "bench: skipping %s (this machine cannot run it: %s)\n", name.c_str(),
               st.message().c_str());
  report["skipped"].push_back({{"name", name}, {"recipe", recipe}, {"reason", st.message()}});
  return true;
}

std::string medians_of(int64_t runs, bool capital) {
  std::string out = runs == 1 ? "a single run" : fmt::format("medians of {} runs", runs);
  if (capital) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string skipped_note(const nlohmann::ordered_json& report) {
  if (!report.contains("skipped") || report["skipped"].empty()) return "";
  std::string out = "\nNot run on this machine:";
  for (const auto& v : report["skipped"]) {
    out += fmt::format(" {} ({});", v.value("name", "?"), v.value("reason", "?"));
  }
  out.back() = '.';
  return out + "\n";
}

int publish(const nlohmann::ordered_json& report, const std::string& table_in,
            const std::string& json_path, bool readme, const std::string& folder,
            const std::string& machine) {
  const std::string table = table_in + skipped_note(report);
  std::printf("%s", table.c_str());
  std::fflush(stdout);
  if (write_json(json_path, report) != 0) return 1;
  if (!readme) return 0;
  const std::string path = (std::filesystem::path(folder) / "README.md").string();
  if (Status s = replace_readme_table(path, table, machine); !s.ok()) {
    return report_error(s.message());
  }
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return 0;
}

}  // namespace rinfer::bench
