// The server's metrics in the Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms with labels, thread-safe, rendered by GET /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rinfer::server {

// Label pairs in a fixed order: {{"model", "smollm2"}, {"status", "200"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  // Families are declared once, before use; `buckets` (upper bounds, ascending) for a histogram.
  void counter(std::string name, std::string help);
  void gauge(std::string name, std::string help);
  void histogram(std::string name, std::string help, std::vector<double> buckets);

  void add(std::string_view name, const Labels& labels, double v = 1.0);  // counter
  void set(std::string_view name, const Labels& labels, double v);        // gauge
  void observe(std::string_view name, const Labels& labels, double v);    // histogram
  // The value of a counter or gauge series (0 when absent): for tests and the loadgen.
  double value(std::string_view name, const Labels& labels) const;

  std::string render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;              // counter, gauge
    std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // by rendered label set
  };
  Series& series(std::string_view name, const Labels& labels, Kind kind);

  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
};

// Label values escaped for the exposition format (backslash, double quote, newline).
std::string render_labels(const Labels& labels);

}  // namespace rinfer::server
