// What rinfer profile makes of the per-op records of a run (models/op_profile.h): the passes
// grouped into phases (prefill, decode, batched decode), each phase's time by op and by layer,
// its hotspots, each op's bytes and FLOPs against the measured ceilings (tools/ceilings.h: the
// roofline), the share of the passes' wall time its ops cover, and the run as a Chrome /
// Perfetto trace.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "models/op_profile.h"
#include "tools/ceilings.h"

namespace rinfer {

// Collects a run's records; each pass owns the ops recorded since the pass before it.
class ProfileRecorder final : public OpProfileSink {
 public:
  struct Pass {
    PassRecord rec;
    size_t op_begin = 0, op_end = 0;  // its ops: ops()[op_begin, op_end)
    int64_t overhead_ns = 0;          // the profiler's own time inside it
    // The pass's wall time without the profiler's own.
    int64_t wall_ns() const { return rec.end_ns - rec.begin_ns - overhead_ns; }
  };
  void record_op(const OpRecord& r) override { ops_.push_back(r); }
  void record_overhead(int64_t ns) override { overhead_ns_ += ns; }
  void record_pass(const PassRecord& r) override {
    passes_.push_back({r, first_unowned_, ops_.size(), overhead_ns_});
    first_unowned_ = ops_.size();
    overhead_ns_ = 0;
  }
  const std::vector<OpRecord>& ops() const { return ops_; }
  const std::vector<Pass>& passes() const { return passes_; }
  void clear() {
    ops_.clear();
    passes_.clear();
    first_unowned_ = 0;
    overhead_ns_ = 0;
  }

 private:
  std::vector<OpRecord> ops_;
  std::vector<Pass> passes_;
  size_t first_unowned_ = 0;
  int64_t overhead_ns_ = 0;
};

// "prefill" (a sequence of several rows in the pass), "decode" (one sequence, one row) or
// "batch decode" (several sequences, a row each).
std::string pass_phase(const PassRecord& p);

// Time and work of one op name (or one (op, layer) pair), summed over a phase's passes.
struct OpTotal {
  std::string op;
  int32_t layer = -1;  // -1 in by_op rows (every layer)
  int64_t count = 0;
  double ms = 0;     // summed
  double bytes = 0;  // summed
  double flops = 0;  // summed
  // The roofline: achieved rates, which ceiling bounds the op (the larger of bytes / bandwidth
  // and FLOPs / peak) and the percent of that ceiling reached.
  double gbs = 0, tflops = 0;
  bool compute_bound = false;
  double pct_of_bound = 0;
};

// "compute", "memory", or "cache": memory-bound yet past the measured bandwidth (its bytes came
// from a cache, not from memory; the ceiling does not apply).
const char* bound_name(const OpTotal& t);

struct PhaseProfile {
  std::string phase;
  int64_t passes = 0;
  int64_t rows = 0;               // tokens of one pass (the median pass)
  double pass_ms = 0;             // the passes' wall times (less the profiler's own), median
  double ops_ms = 0;              // the sum of one pass's op times, median
  double profiler_ms = 0;         // the profiler's own time in a pass, median
  double coverage = 0;            // sum of every pass's op times / sum of their wall times
  std::vector<OpTotal> by_op;     // by time, largest first
  std::vector<double> layer_ms;   // [n_layer] per pass, mean
  std::vector<OpTotal> hotspots;  // (op, layer) pairs by time, largest first
};

std::vector<PhaseProfile> summarize_profile(const ProfileRecorder& rec, int64_t n_layer,
                                            const Ceilings& ceilings, size_t n_hotspots = 10);

// The Chrome trace event format (what chrome://tracing and ui.perfetto.dev load): a
// {"traceEvents": [...]} object with a complete event ("ph": "X", ts and dur in microseconds
// from the first record) per pass on thread 1 and per op on thread 2 of process 1, and metadata
// events naming them. Ops carry their layer, bytes and FLOPs in "args".
nlohmann::json chrome_trace(const ProfileRecorder& rec, const std::string& process_name);

// The summary as JSON (the phases, their rows and the ceilings).
nlohmann::json profile_json(const std::vector<PhaseProfile>& phases, const Ceilings& ceilings);

}  // namespace rinfer
