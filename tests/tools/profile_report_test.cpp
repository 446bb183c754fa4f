// rinfer profile's arithmetic on synthetic records (tools/profile_report.h): the phases, the
// sums by op and by layer, the roofline placement against scalar formulas, the coverage, the
// hotspots, and the Chrome trace checked against the trace event format; the cost formulas of
// models/op_profile.h against counts done by hand.
#include "tools/profile_report.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/op_profile.h"
#include "trace_format.h"

namespace rinfer {
namespace {

constexpr int64_t kMs = 1'000'000;  // ns

// One pass of `ops` (name, layer, ms, bytes, flops) back to back from `t0`, its wall time the
// ops' sum plus `gap_ms`.
struct Op {
  const char* name;
  int32_t layer;
  double ms, bytes, flops;
};
int64_t add_pass(ProfileRecorder& rec, int64_t t0, int64_t rows, int32_t seqs,
                 const std::vector<Op>& ops, double gap_ms) {
  int64_t t = t0;
  for (const Op& o : ops) {
    const int64_t d = static_cast<int64_t>(o.ms * kMs);
    rec.record_op({o.name, o.layer, t, t + d, {o.bytes, o.flops}});
    t += d;
  }
  t += static_cast<int64_t>(gap_ms * kMs);
  rec.record_pass({t0, t, rows, seqs, seqs});
  return t;
}

TEST(ProfileReport, PhasesOpsLayersAndTheRoofline) {
  ProfileRecorder rec;
  // A prefill of 7 rows and three decode steps, two layers each; 1 ms of host work a pass.
  int64_t t = 1000 * kMs;
  t = add_pass(rec, t, 7, 1,
               {{"embed", -1, 0.5, 1e6, 0},
                {"qkv", 0, 4.0, 4e8, 8e11},
                {"attention", 0, 2.0, 1e8, 1e9},
                {"qkv", 1, 6.0, 4e8, 8e11},
                {"attention", 1, 2.0, 1e8, 1e9},
                {"logits", 2, 1.5, 3e8, 2e9}},
               1.0);
  for (int i = 0; i < 3; ++i) {
    t = add_pass(
        rec, t + kMs, 1, 1,
        {{"qkv", 0, 1.0 + i, 4e8, 1e9}, {"qkv", 1, 1.0, 4e8, 1e9}, {"logits", 2, 0.5, 3e8, 1e8}},
        1.0);
  }
  Ceilings c;
  c.bandwidth_gbs = 500;  // 2 ms per GB
  c.peak_tflops = 400;    // 2.5 ms per TFLOP
  const auto phases = summarize_profile(rec, 2, c, 3);
  ASSERT_EQ(phases.size(), 2u);
  const PhaseProfile& pre = phases[0];
  EXPECT_EQ(pre.phase, "prefill");
  EXPECT_EQ(pre.passes, 1);
  EXPECT_EQ(pre.rows, 7);
  EXPECT_NEAR(pre.ops_ms, 16.0, 1e-6);
  EXPECT_NEAR(pre.pass_ms, 17.0, 1e-6);
  EXPECT_NEAR(pre.coverage, 16.0 / 17.0, 1e-9);
  ASSERT_EQ(pre.layer_ms.size(), 2u);
  EXPECT_NEAR(pre.layer_ms[0], 6.0, 1e-6);
  EXPECT_NEAR(pre.layer_ms[1], 8.0, 1e-6);
  ASSERT_EQ(pre.by_op.size(), 4u);
  EXPECT_EQ(pre.by_op[0].op, "qkv");  // by time
  EXPECT_EQ(pre.by_op[0].count, 2);
  EXPECT_NEAR(pre.by_op[0].ms, 10.0, 1e-6);
  // qkv: 8e8 bytes and 1.6e12 FLOPs in 10 ms: 80 GB/s, 160 TFLOP/s; the bound is the larger of
  // 1.6 ms (memory) and 4 ms (compute): 40% of it.
  EXPECT_NEAR(pre.by_op[0].gbs, 80.0, 1e-6);
  EXPECT_NEAR(pre.by_op[0].tflops, 160.0, 1e-6);
  EXPECT_TRUE(pre.by_op[0].compute_bound);
  EXPECT_STREQ(bound_name(pre.by_op[0]), "compute");
  EXPECT_NEAR(pre.by_op[0].pct_of_bound, 40.0, 1e-6);
  // attention: 2e8 bytes (0.4 ms at the bandwidth) and 2e9 FLOPs in 4 ms: memory, 10%.
  EXPECT_EQ(pre.by_op[1].op, "attention");
  EXPECT_FALSE(pre.by_op[1].compute_bound);
  EXPECT_NEAR(pre.by_op[1].pct_of_bound, 10.0, 1e-6);
  EXPECT_STREQ(bound_name(pre.by_op[1]), "memory");
  ASSERT_EQ(pre.hotspots.size(), 3u);
  EXPECT_EQ(pre.hotspots[0].op, "qkv");
  EXPECT_EQ(pre.hotspots[0].layer, 1);
  EXPECT_EQ(pre.hotspots[1].layer, 0);

  const PhaseProfile& dec = phases[1];
  EXPECT_EQ(dec.phase, "decode");
  EXPECT_EQ(dec.passes, 3);
  EXPECT_EQ(dec.rows, 1);
  EXPECT_NEAR(dec.ops_ms, 3.5, 1e-6);  // the median of 2.5, 3.5, 4.5
  EXPECT_NEAR(dec.pass_ms, 4.5, 1e-6);
  EXPECT_NEAR(dec.coverage, 10.5 / 13.5, 1e-9);
  EXPECT_NEAR(dec.layer_ms[0], 2.0, 1e-6);  // mean per pass
  EXPECT_NEAR(dec.layer_ms[1], 1.0, 1e-6);
  // logits: 9e8 bytes in 1.5 ms = 600 GB/s, past the 500 measured: from a cache.
  const auto logits = std::find_if(dec.by_op.begin(), dec.by_op.end(),
                                   [](const OpTotal& o) { return o.op == "logits"; });
  ASSERT_NE(logits, dec.by_op.end());
  EXPECT_NEAR(logits->gbs, 600.0, 1e-6);
  EXPECT_NEAR(logits->pct_of_bound, 120.0, 1e-6);
  EXPECT_STREQ(bound_name(*logits), "cache");

  const nlohmann::json j = profile_json(phases, c);
  ASSERT_EQ(j["phases"].size(), 2u);
  EXPECT_EQ(j["phases"][0]["by_op"][0]["op"], "qkv");
  EXPECT_EQ(j["phases"][1]["by_op"].size(), 2u);
  EXPECT_EQ(j["ceilings"]["bandwidth_gbs"], 500.0);
}

TEST(ProfileReport, BatchedDecodeIsItsOwnPhase) {
  ProfileRecorder rec;
  add_pass(rec, kMs, 4, 4, {{"qkv", 0, 1.0, 1, 1}}, 0.5);  // four sequences, a row each
  // Two sequences, 3 rows each; the profiler spent 0.25 ms of the pass's 1.5 on itself.
  rec.record_overhead(kMs / 4);
  add_pass(rec, 10 * kMs, 6, 2, {{"qkv", 0, 1.0, 1, 1}}, 0.5);
  EXPECT_EQ(pass_phase(rec.passes()[0].rec), "batch decode");
  EXPECT_EQ(pass_phase(rec.passes()[1].rec), "prefill");
  const auto phases = summarize_profile(rec, 1, Ceilings{});
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].phase, "prefill");
  EXPECT_EQ(phases[1].phase, "batch decode");
  EXPECT_NEAR(phases[0].pass_ms, 1.25, 1e-9);
  EXPECT_NEAR(phases[0].profiler_ms, 0.25, 1e-9);
  EXPECT_NEAR(phases[0].coverage, 1.0 / 1.25, 1e-9);
  EXPECT_NEAR(phases[1].pass_ms, 1.5, 1e-9);  // its own overhead is none
  EXPECT_EQ(phases[1].profiler_ms, 0.0);
  // Without ceilings the rates are still measured, the bound is not.
  EXPECT_NEAR(phases[1].by_op[0].gbs, 1e-6, 1e-12);
  EXPECT_EQ(phases[1].by_op[0].pct_of_bound, 0.0);
}

TEST(ProfileReport, TheTraceFollowsTheTraceEventFormat) {
  ProfileRecorder rec;
  int64_t t = 5 * kMs;
  t = add_pass(rec, t, 3, 1, {{"norm", 0, 0.25, 10, 10}, {"qkv", 0, 0.5, 10, 10}}, 0.1);
  // Events a clock tick apart: an op that starts before the last one ended.
  rec.record_op({"norm", 0, t + 100, t + 400, {}});
  rec.record_op({"qkv", 0, t + 399, t + 900, {}});
  rec.record_pass({t, t + 1000, 1, 1, 1});
  const nlohmann::json j = chrome_trace(rec, "rinfer profile test");
  test::expect_valid_trace(j);
  int passes = 0, ops = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["tid"] == 1) ++passes;
    if (e["tid"] == 2) {
      ++ops;
      EXPECT_TRUE(e["args"]["layer"].is_number_integer());
      EXPECT_TRUE(e["args"]["bytes"].is_number());
    }
  }
  EXPECT_EQ(passes, 2);
  EXPECT_EQ(ops, 4);
  // The first event starts at 0 and a pass's duration is its wall time in microseconds.
  double first = 1e30;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") first = std::min(first, e["ts"].get<double>());
  }
  EXPECT_EQ(first, 0.0);
}

TEST(ProfileReport, TheValidatorCatchesAPartialOverlap) {
  static const nlohmann::json bad = {
      {"traceEvents",
       {{{"name", "a"}, {"ph", "X"}, {"pid", 1}, {"tid", 2}, {"ts", 0}, {"dur", 10}},
        {{"name", "b"}, {"ph", "X"}, {"pid", 1}, {"tid", 2}, {"ts", 5}, {"dur", 10}}}}};
  EXPECT_NONFATAL_FAILURE(test::expect_valid_trace(bad), "partly overlaps");
}

TEST(OpCosts, MatchCountsByHand) {
  // y[3, 5] = x[3, 4] W^T with a 40-byte weight, bf16 in, f32 out.
  const OpCost m = matmul_cost(3, 4, 5, 40, 2, 4);
  EXPECT_EQ(m.bytes, 40 + 3 * 4 * 2 + 3 * 5 * 4);
  EXPECT_EQ(m.flops, 2 * 3 * 4 * 5);
  const OpCost s = stream_cost(10, 7, 4, 3);
  EXPECT_EQ(s.bytes, 17 * 4);
  EXPECT_EQ(s.flops, 30);
  // Causal: 3 new rows after 4 cached see 5, 6, 7 positions; 2 heads over 1 KV head of dim 8.
  const AttentionSeqShape a[] = {{3, 7}, {1, 9}};
  const OpCost c = attention_cost(a, 2, 1, 8, true, 0, 2, 2);
  EXPECT_EQ(c.flops, 4.0 * (5 + 6 + 7 + 9) * 2 * 8);
  EXPECT_EQ(c.bytes, (7 + 9) * 2.0 * 1 * 8 * 2 + (3 + 1) * 2.0 * 2 * 8 * 2);
  // A window of 4: the rows see 4 each; of the first sequence's 7 rows, 6 are reached.
  const OpCost w = attention_cost(a, 2, 1, 8, true, 4, 2, 2);
  EXPECT_EQ(w.flops, 4.0 * (4 + 4 + 4 + 4) * 2 * 8);
  EXPECT_EQ(w.bytes, (6 + 4) * 2.0 * 1 * 8 * 2 + (3 + 1) * 2.0 * 2 * 8 * 2);
}

}  // namespace
}  // namespace rinfer
