// A check of a JSON document against the Chrome trace event format (what chrome://tracing and
// ui.perfetto.dev load), for rinfer profile's --trace.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace rinfer::test {

// Checks `j` against the Chrome trace event format: an object whose traceEvents is an array of
// events with a string name, a known phase, integer pid and tid; complete events ("X") with
// ts >= 0 and dur >= 0; metadata events ("M") with args.name; and complete events of one thread
// that never partly overlap (each nests inside or follows the one before).
inline void expect_valid_trace(const nlohmann::json& j) {
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_TRUE(j["traceEvents"].is_array());
  const std::set<std::string> phases = {"B", "E", "X", "i", "I", "C", "M", "b", "e", "n"};
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> spans;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.is_object()) << e.dump();
    ASSERT_TRUE(e["name"].is_string()) << e.dump();
    ASSERT_TRUE(e["ph"].is_string()) << e.dump();
    const std::string ph = e["ph"];
    EXPECT_TRUE(phases.count(ph)) << e.dump();
    ASSERT_TRUE(e["pid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e["tid"].is_number_integer()) << e.dump();
    if (ph == "M") {
      EXPECT_TRUE(e["args"]["name"].is_string()) << e.dump();
    }
    if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number()) << e.dump();
      ASSERT_TRUE(e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["ts"].get<double>(), 0.0) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
      const double ts = e["ts"], dur = e["dur"];
      spans[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].push_back({ts, ts + dur});
    }
  }
  for (auto& [thread, v] : spans) {
    std::sort(v.begin(), v.end());
    std::vector<double> open_ends;  // the enclosing events' ends
    for (const auto& [b, e] : v) {
      while (!open_ends.empty() && open_ends.back() <= b) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(e, open_ends.back() + 1e-9) << "thread " << thread.second << ": [" << b << ", "
                                              << e << ") partly overlaps an event before it";
      }
      open_ends.push_back(e);
    }
  }
}

}  // namespace rinfer::test
