#include "tools/serve_drive.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "core/progress.h"

namespace rinfer {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Result<LoadOutcome> drive_load(EngineCore& core, const std::vector<LoadJob>& jobs, double rate,
                               int64_t concurrency, const std::string& label) {
  LoadOutcome o;
  o.done.resize(jobs.size());
  const auto t0 = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t next = 0, finished = 0;
  int64_t in_flight = 0, out_tokens = 0;
  std::optional<Progress> bar;
  if (!label.empty()) bar.emplace(label, static_cast<int64_t>(jobs.size()), "request");
  auto submit = [&](size_t i) -> Status {
    RequestParams p;
    p.prompt = jobs[i].prompt;
    p.max_tokens = jobs[i].output;
    p.ignore_eos = true;
    p.sampling.temperature = 0.0f;
    p.sampling.repeat_penalty = 1.0f;
    p.sampling.repeat_last_n = 0;
    o.done[i].submit_s = now_s();
    o.done[i].input = static_cast<int64_t>(jobs[i].prompt.size());
    p.on_event = [&, i](const RequestEvent& ev) {
      LoadDone& d = o.done[i];
      if (!ev.tokens.empty()) {
        if (d.output == 0) d.first_s = now_s();
        d.output += static_cast<int64_t>(ev.tokens.size());
        out_tokens += static_cast<int64_t>(ev.tokens.size());
      }
      if (ev.finish != FinishReason::kNone) {
        d.finish_s = now_s();
        d.cached = ev.stats->cached_tokens;
        if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kAborted) {
          ++o.failed;
          if (o.first_error.empty()) o.first_error = ev.error.to_string();
        }
        ++finished;
        --in_flight;
      }
    };
    RINFER_RETURN_IF_ERROR(core.submit(std::move(p)).status());
    ++in_flight;
    return ok_status();
  };
  double used_sum = 0;
  while (finished < jobs.size()) {
    if (rate > 0) {
      while (next < jobs.size() && jobs[next].arrival_s <= now_s())
        RINFER_RETURN_IF_ERROR(submit(next++));
      if (in_flight == 0 && next < jobs.size()) {
        std::this_thread::sleep_for(
            std::chrono::duration<double>(std::max(0.0, jobs[next].arrival_s - now_s())));
        continue;
      }
    } else {
      while (next < jobs.size() && in_flight < concurrency) RINFER_RETURN_IF_ERROR(submit(next++));
    }
    RINFER_ASSIGN_OR_RETURN(const StepStats st, core.step());
    if (st.n_seqs > 0) {
      const double used = core.kv_manager().usage().used_fraction();
      used_sum += used;
      o.kv_used_peak = std::max(o.kv_used_peak, used);
      o.forward_s += st.forward_ms / 1000.0;
      ++o.steps;
    }
    if (bar) {
      bar->update(static_cast<int64_t>(finished),
                  fmt::format("{:.0f} out tok/s", static_cast<double>(out_tokens) / now_s()));
    }
  }
  if (bar) bar->finish();
  o.wall_s = now_s();
  o.kv_used_mean = o.steps > 0 ? used_sum / static_cast<double>(o.steps) : 0;
  const EngineStats es = core.stats();
  o.kv = es.kv;
  o.preemptions = es.preemptions;
  o.kv_grows = es.kv_grows;
  o.kv_bytes = core.kv_arena().bytes();  // after any growth (kv_cache.prealloc auto)
  return o;
}

LoadSummary summarize_load(const LoadOutcome& o) {
  LoadSummary s;
  int64_t out = 0, in = 0;
  std::vector<double> ttft, tpot;
  for (const LoadDone& d : o.done) {
    out += d.output;
    in += d.input;
    if (d.output > 0) ttft.push_back(1e3 * (d.first_s - d.submit_s));
    if (d.output > 1)
      tpot.push_back(1e3 * (d.finish_s - d.first_s) / static_cast<double>(d.output - 1));
  }
  s.out_tps = static_cast<double>(out) / o.wall_s;
  s.total_tps = static_cast<double>(out + in) / o.wall_s;
  s.ttft_p50 = percentile(ttft, 0.5);
  s.ttft_p99 = percentile(ttft, 0.99);
  s.tpot_p50 = percentile(tpot, 0.5);
  s.tpot_p99 = percentile(tpot, 0.99);
  return s;
}

}  // namespace rinfer
