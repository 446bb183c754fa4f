#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace rinfer::server {

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return {};
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  out += '}';
  return out;
}

namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

// `{a="b"}` + le="x" -> `{a="b",le="x"}`.
std::string with_le(const std::string& labels, const std::string& le) {
  if (labels.empty()) return fmt::format("{{le=\"{}\"}}", le);
  return fmt::format("{},le=\"{}\"}}", labels.substr(0, labels.size() - 1), le);
}

}  // namespace

void Metrics::counter(std::string name, std::string help) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[std::move(name)] = Family{Kind::kCounter, std::move(help), {}, {}};
}

void Metrics::gauge(std::string name, std::string help) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[std::move(name)] = Family{Kind::kGauge, std::move(help), {}, {}};
}

void Metrics::histogram(std::string name, std::string help, std::vector<double> buckets) {
  std::sort(buckets.begin(), buckets.end());
  std::lock_guard<std::mutex> lock(mu_);
  families_[std::move(name)] = Family{Kind::kHistogram, std::move(help), std::move(buckets), {}};
}

Metrics::Series& Metrics::series(std::string_view name, const Labels& labels, Kind kind) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.kind != kind) {
    throw std::logic_error(fmt::format("metric {} is not declared as used", name));
  }
  Series& s = it->second.series[render_labels(labels)];
  if (kind == Kind::kHistogram && s.counts.empty())
    s.counts.assign(it->second.buckets.size() + 1, 0);
  return s;
}

void Metrics::add(std::string_view name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  series(name, labels, Kind::kCounter).value += v;
}

void Metrics::set(std::string_view name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  series(name, labels, Kind::kGauge).value = v;
}

void Metrics::observe(std::string_view name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, labels, Kind::kHistogram);
  const std::vector<double>& b = families_.find(name)->second.buckets;
  const size_t i = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
  ++s.counts[i];
  s.sum += v;
  ++s.count;
}

double Metrics::value(std::string_view name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(render_labels(labels));
  return s == it->second.series.end() ? 0 : s->second.value;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, s] : f.series) {
      if (f.kind != Kind::kHistogram) {
        out += fmt::format("{}{} {}\n", name, labels, number(s.value));
        continue;
      }
      uint64_t cum = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cum += s.counts[i];
        out += fmt::format("{}_bucket{} {}\n", name, with_le(labels, number(f.buckets[i])), cum);
      }
      cum += s.counts.back();
      out += fmt::format("{}_bucket{} {}\n", name, with_le(labels, "+Inf"), cum);
      out += fmt::format("{}_sum{} {}\n", name, labels, number(s.sum));
      out += fmt::format("{}_count{} {}\n", name, labels, s.count);
    }
  }
  return out;
}

}  // namespace rinfer::server
