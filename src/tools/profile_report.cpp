#include "tools/profile_report.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "tools/bench_report.h"

namespace rinfer {

namespace {

double ms_of(int64_t ns) { return static_cast<double>(ns) * 1e-6; }

void place_on_roofline(OpTotal& t, const Ceilings& c) {
  const double s = t.ms * 1e-3;
  if (s <= 0) return;
  t.gbs = t.bytes / s / 1e9;
  t.tflops = t.flops / s / 1e12;
  const double t_mem = c.bandwidth_gbs > 0 ? t.bytes / (c.bandwidth_gbs * 1e9) : 0;
  const double t_math = c.peak_tflops > 0 ? t.flops / (c.peak_tflops * 1e12) : 0;
  t.compute_bound = t_math > t_mem;
  const double bound_s = std::max(t_mem, t_math);
  t.pct_of_bound = 100.0 * bound_s / s;
}

std::vector<OpTotal> sorted_totals(std::map<std::pair<std::string, int32_t>, OpTotal>& m,
                                   const Ceilings& c) {
  std::vector<OpTotal> out;
  for (auto& [key, t] : m) {
    place_on_roofline(t, c);
    out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpTotal& a, const OpTotal& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace

const char* bound_name(const OpTotal& t) {
  if (t.compute_bound) return "compute";
  return t.pct_of_bound > 100.0 ? "cache" : "memory";
}

std::string pass_phase(const PassRecord& p) {
  if (p.n_tokens > p.n_seq) return "prefill";
  return p.n_seq > 1 ? "batch decode" : "decode";
}

std::vector<PhaseProfile> summarize_profile(const ProfileRecorder& rec, int64_t n_layer,
                                            const Ceilings& ceilings, size_t n_hotspots) {
  std::vector<PhaseProfile> out;
  for (const char* phase : {"prefill", "decode", "batch decode"}) {
    PhaseProfile p;
    p.phase = phase;
    std::map<std::pair<std::string, int32_t>, OpTotal> by_op, by_pair;
    std::vector<double> pass_ms, ops_ms, rows, profiler_ms;
    double wall_sum = 0, ops_sum = 0;
    p.layer_ms.assign(static_cast<size_t>(std::max<int64_t>(n_layer, 0)), 0.0);
    for (const ProfileRecorder::Pass& pass : rec.passes()) {
      if (pass_phase(pass.rec) != phase) continue;
      ++p.passes;
      const double wall = ms_of(pass.wall_ns());
      double sum = 0;
      for (size_t i = pass.op_begin; i < pass.op_end; ++i) {
        const OpRecord& r = rec.ops()[i];
        const double ms = ms_of(r.end_ns - r.begin_ns);
        sum += ms;
        for (auto* m : {&by_op, &by_pair}) {
          OpTotal& t = (*m)[{std::string(r.op), m == &by_op ? -1 : r.layer}];
          t.op = r.op;
          t.layer = m == &by_op ? -1 : r.layer;
          ++t.count;
          t.ms += ms;
          t.bytes += r.cost.bytes;
          t.flops += r.cost.flops;
        }
        if (r.layer >= 0 && r.layer < n_layer) p.layer_ms[static_cast<size_t>(r.layer)] += ms;
      }
      pass_ms.push_back(wall);
      profiler_ms.push_back(ms_of(pass.overhead_ns));
      ops_ms.push_back(sum);
      rows.push_back(static_cast<double>(pass.rec.n_tokens));
      wall_sum += wall;
      ops_sum += sum;
    }
    if (p.passes == 0) continue;
    p.pass_ms = bench::median(pass_ms);
    p.ops_ms = bench::median(ops_ms);
    p.profiler_ms = bench::median(profiler_ms);
    p.rows = static_cast<int64_t>(bench::median(rows));
    p.coverage = wall_sum > 0 ? ops_sum / wall_sum : 0;
    for (double& l : p.layer_ms) l /= static_cast<double>(p.passes);
    p.by_op = sorted_totals(by_op, ceilings);
    p.hotspots = sorted_totals(by_pair, ceilings);
    if (p.hotspots.size() > n_hotspots) p.hotspots.resize(n_hotspots);
    out.push_back(std::move(p));
  }
  return out;
}

nlohmann::json chrome_trace(const ProfileRecorder& rec, const std::string& process_name) {
  using nlohmann::json;
  int64_t t0 = 0;
  bool any = false;
  for (const auto& p : rec.passes()) {
    t0 = any ? std::min(t0, p.rec.begin_ns) : p.rec.begin_ns;
    any = true;
  }
  for (const OpRecord& r : rec.ops()) {
    t0 = any ? std::min(t0, r.begin_ns) : r.begin_ns;
    any = true;
  }
  const auto us = [t0](int64_t ns) { return static_cast<double>(ns - t0) * 1e-3; };
  json ev = json::array();
  ev.push_back({{"name", "process_name"},
                {"ph", "M"},
                {"pid", 1},
                {"tid", 1},
                {"args", {{"name", process_name}}}});
  ev.push_back({{"name", "thread_name"},
                {"ph", "M"},
                {"pid", 1},
                {"tid", 1},
                {"args", {{"name", "passes"}}}});
  ev.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2}, {"args", {{"name", "ops"}}}});
  for (const auto& p : rec.passes()) {
    ev.push_back({{"name", pass_phase(p.rec) + " " + std::to_string(p.rec.n_tokens)},
                  {"cat", "pass"},
                  {"ph", "X"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", us(p.rec.begin_ns)},
                  {"dur", us(p.rec.end_ns) - us(p.rec.begin_ns)},
                  {"args",
                   {{"tokens", p.rec.n_tokens},
                    {"sequences", p.rec.n_seq},
                    {"profiler_us", static_cast<double>(p.overhead_ns) * 1e-3},
                    {"logit_rows", p.rec.n_logits}}}});
  }
  // Ops never overlap on their thread: an op that starts before the previous one ends (events
  // a clock tick apart) starts where it ended.
  double last_end = 0;
  for (const OpRecord& r : rec.ops()) {
    const double b = std::max(us(r.begin_ns), last_end);
    const double e = std::max(us(r.end_ns), b);
    last_end = e;
    ev.push_back(
        {{"name", std::string(r.op)},
         {"cat", "op"},
         {"ph", "X"},
         {"pid", 1},
         {"tid", 2},
         {"ts", b},
         {"dur", e - b},
         {"args", {{"layer", r.layer}, {"bytes", r.cost.bytes}, {"flops", r.cost.flops}}}});
  }
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
}

nlohmann::json profile_json(const std::vector<PhaseProfile>& phases, const Ceilings& ceilings) {
  using nlohmann::json;
  const auto row = [](const OpTotal& t) {
    return json{{"op", t.op},
                {"layer", t.layer},
                {"count", t.count},
                {"ms", t.ms},
                {"bytes", t.bytes},
                {"flops", t.flops},
                {"gbs", t.gbs},
                {"tflops", t.tflops},
                {"bound", bound_name(t)},
                {"pct_of_bound", t.pct_of_bound}};
  };
  json j;
  j["ceilings"] = {{"bandwidth_gbs", ceilings.bandwidth_gbs},
                   {"bandwidth_how", ceilings.bandwidth_how},
                   {"peak_tflops", ceilings.peak_tflops},
                   {"peak_how", ceilings.peak_how}};
  j["phases"] = json::array();
  for (const PhaseProfile& p : phases) {
    json jp{{"phase", p.phase},       {"passes", p.passes},    {"rows", p.rows},
            {"pass_ms", p.pass_ms},   {"ops_ms", p.ops_ms},    {"profiler_ms", p.profiler_ms},
            {"coverage", p.coverage}, {"layer_ms", p.layer_ms}};
    jp["by_op"] = json::array();
    for (const OpTotal& t : p.by_op) jp["by_op"].push_back(row(t));
    jp["hotspots"] = json::array();
    for (const OpTotal& t : p.hotspots) jp["hotspots"].push_back(row(t));
    j["phases"].push_back(std::move(jp));
  }
  return j;
}

}  // namespace rinfer
