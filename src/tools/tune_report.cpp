#include "tools/tune_report.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/output_file.h"

namespace rinfer {

namespace {

using nlohmann::json;

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double dbl(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

std::string xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

}  // namespace

json trial_json(const TuneTrial& t) {
  json j{
      {"id", t.id},           {"base", t.base},     {"settings", t.settings}, {"change", t.change},
      {"verdict", t.verdict}, {"cached", t.cached}, {"accepted", t.accepted}};
  j["speed"] = nullptr;
  if (t.speed) {
    j["speed"] = {{"total_ms", num(t.speed->total_ms)},
                  {"probe_ms", num(t.speed->probe_ms)},
                  {"decode_tps", num(t.speed->decode_tps)},
                  {"prefill_tps", num(t.speed->prefill_tps)}};
  }
  j["precision"] = nullptr;
  if (t.precision) {
    j["precision"] = {{"top1", num(t.precision->top1)},
                      {"mean_kl", num(t.precision->mean_kl)},
                      {"ppl_change", num(t.precision->ppl_change)},
                      {"passed", t.precision->passed},
                      {"failures", t.precision->failures}};
  }
  return j;
}

Result<TuneCache> TuneCache::open(const std::string& path) {
  TuneCache c;
  c.path_ = path;
  c.j_ = std::make_shared<json>(json::object());
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return c;  // none yet
  RINFER_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, uint64_t{256} << 20));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("trials") || !j["trials"].is_object()) {
    return Status(StatusCode::kDataLoss,
                  fmt::format("{}: not a rinfer tune trial cache (delete it to start over)", path));
  }
  *c.j_ = std::move(j["trials"]);
  return c;
}

bool TuneCache::find(const std::string& key, TuneTrial& t) const {
  auto it = j_->find(key);
  if (it == j_->end() || !it->is_object()) return false;
  const json& e = *it;
  if (e.contains("speed") && e["speed"].is_object()) {
    const json& s = e["speed"];
    t.speed = TuneSpeed{dbl(s.value("total_ms", json())), dbl(s.value("probe_ms", json())),
                        dbl(s.value("decode_tps", json())), dbl(s.value("prefill_tps", json()))};
  }
  if (e.contains("precision") && e["precision"].is_object()) {
    const json& p = e["precision"];
    t.precision = TunePrecision{dbl(p.value("top1", json())), dbl(p.value("mean_kl", json())),
                                dbl(p.value("ppl_change", json())), p.value("passed", false),
                                p.value("failures", std::string())};
  }
  if (e.contains("verdict") && e["verdict"].is_string()) t.verdict = e["verdict"];
  t.accepted = e.value("accepted", false);
  return true;
}

void TuneCache::put(const std::string& key, const TuneTrial& t) {
  json e = trial_json(t);
  (*j_)[key] = {{"speed", e["speed"]}, {"precision", e["precision"]}, {"settings", t.settings},
                {"base", t.base},      {"verdict", t.verdict},        {"accepted", t.accepted}};
}

Status TuneCache::save() const {
  const json out{{"format", "rinfer tune trials 1"}, {"trials", *j_}};
  return write_file_atomically(path_, out.dump(1) + "\n");
}

std::string tune_markdown(const TuneSummary& s, const std::vector<TuneTrial>& trials) {
  std::string md = fmt::format(
      "# rinfer tune: {}\n\n{} on {}, git {}, {}. Start: `{}`; precision against `{}`. "
      "Objective: {}. {} trials measured or cached in {:.0f} s of a {:g}-minute budget{}; {} "
      "more settings ran as an earlier trial (the same kernels and settings) and were not "
      "measured again.\n\n",
      s.target, s.device, s.machine, s.git_sha, s.date, s.start, s.reference, s.objective,
      trials.size(), s.elapsed_s, s.budget_min,
      s.budget_reached ? " (reached: the search stopped)" : "", s.duplicates);
  md += fmt::format(
      "| # | over | change | verdict | {} | top-1 | mean KL | ppl change | cached "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n",
      s.serving ? "load ms | output tok/s | total tok/s"
                : "total ms | decode tok/s | prefill tok/s");
  const auto f = [](double v, const char* spec) {
    return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : std::string("-");
  };
  for (const TuneTrial& t : trials) {
    const std::string base = t.base.substr(t.base.find_last_of('/') + 1);
    md += fmt::format(
        "| {} | `{}` | {} | {}{} | {} | {} | {} | {} | {} | {} | {} |\n", t.id, base,
        t.change.empty() ? "-" : t.change, t.verdict, t.id == s.best ? " **(best)**" : "",
        t.speed ? f(t.speed->total_ms, "{:.1f}") : "-",
        t.speed ? f(t.speed->decode_tps, "{:.1f}") : "-",
        t.speed ? f(t.speed->prefill_tps, "{:.1f}") : "-",
        t.precision ? f(t.precision->top1, "{:.4f}") : "-",
        t.precision ? f(t.precision->mean_kl, "{:.4g}") : "-",
        t.precision ? f(100.0 * t.precision->ppl_change, "{:+.2f}%") : "-", t.cached ? "yes" : "");
  }
  return md;
}

json tune_json(const TuneSummary& s, const std::vector<TuneTrial>& trials) {
  json j{{"target", s.target},
         {"start", s.start},
         {"reference", s.reference},
         {"device", s.device},
         {"machine", s.machine},
         {"git_sha", s.git_sha},
         {"date", s.date},
         {"objective", s.objective},
         {"budget_min", s.budget_min},
         {"elapsed_s", s.elapsed_s},
         {"budget_reached", s.budget_reached},
         {"best", s.best},
         {"start_trial", s.start_id}};
  j["trials"] = json::array();
  for (const TuneTrial& t : trials) j["trials"].push_back(trial_json(t));
  return j;
}

std::string tune_svg(const TuneSummary& s, const std::vector<TuneTrial>& trials) {
  constexpr double W = 640, H = 400, L = 70, R = 20, T = 40, B = 50;
  double max_tps = 0, max_kl = 0;
  for (const TuneTrial& t : trials) {
    if (!t.speed || !t.precision) continue;
    if (std::isfinite(t.speed->decode_tps)) max_tps = std::max(max_tps, t.speed->decode_tps);
    if (std::isfinite(t.precision->mean_kl)) max_kl = std::max(max_kl, t.precision->mean_kl);
  }
  max_tps = max_tps > 0 ? max_tps * 1.1 : 1;
  max_kl = max_kl > 0 ? max_kl * 1.1 : 1;
  const auto x = [&](double kl) { return L + (W - L - R) * kl / max_kl; };
  const auto y = [&](double tps) { return H - B - (H - T - B) * tps / max_tps; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" "
      "fill=\"white\"/>\n<text x=\"{2}\" y=\"20\" font-size=\"14\">rinfer tune: {3} ({4})</text>\n"
      "<line x1=\"{2}\" y1=\"{5}\" x2=\"{6}\" y2=\"{5}\" stroke=\"black\"/>\n"
      "<line x1=\"{2}\" y1=\"{7}\" x2=\"{2}\" y2=\"{5}\" stroke=\"black\"/>\n"
      "<text x=\"{8}\" y=\"{9}\" text-anchor=\"middle\">mean KL to the reference (nats)</text>\n"
      "<text x=\"15\" y=\"{10}\" transform=\"rotate(-90 15 {10})\" text-anchor=\"middle\">{15} "
      "tokens/s</text>\n<text x=\"{2}\" y=\"{11}\" text-anchor=\"middle\">0</text>\n"
      "<text x=\"{6}\" y=\"{11}\" text-anchor=\"end\">{12:.3g}</text>\n"
      "<text x=\"{13}\" y=\"{7}\" text-anchor=\"end\">{14:.0f}</text>\n",
      W, H, L, xml(s.target), xml(s.device), H - B, W - R, T, (L + W - R) / 2, H - 10,
      (T + H - B) / 2, H - B + 16, max_kl, L - 6, max_tps, s.serving ? "output" : "decode");
  for (const TuneTrial& t : trials) {
    if (!t.speed || !t.precision || !std::isfinite(t.speed->decode_tps) ||
        !std::isfinite(t.precision->mean_kl)) {
      continue;
    }
    const char* fill = t.id == s.best ? "#1a7f37" : (t.precision->passed ? "#0969da" : "#cf222e");
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"><title>#{} {} ({})</title>"
        "</circle>\n<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\">{}</text>\n",
        x(t.precision->mean_kl), y(t.speed->decode_tps), t.id == s.best ? 7 : 4, fill, t.id,
        xml(t.change.empty() ? t.base : t.change), xml(t.verdict), x(t.precision->mean_kl) + 6,
        y(t.speed->decode_tps) - 4, t.id);
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\">green: best; blue: inside the "
      "precision gate; red: outside it</text>\n</svg>\n",
      L + 10, T + 12);
  return svg;
}

}  // namespace rinfer
