// The Prometheus text the server renders: counters, gauges, cumulative histogram buckets and
// escaped labels.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace rinfer::server {
namespace {

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, RendersEachKind) {
  Metrics m;
  m.counter("req_total", "Requests.");
  m.gauge("queue", "Queue depth.");
  m.histogram("lat_seconds", "Latency.", {0.5, 0.1, 1.0});  // sorted on declaration
  m.add("req_total", {{"status", "200"}});
  m.add("req_total", {{"status", "200"}}, 2);
  m.add("req_total", {{"status", "4\"0\\0\n"}});
  m.set("queue", {}, 7);
  m.set("queue", {}, 3);
  for (double v : {0.05, 0.1, 0.3, 0.7, 5.0}) m.observe("lat_seconds", {{"model", "a"}}, v);
  const std::string t = m.render();
  EXPECT_TRUE(has(t, "# TYPE req_total counter")) << t;
  EXPECT_TRUE(has(t, "req_total{status=\"200\"} 3")) << t;
  EXPECT_TRUE(has(t, "req_total{status=\"4\\\"0\\\\0\\n\"} 1")) << t;
  EXPECT_TRUE(has(t, "# TYPE queue gauge")) << t;
  EXPECT_TRUE(has(t, "queue 3")) << t;
  EXPECT_TRUE(has(t, "lat_seconds_bucket{model=\"a\",le=\"0.1\"} 2")) << t;  // le is inclusive
  EXPECT_TRUE(has(t, "lat_seconds_bucket{model=\"a\",le=\"0.5\"} 3")) << t;
  EXPECT_TRUE(has(t, "lat_seconds_bucket{model=\"a\",le=\"1\"} 4")) << t;
  EXPECT_TRUE(has(t, "lat_seconds_bucket{model=\"a\",le=\"+Inf\"} 5")) << t;
  EXPECT_TRUE(has(t, "lat_seconds_count{model=\"a\"} 5")) << t;
  EXPECT_TRUE(has(t, "lat_seconds_sum{model=\"a\"} 6.15")) << t;
  EXPECT_DOUBLE_EQ(m.value("req_total", {{"status", "200"}}), 3);
  EXPECT_DOUBLE_EQ(m.value("req_total", {{"status", "500"}}), 0);
}

TEST(MetricsTest, AnUndeclaredFamilyIsAnError) {
  Metrics m;
  m.gauge("g", "A gauge.");
  EXPECT_THROW(m.add("g", {}), std::logic_error);  // a gauge is not a counter
  EXPECT_THROW(m.set("nope", {}, 1), std::logic_error);
}

}  // namespace
}  // namespace rinfer::server
