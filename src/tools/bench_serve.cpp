// `rinfer bench-serve RECIPE [--requests N] [--input-len N] [--output-len N] [--mix fixed |
//  long-tail] [--concurrency N | --rate R] [--seed S] [--no-baseline] [--json FILE]`
//
// An offline serving load through the engine core: N requests of random token ids with fixed
// input and output lengths (or a long-tailed mix around them), end-of-generation ignored, kept
// at a fixed concurrency (a new request as each one finishes) or arriving as a Poisson process
// of R requests per second. Measured for the recipe as it is and, in the same run, for the
// baseline (static batching over a contiguous KV cache, same seats): output tok/s (every output
// token over the whole run's time), total tok/s (input + output), time to first token and time
// per output token (p50, p99), KV block use, prefix-cache hit rate and preemptions. Prints a
// table and writes JSON (git sha, date, machine, device, every request's figures); with
// --readme the table goes between the README's bench markers for this machine.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"
#include "core/progress.h"
#include "engine/engine_core.h"
#include "engine/llm_engine.h"
#include "engine/strategy_options.h"
#include "recipe/recipe.h"
#include "strategies/registry.h"
#include "tools/bench_report.h"
#include "tools/output.h"
#include "tools/serve_drive.h"
#include "tools/serve_load.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct ServeArgs {
  std::string recipe;
  int64_t requests = 64;
  int64_t input_len = 128;
  int64_t output_len = 128;
  std::string mix = "fixed";
  int64_t shared_prefix = 0;  // the first tokens of every prompt are the same (a system prompt)
  int64_t concurrency = 0;    // 0: the recipe's seats
  double rate = 0;            // > 0: Poisson arrivals instead of a fixed concurrency
  uint64_t seed = 1;
  bool no_baseline = false;
  int64_t max_seqs = 0;            // > 0: overrides batching.max_seqs
  int64_t max_batched_tokens = 0;  // > 0: overrides batching.max_batched_tokens
  std::string json;
  std::string readme;  // a README.md whose bench block for this machine gets the table
};

// The model of the load, loaded as `rinfer run` loads it (a file, or `model:
// random:<shape>:<dtype>`: random weights of a shape of models/llama/shapes.h); the runs below
// build their own engine cores over it.
struct ServedModel {
  std::unique_ptr<LlmEngine> engine;
  DecoderModel* model = nullptr;
  std::string name;
};

Result<ServedModel> load_served(const RecipeConfig& r) {
  ServedModel m;
  LlmEngineOptions eo;
  eo.model_only = true;
  RINFER_ASSIGN_OR_RETURN(m.engine, LlmEngine::create(r, eo));
  m.model = &m.engine->decoder();
  m.name = m.engine->model_path();
  return m;
}

LoadSpec load_spec(const ServeArgs& a) {
  return LoadSpec{a.requests, a.input_len, a.output_len, a.mix, a.shared_prefix, a.rate, a.seed};
}

ordered_json outcome_json(const std::string& name, const EngineCoreOptions& opts,
                          const LoadOutcome& o) {
  const LoadSummary s = summarize_load(o);
  ordered_json j;
  j["variant"] = name;
  j["policy"] = batching_policy_name(opts.scheduler.policy);
  j["layout"] = kv::layout_name(opts.layout);
  j["seats"] = opts.scheduler.max_seqs;
  j["max_batched_tokens"] = opts.scheduler.max_batched_tokens;
  j["prefix_caching"] = opts.prefix_caching;
  j["kv_bytes"] = o.kv_bytes;
  j["wall_s"] = o.wall_s;
  j["steps"] = o.steps;
  j["forward_s"] = o.forward_s;
  j["kv_grows"] = o.kv_grows;
  j["output_tokens_per_s"] = s.out_tps;
  j["total_tokens_per_s"] = s.total_tps;
  j["ttft_ms_p50"] = s.ttft_p50;
  j["ttft_ms_p99"] = s.ttft_p99;
  j["tpot_ms_p50"] = s.tpot_p50;
  j["tpot_ms_p99"] = s.tpot_p99;
  j["kv_used_mean"] = o.kv_used_mean;
  j["kv_used_peak"] = o.kv_used_peak;
  j["prefix_hit_rate"] = o.kv.hit_rate();
  j["preemptions"] = o.preemptions;
  j["failed"] = o.failed;
  ordered_json reqs = ordered_json::array();
  for (const LoadDone& d : o.done) {
    reqs.push_back({{"input", d.input},
                    {"output", d.output},
                    {"cached", d.cached},
                    {"submit_s", d.submit_s},
                    {"first_token_s", d.first_s},
                    {"finish_s", d.finish_s}});
  }
  j["requests"] = reqs;
  return j;
}

std::string table(const std::vector<std::pair<std::string, LoadOutcome>>& runs) {
  std::vector<LoadSummary> s;
  for (const auto& r : runs) s.push_back(summarize_load(r.second));
  std::string t = "| |";
  std::string rule = "|---|";
  for (const auto& r : runs) {
    t += " " + r.first + " |";
    rule += "---|";
  }
  if (runs.size() == 2) {
    t += " ratio |";
    rule += "---|";
  }
  t += "\n" + rule + "\n";
  auto row = [&](const std::string& name, auto get, const char* f, bool ratio) {
    t += "| " + name + " |";
    for (size_t i = 0; i < runs.size(); ++i) t += " " + fmt::format(fmt::runtime(f), get(i)) + " |";
    if (runs.size() == 2) {
      const double a = get(0), b = get(1);
      t += ratio && a > 0 ? fmt::format(" {:.2f}x |", b / a) : std::string(" |");
    }
    t += "\n";
  };
  row(
      "output tok/s", [&](size_t i) { return s[i].out_tps; }, "{:.1f}", true);
  row(
      "total tok/s", [&](size_t i) { return s[i].total_tps; }, "{:.1f}", true);
  row(
      "TTFT p50 (ms)", [&](size_t i) { return s[i].ttft_p50; }, "{:.1f}", false);
  row(
      "TTFT p99 (ms)", [&](size_t i) { return s[i].ttft_p99; }, "{:.1f}", false);
  row(
      "time per output token p50 (ms)", [&](size_t i) { return s[i].tpot_p50; }, "{:.2f}", false);
  row(
      "time per output token p99 (ms)", [&](size_t i) { return s[i].tpot_p99; }, "{:.2f}", false);
  row(
      "KV blocks used, mean", [&](size_t i) { return 100 * runs[i].second.kv_used_mean; },
      "{:.0f}%", false);
  row(
      "KV blocks used, peak", [&](size_t i) { return 100 * runs[i].second.kv_used_peak; },
      "{:.0f}%", false);
  row(
      "KV memory at the end (MiB)",
      [&](size_t i) { return static_cast<double>(runs[i].second.kv_bytes) / (1 << 20); }, "{:.1f}",
      false);
  row(
      "prefix hit rate", [&](size_t i) { return 100 * runs[i].second.kv.hit_rate(); }, "{:.0f}%",
      false);
  row(
      "preemptions", [&](size_t i) { return static_cast<double>(runs[i].second.preemptions); },
      "{:.0f}", false);
  row(
      "steps", [&](size_t i) { return static_cast<double>(runs[i].second.steps); }, "{:.0f}",
      false);
  row(
      "time in forward passes",
      [&](size_t i) {
        return runs[i].second.wall_s > 0 ? 100 * runs[i].second.forward_s / runs[i].second.wall_s
                                         : 0.0;
      },
      "{:.0f}%", false);
  row(
      "wall time (s)", [&](size_t i) { return runs[i].second.wall_s; }, "{:.2f}", false);
  return t;
}

int run_bench_serve(const ServeArgs& a) {
  if (a.requests < 1 || a.input_len < 1 || a.output_len < 1) {
    return report_error("--requests, --input-len and --output-len must be >= 1");
  }
  if (a.mix != "fixed" && a.mix != "long-tail") {
    return report_error(fmt::format("--mix {}: expected fixed or long-tail", a.mix));
  }
  if (a.rate > 0 && a.concurrency > 0) {
    return report_error("--rate and --concurrency exclude each other");
  }
  if (!(a.rate >= 0) || !std::isfinite(a.rate)) {
    return report_error("--rate must be a finite number > 0");
  }
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().message());
  RecipeConfig r = *recipe;
  // The context covers the longest request of the mix.
  const int64_t longest =
      a.mix == "fixed" ? a.input_len + a.output_len : 8 * (a.input_len + a.output_len);
  r.context_length = longest + 1;
  r.strategies.origins.set("context_length", "--input-len + --output-len");

  std::string machine;
  ordered_json report;
  report["benchmark"] = "rinfer bench-serve";
  report["recipe"] = a.recipe;
  report["git_sha"] = bench::git_sha(".");
  report["git_dirty"] = bench::git_dirty(".", ":/src");
  report["date"] = bench::utc_date();
  report["device"] = bench::device_json(r.device, &machine);
  report["machine"] = bench::machine_json(machine);
  if (!a.json.empty()) {
    if (Status c = bench::prepare_json_output(a.json, {a.recipe}); !c.ok()) {
      return report_error(c.message());
    }
  }
  if (!a.readme.empty()) {
    auto checked = check_output_path(a.readme, {a.recipe});
    if (!checked.ok()) return report_error(checked.status().message());
  }

  auto served = load_served(r);
  if (!served.ok()) return report_error(served.status().message());
  DecoderModel& model = *served->model;
  EngineCoreOptions opts = engine_core_options(r.strategies, r.context_length);
  if (a.max_seqs > 0) opts.scheduler.max_seqs = a.max_seqs;
  if (a.max_batched_tokens > 0) opts.scheduler.max_batched_tokens = a.max_batched_tokens;
  if (opts.scheduler.max_batched_tokens < opts.scheduler.max_seqs) {
    return report_error(fmt::format("batching.max_batched_tokens {} is below max_seqs {}",
                                    opts.scheduler.max_batched_tokens, opts.scheduler.max_seqs));
  }
  if (!r.strategies.kv_cache) {
    return report_error(
        fmt::format("{}: bench-serve runs the engine core, which needs the KV cache on", a.recipe));
  }
  const int64_t concurrency = a.concurrency > 0 ? a.concurrency : opts.scheduler.max_seqs;
  const std::vector<LoadJob> jobs =
      make_load(load_spec(a), model.hparams().n_vocab, r.context_length);
  report["settings"] = {{"requests", a.requests},
                        {"input_len", a.input_len},
                        {"shared_prefix", a.shared_prefix},
                        {"output_len", a.output_len},
                        {"mix", a.mix},
                        {"concurrency", a.rate > 0 ? 0 : concurrency},
                        {"rate", a.rate},
                        {"seed", a.seed},
                        {"strategies", r.strategies_summary()},
                        {"model", served->name}};
  std::fprintf(stderr, "%s: %lld requests, %s %lld/%lld tokens, %s\n", a.recipe.c_str(),
               static_cast<long long>(a.requests), a.mix.c_str(),
               static_cast<long long>(a.input_len), static_cast<long long>(a.output_len),
               a.rate > 0 ? fmt::format("{} requests/s", a.rate).c_str()
                          : fmt::format("concurrency {}", concurrency).c_str());

  if (r.device.is_cuda()) {
    // Warm-up, not measured, on a core of its own: the CUDA runner's first passes of each batch
    // size tune their GEMMs (process-wide, so both measured runs start tuned). Prompts of the same
    // lengths but other tokens (no prefix hits later), at most 32 output tokens.
    ServeArgs w = a;
    w.seed = a.seed + 7919;
    w.requests = std::min<int64_t>(a.requests, 2 * concurrency);
    w.output_len = std::min<int64_t>(a.output_len, 32);
    w.rate = 0;
    std::vector<LoadJob> warm = make_load(load_spec(w), model.hparams().n_vocab, r.context_length);
    auto wcore = EngineCore::create(model, opts, nullptr);
    if (!wcore.ok()) return report_error(wcore.status().with_context(a.recipe).message());
    auto o = drive_load(**wcore, warm, w.rate, concurrency, "warm-up");
    if (!o.ok()) return report_error(o.status().message());
    report["settings"]["warmup_requests"] = w.requests;
  }
  std::vector<std::pair<std::string, LoadOutcome>> runs;
  ordered_json variants = ordered_json::array();
  if (!a.no_baseline) {
    // The baseline: static batches over a contiguous cache with the same seats.
    EngineCoreOptions base = opts;
    base.layout = kv::Layout::kContiguous;
    base.prefix_caching = false;
    base.swap_blocks = 0;
    base.kv_blocks = 0;
    base.scheduler.policy = BatchingPolicy::kStatic;
    auto bcore = EngineCore::create(model, base, nullptr);
    if (!bcore.ok()) return report_error(bcore.status().message());
    auto o = drive_load(**bcore, jobs, a.rate, concurrency, "baseline");
    if (!o.ok()) return report_error(o.status().message());
    variants.push_back(outcome_json("baseline", (*bcore)->options(), *o));
    runs.emplace_back("baseline (static, contiguous)", std::move(*o));
  }
  {
    // Each core (its runner and KV arena) is made for its run and freed after it.
    auto core = EngineCore::create(model, opts, nullptr);
    if (!core.ok()) return report_error(core.status().with_context(a.recipe).message());
    opts = (*core)->options();
    auto o = drive_load(**core, jobs, a.rate, concurrency, "optimized");
    if (!o.ok()) return report_error(o.status().message());
    variants.push_back(outcome_json("recipe", opts, *o));
    runs.emplace_back(fmt::format("recipe ({}, {})", batching_policy_name(opts.scheduler.policy),
                                  kv::layout_name(opts.layout)),
                      std::move(*o));
  }
  report["variants"] = variants;
  for (const auto& [name, o] : runs) {
    if (o.failed > 0) {
      return report_error(
          fmt::format("{}: {} requests failed, the first: {}", name, o.failed, o.first_error));
    }
  }
  std::string out = table(runs);
  out += fmt::format(
      "\n{} requests, {} {}/{} tokens{}, {}; {}; this run {} seats, {} tokens/step; random token "
      "ids, end of text ignored; output tok/s = every output token over the whole run's time.\n",
      a.requests, a.mix, a.input_len, a.output_len,
      a.shared_prefix > 0 ? fmt::format(" (the first {} shared)", a.shared_prefix) : "",
      a.rate > 0 ? fmt::format("Poisson arrivals at {} requests/s", a.rate)
                 : fmt::format("concurrency {}", concurrency),
      r.strategies_summary(), opts.scheduler.max_seqs, opts.scheduler.max_batched_tokens);
  if (!write_stdout(out)) return 1;
  if (!a.readme.empty()) {
    const std::string block =
        out + fmt::format("\nMeasured by `rinfer bench-serve` at {} ({}), {}.\n",
                          report["git_sha"].get<std::string>().substr(0, 7),
                          report["date"].get<std::string>(),
                          report["device"]["name"].get<std::string>());
    if (Status st = bench::replace_readme_table(a.readme, block, machine); !st.ok()) {
      return report_error(st.message());
    }
  }
  if (!a.json.empty()) return bench::write_json(a.json, report);
  return 0;
}

}  // namespace

void add_bench_serve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "bench-serve",
      "Serve a load of requests through the engine core; compare with static batching over a "
      "contiguous cache");
  auto a = std::make_shared<ServeArgs>();
  cmd->add_option("recipe", a->recipe, "Recipe YAML")->required();
  cmd->add_option("--requests", a->requests, "Requests in the load (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--input-len", a->input_len, "Prompt tokens per request (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--output-len", a->output_len, "Output tokens per request (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--mix", a->mix,
                  "fixed (every request the given lengths) or long-tail (log-normal around them)");
  cmd->add_option("--concurrency", a->concurrency,
                  "Requests kept in flight (default: the recipe's batching.max_seqs)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--rate", a->rate, "Poisson arrivals, requests per second (instead)")
      ->check(CLI::Range(1e-6, 1e6));
  cmd->add_option("--seed", a->seed, "Seed of the random workload (default 1)");
  cmd->add_option("--shared-prefix", a->shared_prefix,
                  "Tokens every prompt starts with (a system prompt; default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--max-seqs", a->max_seqs,
                  "Seats: overrides the recipe's batching.max_seqs (sweeps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--max-batched-tokens", a->max_batched_tokens,
                  "Token budget of a step: overrides batching.max_batched_tokens (sweeps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--no-baseline", a->no_baseline, "Skip the static, contiguous baseline");
  cmd->add_option("--json", a->json, "Write the report as JSON");
  cmd->add_option("--readme", a->readme,
                  "Put the table in this README.md, between the bench markers of this machine");
  cmd->callback([&exit_code, a] { exit_code = run_bench_serve(*a); });
}

}  // namespace rinfer
