// `rinfer tune FOLDER|RECIPE [--budget MIN] [--vs REFERENCE] [--out-dir DIR] [--cache FILE]`:
// searches strategy combinations of an LLM chat recipe for the fastest one inside its precision
// gate. The start is the recipe (or the folder's optimized recipe for the device); the other
// recipes of the folder for the same device and model are measured first (the hand-written
// variants), then a greedy search changes one knob at a time (tools/tune_space.h: the typed
// domains of the strategy registry) from the best so far, keeping a change when the request is
// faster by more than 3% (again against the best measured anew) and the precision gate holds,
// until a whole pass over the knobs keeps
// nothing or the budget is spent. Each trial's first, short run is a probe: a trial 25% slower
// than the best's probe is pruned there. Speed: one request of --prompt-tokens and
// --gen-tokens through the engine core (medians of --repeat); for an llm-serve recipe, the wall
// time of a load instead (--requests of that size, --concurrency in flight, default the start's
// seats; tools/serve_drive.h), over a knob space that adds the batching limits; precision:
// --precision-tokens of
// text teacher-forced through the trial and the reference (the folder's baseline, or --vs),
// and the trial's decode steps over the text's last 64 positions against the reference's same
// rows (engine/precision.h: decode_precision), under the recipe's `precision:` gate, the worse
// of the two deciding. Trials are cached by git sha,
// machine, device and what the recipe runs (the fingerprint), so that a second run measures
// nothing twice. Writes the best recipe as YAML over the start (its measured figures in a
// comment) and a report of every trial (Markdown, JSON, and an SVG of speed against precision).
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/output_file.h"
#include "engine/llm_engine.h"
#include "engine/logit_metrics.h"
#include "engine/precision.h"
#include "engine/strategy_options.h"
#include "formats/model_cache.h"
#include "recipe/recipe.h"
#include "strategies/registry.h"
#include "tools/bench_report.h"
#include "tools/bench_run.h"
#include "tools/bench_text.h"
#include "tools/output.h"
#include "tools/serve_drive.h"
#include "tools/tools.h"
#include "tools/tune_report.h"
#include "tools/tune_space.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kMinGain = 0.03;     // a change is kept when this much faster, twice
constexpr double kProbeSlack = 1.25;  // a probe this much slower than the best's is pruned
constexpr int64_t kProbeTokens = 8;
constexpr const char* kNotConfirmed = "not faster by 3% than";
constexpr const char* kSameAs = "same as #";

struct TuneArgs {
  std::string target;
  std::string vs;
  double budget_min = 15;
  std::string out_dir;
  std::string cache;
  std::string device;
  int64_t prompt_tokens = 128;
  int64_t gen_tokens = 64;
  int64_t repeat = 3;
  int64_t precision_tokens = 256;
  // llm-serve: the load (requests of prompt_tokens + gen_tokens at `concurrency`, 0: the
  // start's seats).
  int64_t requests = 32;
  int64_t concurrency = 0;
};

std::string default_cache() {
  return (fs::path(model_cache_dir()).parent_path() / "tune" / "trials.json").string();
}

// The start and the reference of a folder for a device kind: optimized.yaml (or <kind>.yaml)
// and baseline.yaml (or <kind>-baseline.yaml) when their device is of that kind.
Result<std::string> folder_recipe(const fs::path& dir, const std::string& kind,
                                  const std::vector<std::string>& names, const char* what) {
  for (const std::string& n : names) {
    const fs::path p = dir / n;
    if (!fs::exists(p)) continue;
    auto r = load_recipe(p.string());
    if (r.ok() && (r->device.is_cuda() ? "cuda" : "cpu") == kind) return p.string();
  }
  return Status(StatusCode::kNotFound,
                fmt::format("{}: no {} recipe for {} (looked for {}); name one", dir.string(), what,
                            kind, fmt::join(names, ", ")));
}

class Tuner {
 public:
  Tuner(const TuneArgs& a, RecipeConfig start, std::string start_path, std::string ref_path,
        TuneCache cache)
      : a_(a),
        start_(std::move(start)),
        start_path_(std::move(start_path)),
        ref_path_(std::move(ref_path)),
        cache_(std::move(cache)) {}

  int run();

 private:
  // The trial's recipe (parsed from its YAML as if it sat in its base's folder).
  Result<RecipeConfig> recipe_of(const TuneTrial& t) const {
    const fs::path base(t.base);
    RINFER_ASSIGN_OR_RETURN(RecipeConfig r,
                            parse_recipe(tune_recipe_yaml(base.filename().string(), t.settings),
                                         (base.parent_path() / "tune-trial.yaml").string()));
    RINFER_RETURN_IF_ERROR(validate_strategies(r.strategies, r.device));
    return r;
  }
  Status prepare_tokens();
  Result<TuneSpeed> measure(const RecipeConfig& r, double best_probe_ms, bool* pruned,
                            std::unique_ptr<LlmEngine>* keep);
  // The same for a serving recipe: the load's wall time (and output, total tok/s).
  Result<TuneSpeed> measure_serving(const RecipeConfig& r, double best_probe_ms, bool* pruned,
                                    std::unique_ptr<LlmEngine>* keep);
  Result<TunePrecision> check_precision(LlmEngine& e, const RecipeConfig& r);
  // Runs trial t (measured, or from the cache); returns whether it is the new best.
  Result<bool> try_trial(TuneTrial& t);
  bool over_budget() const {
    return std::chrono::duration<double>(Clock::now() - t0_).count() > a_.budget_min * 60.0;
  }
  int finish();

  const TuneArgs& a_;
  RecipeConfig start_;
  std::string start_path_, ref_path_;
  TuneCache cache_;
  std::string machine_, git_sha_;
  Clock::time_point t0_ = Clock::now();
  std::vector<int32_t> prompt_, ptokens_;
  bool serving_ = false;               // llm-serve: throughput under a load
  std::vector<LoadJob> jobs_, probe_;  // the load, and its probe (a wave of short requests)
  int64_t concurrency_ = 1;
  std::vector<float> ref_logits_;
  int64_t n_vocab_ = 0;
  std::vector<TuneTrial> trials_;
  std::map<std::string, int> seen_;        // fingerprint -> trial id
  // Trial id -> its fingerprint, for the trials that ran (an invalid recipe has none, so the ids
  // are not dense).
  std::map<int, std::string> fingerprints_;
  int best_ = -1;
  int duplicates_ = 0;
  bool budget_reached_ = false;
};

Status Tuner::prepare_tokens() {
  LlmEngineOptions eo;
  eo.model_only = true;
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlmEngine> e, LlmEngine::create(start_, eo));
  n_vocab_ = e->decoder().hparams().n_vocab;
  const int64_t need = std::max(a_.prompt_tokens, a_.precision_tokens);
  std::vector<int32_t> toks;
  if (const Tokenizer* tok = e->sample().tokenizer(); tok != nullptr) {
    std::string source;
    RINFER_ASSIGN_OR_RETURN(toks, text_tokens(*tok, bench_text("", start_), need, &source));
  } else {
    for (int64_t i = 0; i < need; ++i)
      toks.push_back(static_cast<int32_t>((i * 7919 + 11) % n_vocab_));
  }
  prompt_.assign(toks.begin(), toks.begin() + a_.prompt_tokens);
  ptokens_.assign(toks.begin(), toks.begin() + a_.precision_tokens);
  const int64_t ctx = e->context_length();
  serving_ = start_.scenario == "llm-serve";
  if (serving_) {
    concurrency_ = a_.concurrency > 0
                       ? a_.concurrency
                       : engine_core_options(start_.strategies, ctx).scheduler.max_seqs;
    jobs_ = make_load(LoadSpec{a_.requests, a_.prompt_tokens, a_.gen_tokens, "fixed", 0, 0, 1},
                      n_vocab_, ctx);
    probe_.assign(jobs_.begin(), jobs_.begin() + std::min<int64_t>(a_.requests, concurrency_));
    for (LoadJob& j : probe_) j.output = kProbeTokens;
  }
  if (a_.prompt_tokens + a_.gen_tokens >= ctx || a_.precision_tokens > ctx) {
    return Status(
        StatusCode::kOutOfRange,
        fmt::format("{}: prompt {} + {} generated tokens (and {} precision tokens) do "
                    "not fit the context of {} (context_length)",
                    start_path_, a_.prompt_tokens, a_.gen_tokens, a_.precision_tokens, ctx));
  }
  return ok_status();
}

Result<TuneSpeed> Tuner::measure_serving(const RecipeConfig& r, double best_probe_ms, bool* pruned,
                                         std::unique_ptr<LlmEngine>* keep) {
  LlmEngineOptions eo;
  eo.seats = 0;  // the recipe's batching.max_seqs
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlmEngine> e, LlmEngine::create(r, eo));
  EngineCore& core = *e->core();
  const auto run = [&](const std::vector<LoadJob>& jobs) -> Result<LoadOutcome> {
    core.clear_prefix_cache();
    RINFER_ASSIGN_OR_RETURN(LoadOutcome o, drive_load(core, jobs, 0, concurrency_, ""));
    if (o.failed > 0) {
      return Status(StatusCode::kInternal, fmt::format("{} of {} requests failed: {}", o.failed,
                                                       jobs.size(), o.first_error));
    }
    return o;
  };
  TuneSpeed s;
  RINFER_ASSIGN_OR_RETURN(const LoadOutcome probe, run(probe_));
  s.probe_ms = 1e3 * probe.wall_s;
  if (best_probe_ms > 0 && s.probe_ms > kProbeSlack * best_probe_ms) {
    *pruned = true;
    return s;
  }
  std::vector<double> total, out, all;
  for (int64_t i = 0; i < a_.repeat; ++i) {
    RINFER_ASSIGN_OR_RETURN(const LoadOutcome o, run(jobs_));
    const LoadSummary sum = summarize_load(o);
    total.push_back(1e3 * o.wall_s);
    out.push_back(sum.out_tps);
    all.push_back(sum.total_tps);
  }
  s.total_ms = bench::median(total);
  s.decode_tps = bench::median(out);
  s.prefill_tps = bench::median(all);
  *keep = std::move(e);
  return s;
}

Result<TuneSpeed> Tuner::measure(const RecipeConfig& r, double best_probe_ms, bool* pruned,
                                 std::unique_ptr<LlmEngine>* keep) {
  *pruned = false;
  release_default_host_cache();
  malloc_trim(0);
  if (serving_) return measure_serving(r, best_probe_ms, pruned, keep);
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlmEngine> e, LlmEngine::create(r));
  TuneSpeed s;
  RINFER_ASSIGN_OR_RETURN(RequestStats probe,
                          bench_core_run(*e->core(), prompt_, kProbeTokens, [] {}));
  s.probe_ms = probe.total_ms;
  if (best_probe_ms > 0 && s.probe_ms > kProbeSlack * best_probe_ms) {
    *pruned = true;
    return s;
  }
  std::vector<double> total, dec, pre;
  for (int64_t i = 0; i < a_.repeat; ++i) {
    RINFER_ASSIGN_OR_RETURN(RequestStats st,
                            bench_core_run(*e->core(), prompt_, a_.gen_tokens, [] {}));
    total.push_back(st.total_ms);
    dec.push_back(decode_tps(st));
    pre.push_back(prefill_tps(st));
  }
  s.total_ms = bench::median(total);
  s.decode_tps = bench::median(dec);
  s.prefill_tps = bench::median(pre);
  *keep = std::move(e);
  return s;
}

Result<TunePrecision> Tuner::check_precision(LlmEngine& e, const RecipeConfig& r) {
  if (ref_logits_.empty()) {
    // The reference's logits, once.
    RINFER_ASSIGN_OR_RETURN(RecipeConfig ref, load_recipe(ref_path_));
    LlmEngineOptions eo;
    eo.model_only = true;
    auto re = LlmEngine::create(ref, eo);
    if (!re.ok()) return re.status().with_context(ref_path_);
    if ((*re)->decoder().hparams().n_vocab != n_vocab_) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}: not the model of {} (vocabulary {} against {})", ref_path_,
                                start_path_, (*re)->decoder().hparams().n_vocab, n_vocab_));
    }
    RINFER_ASSIGN_OR_RETURN(EngineCore * core, (*re)->scoring_core());
    auto logits = teacher_forced_logits(*core, ptokens_);
    if (!logits.ok()) return logits.status().with_context(ref_path_);
    ref_logits_ = std::move(logits).value();
  }
  RINFER_ASSIGN_OR_RETURN(EngineCore * core, e.scoring_core());
  RINFER_ASSIGN_OR_RETURN(std::vector<float> logits, teacher_forced_logits(*core, ptokens_));
  const PrecisionThresholds gate = gate_of_recipe(r.precision);
  PrecisionReport p = compare_precision(ref_logits_, logits, ptokens_, n_vocab_, gate);
  // The decode steps too: the one-row kernels, the graphs and their switches.
  RINFER_ASSIGN_OR_RETURN(
      const PrecisionReport d,
      decode_precision(*core, ref_logits_, ptokens_, kDecodeGateSteps, kDecodeGateSeats, gate));
  p = worse_of(p, d);
  return TunePrecision{p.logits.top1_agreement, p.logits.mean_kl, p.ppl_change, p.passed,
                       p.failures};
}

Result<bool> Tuner::try_trial(TuneTrial& t) {
  auto r = recipe_of(t);
  if (!r.ok()) {
    t.verdict = "invalid: " + r.status().message();
    return false;
  }
  const std::string fp = recipe_fingerprint(*r);
  if (auto it = seen_.find(fp); it != seen_.end()) {
    t.verdict = fmt::format("{}{}", kSameAs, it->second);
    return false;
  }
  seen_[fp] = t.id;
  fingerprints_[t.id] = fp;
  TuneTrial* best = best_ >= 0 ? &trials_[static_cast<size_t>(best_)] : nullptr;
  // The trial in its context (the best it is set against): a second run replays each decision.
  t.key = fnv1a_hex(
      fmt::format("{}\n{}\n{}\n{} {} {} {}{}\n{}\n{}\nagainst {}", git_sha_, machine_, fp,
                  a_.prompt_tokens, a_.gen_tokens, a_.repeat, a_.precision_tokens,
                  serving_ ? fmt::format(" load {} x {}", jobs_.size(), concurrency_) : "",
                  ref_path_, gate_of_recipe(r->precision).to_string(),
                  best != nullptr ? fingerprints_.at(best->id) : "none"));
  if (cache_.find(t.key, t)) {
    t.cached = true;
    return t.accepted;
  }
  const auto done = [&](bool accepted) {
    t.accepted = accepted;
    cache_.put(t.key, t);
    return accepted;
  };
  std::unique_ptr<LlmEngine> engine;
  bool pruned = false;
  auto s =
      measure(*r, best != nullptr && best->speed ? best->speed->probe_ms : 0, &pruned, &engine);
  if (!s.ok()) {
    t.verdict = "failed: " + s.status().message();
    return false;  // not cached: an error may not repeat
  }
  t.speed = *s;
  if (pruned) {
    t.speed->total_ms = t.speed->decode_tps = t.speed->prefill_tps = NAN;
    t.verdict = "pruned (probe slower)";
    return done(false);
  }
  // Precision of every trial measured (the report plots speed against it).
  if (!engine) {
    auto e = LlmEngine::create(*r);
    if (!e.ok()) return e.status();
    engine = std::move(e).value();
  }
  auto p = check_precision(*engine, *r);
  if (!p.ok()) return p.status();
  t.precision = *p;
  engine.reset();
  const bool faster =
      best == nullptr || t.speed->total_ms < best->speed->total_ms * (1.0 - kMinGain);
  if (!t.precision->passed) {
    t.verdict = "gate failed: " + t.precision->failures;
    return done(false);
  }
  if (!faster) {
    t.verdict = t.speed->total_ms < best->speed->total_ms ? "not faster by 3%" : "slower";
    return done(false);
  }
  if (best != nullptr) {
    // Confirmed: the best and the trial measured again now (the machine may have been slower
    // when one of them ran), the best at its faster figure, the trial at its slower: noise
    // does not make a winner.
    auto br = recipe_of(*best);
    if (!br.ok()) return br.status();
    std::unique_ptr<LlmEngine> unused;
    RINFER_ASSIGN_OR_RETURN(TuneSpeed b2, measure(*br, 0, &pruned, &unused));
    unused.reset();
    if (b2.total_ms < best->speed->total_ms) {
      best->speed = b2;
      cache_.put(best->key, *best);
    }
    RINFER_ASSIGN_OR_RETURN(TuneSpeed t2, measure(*r, 0, &pruned, &unused));
    const double slower = std::max(t.speed->total_ms, t2.total_ms);
    if (!(slower < best->speed->total_ms * (1.0 - kMinGain))) {
      t.verdict = fmt::format("{} #{} measured again ({:.1f} ms against {:.1f})", kNotConfirmed,
                              best->id, slower, best->speed->total_ms);
      return done(false);
    }
    if (t2.total_ms < t.speed->total_ms) t.speed = t2;
  }
  t.verdict = "kept";
  return done(true);
}

int Tuner::run() {
  bench::device_json(start_.device, &machine_);
  git_sha_ = bench::git_sha(".");
  if (Status st = prepare_tokens(); !st.ok()) return report_error(st.message());
  const fs::path dir = fs::absolute(start_path_).parent_path();
  const std::string kind = start_.device.is_cuda() ? "cuda" : "cpu";

  auto progress = [&](const TuneTrial& t) {
    std::fprintf(stderr, "tune #%d %s: %s%s\n", t.id,
                 t.change.empty() ? fs::path(t.base).filename().c_str() : t.change.c_str(),
                 t.verdict.c_str(), t.cached ? " (cached)" : "");
  };
  auto add = [&](TuneTrial t) -> Result<bool> {
    t.id = static_cast<int>(trials_.size());
    trials_.push_back(std::move(t));
    TuneTrial& ref = trials_.back();
    RINFER_ASSIGN_OR_RETURN(const bool better, try_trial(ref));
    if (ref.verdict.rfind(kSameAs, 0) == 0) {
      // It runs as an earlier trial did: not measured, not listed.
      trials_.pop_back();
      ++duplicates_;
      return false;
    }
    if (better) best_ = ref.id;
    progress(ref);
    return better;
  };

  // The start, then the folder's other recipes of this device and model.
  TuneTrial start;
  start.base = start_path_;
  start.change = "the start";
  auto first = add(start);
  if (!first.ok()) return report_error(first.status().with_context(start_path_).message());
  if (trials_[0].verdict == "kept") trials_[0].verdict = "start";
  if (!trials_[0].speed || !std::isfinite(trials_[0].speed->total_ms)) {
    return report_error(fmt::format("{}: {}", start_path_, trials_[0].verdict));
  }
  std::vector<fs::path> siblings;
  for (const auto& ent : fs::directory_iterator(dir)) {
    const fs::path p = ent.path();
    if (p.extension() == ".yaml" && fs::absolute(p) != fs::absolute(start_path_)) {
      siblings.push_back(p);
    }
  }
  std::sort(siblings.begin(), siblings.end());
  for (const fs::path& p : siblings) {
    if (over_budget()) break;
    auto r = load_recipe(p.string());
    if (!r.ok() || r->model_ref != start_.model_ref || r->scenario != start_.scenario ||
        (r->device.is_cuda() ? "cuda" : "cpu") != kind ||
        fs::absolute(p) == fs::absolute(ref_path_)) {
      continue;
    }
    TuneTrial t;
    t.base = p.string();
    t.change = "hand-written " + p.filename().string();
    auto res = add(t);
    if (!res.ok()) return report_error(res.status().with_context(p.string()).message());
  }

  // Greedy: one knob at a time from the best, until a pass keeps nothing.
  const std::vector<TuneKnob> knobs =
      tune_space(start_.device, start_.scenario,
                 static_cast<int64_t>(std::thread::hardware_concurrency()), 2 * concurrency_);
  bool improved = true;
  while (improved && !budget_reached_) {
    improved = false;
    for (const TuneKnob& k : knobs) {
      for (const std::string& v : k.values) {
        if (over_budget()) {
          budget_reached_ = true;
          break;
        }
        if (best_ < 0) break;
        const TuneTrial& cur = trials_[static_cast<size_t>(best_)];
        if (auto it = cur.settings.find(k.path); it != cur.settings.end() && it->second == v) {
          continue;
        }
        TuneTrial t;
        t.base = cur.base;
        t.settings = cur.settings;
        t.settings[k.path] = v;
        t.change = fmt::format("#{} + {}={}", cur.id, k.path, v);
        auto res = add(t);
        if (!res.ok()) return report_error(res.status().message());
        improved = improved || *res;
      }
      if (budget_reached_) break;
    }
  }
  return finish();
}

int Tuner::finish() {
  if (Status st = cache_.save(); !st.ok()) return report_error(st.message());
  if (best_ < 0) {
    return report_error(
        fmt::format("tune: no trial passed the precision gate against {} (the start {}: {})",
                    ref_path_, start_path_, trials_[0].verdict));
  }
  TuneTrial& best = trials_[static_cast<size_t>(best_)];
  if (best.id != 0) best.verdict = "best";
  TuneSummary s;
  s.target = a_.target;
  s.start = start_path_;
  s.reference = ref_path_;
  s.device = start_.device.to_string();
  s.machine = machine_;
  s.git_sha = git_sha_;
  s.date = bench::utc_date();
  s.serving = serving_;
  s.objective =
      serving_
          ? fmt::format(
                "the wall time of a load: {} requests of {} prompt tokens and {} "
                "generated, {} in flight (median of {})",
                jobs_.size(), a_.prompt_tokens, a_.gen_tokens, concurrency_, a_.repeat)
          : fmt::format("the time of one request: {} prompt tokens, {} generated (median of {})",
                        a_.prompt_tokens, a_.gen_tokens, a_.repeat);
  s.budget_min = a_.budget_min;
  s.elapsed_s = std::chrono::duration<double>(Clock::now() - t0_).count();
  s.budget_reached = budget_reached_;
  s.best = best.id;
  s.duplicates = duplicates_;

  const fs::path out =
      a_.out_dir.empty()
          ? fs::path("tune-" + fs::absolute(start_path_).parent_path().filename().string())
          : fs::path(a_.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  const TuneTrial& st = trials_[0];
  // The base relative to the output folder when it is near (a folder beside it), else absolute.
  const fs::path base_rel = fs::relative(fs::absolute(best.base), fs::absolute(out), ec);
  const bool near = !ec && !base_rel.empty() && base_rel.string().rfind("../../../", 0) != 0;
  const std::string yaml = tune_recipe_yaml(
      near ? base_rel.string() : fs::absolute(best.base).lexically_normal().string(), best.settings,
      {fmt::format("rinfer tune {}: the fastest of {} trials inside the precision gate ({})",
                   a_.target, trials_.size(), s.date),
       fmt::format("on {} ({}), git {}: {} of {} prompt + {} generated tokens in {:.1f} ms "
                   "(the start {}: {:.1f} ms),",
                   s.device, machine_, git_sha_,
                   serving_ ? fmt::format("{} requests, {} in flight,", jobs_.size(), concurrency_)
                            : std::string("one request"),
                   a_.prompt_tokens, a_.gen_tokens, best.speed->total_ms,
                   fs::path(start_path_).filename().string(), st.speed->total_ms),
       fmt::format("{} {:.1f} tok/s, {} {:.1f} tok/s; against {}: top-1 {:.4f}, mean KL "
                   "{:.4g}, ppl change {:+.2f}%.",
                   serving_ ? "output" : "decode", best.speed->decode_tps,
                   serving_ ? "total" : "prefill", best.speed->prefill_tps,
                   fs::path(ref_path_).filename().string(), best.precision->top1,
                   best.precision->mean_kl, 100.0 * best.precision->ppl_change),
       "The trials: report.md beside this file."});
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"tuned.yaml", yaml},
                                   {"report.md", tune_markdown(s, trials_)},
                                   {"report.json", tune_json(s, trials_).dump(1) + "\n"},
                                   {"report.svg", tune_svg(s, trials_)}}) {
    if (Status w = write_file_atomically((out / name).string(), text); !w.ok()) {
      return report_error(w.message());
    }
  }
  int cached = 0;
  for (const TuneTrial& t : trials_) cached += t.cached ? 1 : 0;
  std::string msg = tune_markdown(s, trials_);
  msg += fmt::format(
      "\nbest: #{} ({}): {:.1f} ms against the start's {:.1f} ms ({:.2f}x); {} of {} trials from "
      "the cache ({})\nwrote {}/tuned.yaml, report.md, report.json, report.svg\n",
      best.id, best.change.empty() ? best.base : best.change, best.speed->total_ms,
      st.speed->total_ms, st.speed->total_ms / best.speed->total_ms, cached, trials_.size(),
      cache_.path(), out.string());
  return write_stdout(msg) ? 0 : 1;
}

int run_tune(const TuneArgs& a) {
  std::string start_path = a.target, ref_path = a.vs;
  const fs::path tp(a.target);
  if (!fs::exists(tp)) return report_error(fmt::format("tune: {} does not exist", a.target));
  std::string kind = a.device.empty() ? "" : (a.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu");
  if (!a.device.empty() && a.device != "cpu" && kind != "cuda") {
    return report_error(fmt::format("tune: --device {}: cpu or cuda", a.device));
  }
  if (fs::is_directory(tp)) {
    const std::string k = kind.empty() ? "cpu" : kind;
    auto s = folder_recipe(tp, k, {"optimized.yaml", k + ".yaml", k + "-optimized.yaml"}, "start");
    if (!s.ok()) return report_error(s.status().message());
    start_path = *s;
  }
  auto start = load_recipe(start_path);
  if (!start.ok()) return report_error(start.status().message());
  if (start->scenario != "llm-chat" && start->scenario != "llm-serve") {
    return report_error(fmt::format(
        "tune: {} is a {} recipe; rinfer tune searches llm-chat recipes (one request's time) and "
        "llm-serve recipes (a load's throughput)",
        start_path, start->scenario));
  }
  if (ref_path.empty()) {
    const fs::path dir = fs::absolute(start_path).parent_path();
    const std::string k = start->device.is_cuda() ? "cuda" : "cpu";
    auto r = folder_recipe(dir, k, {"baseline.yaml", k + "-baseline.yaml"}, "baseline (--vs)");
    if (!r.ok()) return report_error(r.status().message());
    ref_path = *r;
  }
  auto cache = TuneCache::open(a.cache.empty() ? default_cache() : a.cache);
  if (!cache.ok()) return report_error(cache.status().message());
  Tuner t(a, std::move(start).value(), start_path, ref_path, std::move(cache).value());
  return t.run();
}

}  // namespace

void add_tune_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "tune", "Search strategy combinations for the fastest recipe inside its precision gate");
  auto a = std::make_shared<TuneArgs>();
  cmd->add_option("target", a->target,
                  "A recipe folder (its optimized recipe is the start) or a recipe")
      ->required();
  cmd->add_option("--budget", a->budget_min, "Minutes of search (default 15)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--vs", a->vs, "The precision reference (default: the folder's baseline)");
  cmd->add_option("--device", a->device, "cpu or cuda: which of the folder's recipes starts");
  cmd->add_option("--out-dir", a->out_dir,
                  "Where tuned.yaml and the report go (default: tune-<folder> here)");
  cmd->add_option("--cache", a->cache,
                  "The trial cache (default: tune/trials.json beside the model cache)");
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt tokens of the timed request (128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Generated tokens of the timed request (64)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--repeat", a->repeat, "Timed requests per trial (3; the median counts)")
      ->check(CLI::Range(int64_t{1}, int64_t{100}));
  cmd->add_option("--precision-tokens", a->precision_tokens,
                  "Text tokens teacher-forced for the precision gate (256)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--requests", a->requests,
                  "llm-serve: requests of the timed load (32; each --prompt-tokens + --gen-tokens)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--concurrency", a->concurrency,
                  "llm-serve: requests kept in flight (default: the start's batching.max_seqs)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->callback([&exit_code, a] { exit_code = run_tune(*a); });
}

}  // namespace rinfer
