// Drives an engine core through a serving load (tools/serve_load.h: its jobs), in process: what
// rinfer bench-serve measures and rinfer tune times for serving recipes. Requests of random ids,
// greedy, end-of-generation ignored, kept at a fixed concurrency (a new one as each finishes) or
// sent at their Poisson arrival times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "rinfer/status.h"
#include "tools/serve_load.h"

namespace rinfer {

// One request's times (seconds from the load's start) and tokens.
struct LoadDone {
  double submit_s = 0, first_s = 0, finish_s = 0;
  int64_t input = 0, output = 0, cached = 0;
};

struct LoadOutcome {
  std::vector<LoadDone> done;  // in the jobs' order
  double wall_s = 0;
  double kv_used_mean = 0, kv_used_peak = 0;
  kv::KvUsage kv;
  int64_t preemptions = 0;
  int64_t steps = 0;
  double forward_s = 0;  // inside the runner's passes (device work and its wait)
  int64_t kv_grows = 0;  // prealloc auto: times the pool grew
  uint64_t kv_bytes = 0;
  int64_t failed = 0;
  std::string first_error;
};

// rate > 0: each job is sent at its arrival time; else `concurrency` requests are kept in
// flight. `label` names the progress bar ("" for none). Errors: a request the core refuses, a
// failed step.
Result<LoadOutcome> drive_load(EngineCore& core, const std::vector<LoadJob>& jobs, double rate,
                               int64_t concurrency, const std::string& label);

struct LoadSummary {
  double out_tps = 0, total_tps = 0;  // every output (and input) token over the wall time
  double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0;  // ms
};
LoadSummary summarize_load(const LoadOutcome& o);

}  // namespace rinfer
