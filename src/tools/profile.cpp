// `rinfer profile RECIPE [-p PROMPT | --prompt-tokens N] [-n TOKENS] [--batch B] [--trace FILE]
// [--json FILE]`:
// where a recipe's time goes, op by op. B sequences of the prompt (each its own sequence: the
// prefix cache is cleared and the n-th starts with its own token) generate n tokens greedily
// through the engine core twice: first as the recipe runs them (the unprofiled step times),
// then with every pass profiled (models/op_profile.h: host timers on the CPU; CUDA events and
// NVTX ranges on the GPU, the passes run eagerly). The passes are grouped into phases
// (prefill, decode, batched decode); each phase gets its time by op with each op's bytes and
// FLOPs against the measured ceilings (tools/ceilings.h: the roofline), its time by layer, its
// hotspots, and the share of the passes' wall time its ops cover. --trace writes the profiled
// run in the Chrome trace format (chrome://tracing, ui.perfetto.dev).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/llm_engine.h"
#include "recipe/recipe.h"
#include "tools/bench_report.h"
#include "tools/ceilings.h"
#include "tools/output.h"
#include "tools/profile_report.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

constexpr const char* kDefaultPrompt =
    "The quick brown fox jumps over the lazy dog. Profiling shows where the time of a forward "
    "pass goes: the matrix products, the attention, the norms.";

struct ProfileArgs {
  std::string recipe;
  std::string prompt = kDefaultPrompt;
  bool prompt_given = false;
  int64_t prompt_tokens = 0;  // > 0: a prompt of this many token ids instead of the text
  int64_t tokens = 32;
  int64_t batch = 1;
  std::string trace;
  std::string json;
};

// The unprofiled run: median time to the first token and per decode step over the sequences.
struct Unprofiled {
  double prefill_ms = 0;
  double decode_step_ms = 0;
};

// B greedy sequences of `prompt` (sequence i with its first token replaced by a distinct id, so
// that no two share a cached prefix), n tokens each, run to the end.
Result<Unprofiled> run_batch(EngineCore& core, const std::vector<int32_t>& prompt, int64_t n,
                             int64_t batch) {
  core.clear_prefix_cache();
  std::vector<RequestStats> done(static_cast<size_t>(batch));
  Status failed;
  const int32_t n_vocab = static_cast<int32_t>(core.model().hparams().n_vocab);
  for (int64_t i = 0; i < batch; ++i) {
    RequestParams p;
    p.prompt = prompt;
    if (i > 0) p.prompt[0] = static_cast<int32_t>((prompt[0] + i) % n_vocab);
    p.max_tokens = n;
    p.ignore_eos = true;
    p.sampling.temperature = 0.0f;
    p.sampling.repeat_penalty = 1.0f;
    p.on_event = [&done, &failed, i](const RequestEvent& ev) {
      if (ev.finish == FinishReason::kError && failed.ok()) failed = ev.error;
      if (ev.finish != FinishReason::kNone && ev.stats != nullptr) {
        done[static_cast<size_t>(i)] = *ev.stats;
      }
    };
    RINFER_RETURN_IF_ERROR(core.submit(std::move(p)).status());
  }
  RINFER_RETURN_IF_ERROR(core.run_until_idle());
  RINFER_RETURN_IF_ERROR(failed);
  std::vector<double> ttft, step;
  for (const RequestStats& s : done) {
    ttft.push_back(s.ttft_ms);
    if (s.generated_tokens > 1) {
      step.push_back((s.total_ms - s.ttft_ms) / static_cast<double>(s.generated_tokens - 1));
    }
  }
  return Unprofiled{bench::median(ttft), bench::median(step)};
}

void print_phase(const PhaseProfile& p, const Unprofiled& u, int64_t batch) {
  const double unprofiled = p.phase == "prefill" ? u.prefill_ms : u.decode_step_ms;
  std::printf(
      "\n%s: %s of %lld %s, %.3f ms wall per pass (median; unprofiled %s %.3f ms)\n",
      p.phase.c_str(), count_of(p.passes, "pass", "passes").c_str(), static_cast<long long>(p.rows),
      p.rows == 1 ? "row" : "rows", p.pass_ms,
      p.phase == "prefill" ? (batch > 1 ? "time to first token" : "prefill") : "decode step",
      unprofiled);
  std::printf("  ops add up to %.3f ms per pass: %.1f%% of the passes' wall time", p.ops_ms,
              100.0 * p.coverage);
  if (p.profiler_ms > 0) std::printf(" (less the profiler's own %.3f ms)", p.profiler_ms);
  if (unprofiled > 0) std::printf(", %.1f%% of the unprofiled time", 100.0 * p.ops_ms / unprofiled);
  std::printf("\n");
  const auto per = static_cast<double>(std::max<int64_t>(p.passes, 1));
  std::printf("  %-10s %7s %10s %7s %9s %9s %8s %10s\n", "op", "calls", "ms/pass", "share", "GB/s",
              "TFLOP/s", "bound", "% of bound");
  double total = 0;
  for (const OpTotal& t : p.by_op) total += t.ms;
  for (const OpTotal& t : p.by_op) {
    std::printf("  %-10s %7lld %10.4f %6.1f%% %9.1f %9.3f %8s %9.1f%%\n", t.op.c_str(),
                static_cast<long long>(t.count), t.ms / per, 100.0 * t.ms / std::max(total, 1e-12),
                t.gbs, t.tflops, bound_name(t), t.pct_of_bound);
  }
  if (std::any_of(p.by_op.begin(), p.by_op.end(),
                  [](const OpTotal& t) { return std::string_view(bound_name(t)) == "cache"; })) {
    std::printf(
        "  (cache: memory-bound past the measured bandwidth; its bytes came from a cache)\n");
  }
  std::printf("  hotspots (op, layer):");
  for (size_t i = 0; i < p.hotspots.size(); ++i) {
    const OpTotal& t = p.hotspots[i];
    std::printf("%s %s@%d %.4f ms", i == 0 ? "" : ",", t.op.c_str(), t.layer, t.ms / per);
  }
  std::printf("\n  ms per layer:");
  for (size_t l = 0; l < p.layer_ms.size(); ++l) {
    std::printf("%s%s%zu: %.4f", l % 8 == 0 ? "\n    " : "  ", l < 10 ? " " : "", l, p.layer_ms[l]);
  }
  std::printf("\n");
}

int run_profile(const ProfileArgs& a) {
  if (a.prompt.empty()) return report_error("profile: the prompt (-p) is empty");
  if (a.prompt_given && a.prompt_tokens > 0) {
    return report_error("profile: give a prompt (-p) or --prompt-tokens, not both");
  }
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().to_string());
  LlmEngineOptions eo;
  eo.seats = a.batch;
  auto engine = LlmEngine::create(*recipe, eo);
  if (!engine.ok()) return report_error(engine.status().with_context(a.recipe).to_string());
  EngineCore* core = (*engine)->core();
  if (core == nullptr) return report_error("profile: the recipe's engine has no engine core");
  const DecoderModel& model = (*engine)->decoder();
  Result<std::vector<int32_t>> prompt = std::vector<int32_t>();
  if (a.prompt_tokens > 0) {
    // Token ids spread over the vocabulary (the same every run).
    const int64_t nv = model.hparams().n_vocab;
    for (int64_t i = 0; i < a.prompt_tokens; ++i) {
      prompt->push_back(static_cast<int32_t>((i * 7919 + 11) % nv));
    }
  } else {
    prompt = (*engine)->sample().preprocess_raw(a.prompt);
    if (!prompt.ok()) {
      return report_error(prompt.status()
                              .with_context("profile -p (--prompt-tokens N takes token ids)")
                              .to_string());
    }
  }
  if (prompt->empty()) return report_error("profile: the prompt (-p) makes no tokens");
  const Device dev = recipe->device;

  Result<Ceilings> ceilings = Status(StatusCode::kInternal, "unset");
  if (dev.is_cpu()) {
    ThreadPool pool(recipe->strategies.threads);
    ceilings = measure_cpu_ceilings(pool);
  } else {
    ceilings = measure_cuda_ceilings(dev.index);
  }
  if (!ceilings.ok()) return report_error(ceilings.status().with_context("ceilings").to_string());

  auto plain = run_batch(*core, *prompt, a.tokens, a.batch);  // warms up, and the reference
  if (!plain.ok()) return report_error(plain.status().to_string());
  plain = run_batch(*core, *prompt, a.tokens, a.batch);
  if (!plain.ok()) return report_error(plain.status().to_string());
  ProfileRecorder rec;
  core->set_profile(&rec);
  auto profiled = run_batch(*core, *prompt, a.tokens, a.batch);
  core->set_profile(nullptr);
  if (!profiled.ok()) return report_error(profiled.status().to_string());
  if (rec.passes().empty()) return report_error("profile: no pass was recorded");

  const int64_t n_layer = model.hparams().n_layer;
  const std::vector<PhaseProfile> phases = summarize_profile(rec, n_layer, *ceilings);
  std::printf("rinfer profile: %s on %s: %s of a %zu-token prompt, %lld tokens each\n",
              a.recipe.c_str(), dev.to_string().c_str(), count_of(a.batch, "sequence").c_str(),
              prompt->size(), static_cast<long long>(a.tokens));
  std::printf("ceilings (measured now): %.1f GB/s (%s), %.3f TFLOP/s (%s)\n",
              ceilings->bandwidth_gbs, ceilings->bandwidth_how.c_str(), ceilings->peak_tflops,
              ceilings->peak_how.c_str());
  for (const PhaseProfile& p : phases) print_phase(p, *plain, a.batch);

  if (!a.trace.empty()) {
    const nlohmann::json t = chrome_trace(rec, fmt::format("rinfer profile {}", a.recipe));
    if (bench::write_json(a.trace, t) != 0) return 1;
  }
  if (!a.json.empty()) {
    nlohmann::json j = profile_json(phases, *ceilings);
    j["recipe"] = a.recipe;
    j["device"] = dev.to_string();
    j["batch"] = a.batch;
    j["tokens"] = a.tokens;
    j["prompt_tokens"] = prompt->size();
    j["unprofiled"] = {{"prefill_ms", plain->prefill_ms},
                       {"decode_step_ms", plain->decode_step_ms}};
    j["git_sha"] = bench::git_sha(".");
    j["date"] = bench::utc_date();
    if (bench::write_json(a.json, j) != 0) return 1;
  }
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "profile", "Per-op time of a recipe's prefill and decode, against the measured roofline");
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("recipe", a->recipe, "The recipe profiled (an LLM recipe)")->required();
  cmd->add_option("-p,--prompt", a->prompt, "The prompt (raw text, no chat template)")
      ->each([a](const std::string&) { a->prompt_given = true; });
  cmd->add_option("--prompt-tokens", a->prompt_tokens,
                  "A prompt of N token ids instead of text (models without a tokenizer)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("-n,--tokens", a->tokens, "Tokens generated per sequence (default 32)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--batch", a->batch, "Sequences at once (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--trace", a->trace, "Write the profiled run as a Chrome / Perfetto trace");
  cmd->add_option("--json", a->json, "Write the tables as JSON");
  cmd->callback([&exit_code, a] { exit_code = run_profile(*a); });
}

}  // namespace rinfer
