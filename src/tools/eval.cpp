// `rinfer eval RECIPE --vs REFERENCE [--text FILE] [--tokens N] [--window W] [--json FILE]`:
// the precision of a recipe against a reference recipe of the same model, teacher-forced on the
// same text (the --text file, else the reference's bench.prompts, else GPL-3: tools/bench_text.h)
// in windows of W tokens, each a fresh sequence: top-1 agreement, mean and max KL(reference ||
// recipe) and both perplexities. The recipe's `precision:` gate decides (engine/precision.h: the
// defaults, each bound the recipe sets replacing that bound; the perplexity bound is one-sided,
// a drop passes): exit 0 when it passes, 1 when it fails or on an error, so CI can use it. Both
// models stay loaded; each window's logits are compared and dropped. The same gate then checks
// the recipe's decode steps (the first window's last 64 positions, at 1 and 3 seats, against the
// reference's teacher-forced rows: engine/precision.h decode_precision), which teacher forcing
// alone never runs (one-row kernels, small-batch matvecs, decode graphs). `--per-layer` runs the
// sensitivity sweep instead (eval_layers.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/progress.h"
#include "engine/llm_engine.h"
#include "engine/logit_metrics.h"
#include "engine/precision.h"
#include "recipe/recipe.h"
#include "tools/bench_report.h"
#include "tools/bench_text.h"
#include "tools/eval_internal.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer::eval_tool {

Result<Loaded> load(RecipeConfig recipe, const std::string& label, int64_t seats) {
  Loaded l;
  l.recipe = std::move(recipe);
  LlmEngineOptions eo;
  eo.model_only = true;
  auto engine = LlmEngine::create(l.recipe, eo);
  if (!engine.ok()) return engine.status().with_context(label);
  l.engine = std::move(engine).value();
  auto core = l.engine->scoring_core(seats);
  if (!core.ok()) return core.status().with_context(label);
  l.core = *core;
  return l;
}

Result<Loaded> load(const std::string& path, int64_t seats) {
  RINFER_ASSIGN_OR_RETURN(RecipeConfig recipe, load_recipe(path));
  return load(std::move(recipe), path, seats);
}

Result<Text> text_of(const EvalArgs& a, const Loaded& ref, const Loaded& var) {
  const DecoderHParams& hr = ref.engine->decoder().hparams();
  const DecoderHParams& hv = var.engine->decoder().hparams();
  if (hv.n_vocab != hr.n_vocab || hv.n_layer != hr.n_layer || hv.n_embd != hr.n_embd) {
    return invalid_argument(
        "eval: {} has {} layers of {} and a vocabulary of {}, the reference {} {} of {} and {}: "
        "not the same model",
        a.recipe, hv.n_layer, hv.n_embd, hv.n_vocab, a.reference, hr.n_layer, hr.n_embd,
        hr.n_vocab);
  }
  Text t;
  auto tok = ref.engine->sample().require_tokenizer("rinfer eval's text");
  if (!tok.ok()) return tok.status().with_context(a.reference);
  RINFER_ASSIGN_OR_RETURN(
      t.tokens, text_tokens(**tok, bench_text(a.text_file, ref.recipe), a.tokens, &t.source));
  if (const Tokenizer* vt = var.engine->sample().tokenizer(); vt != nullptr) {
    std::string vsource;
    auto vtokens = text_tokens(*vt, bench_text(a.text_file, ref.recipe), a.tokens, &vsource);
    if (!vtokens.ok() || *vtokens != t.tokens) {
      return invalid_argument(
          "eval: {} tokenizes the text into other ids than the reference {}: not the same model",
          a.recipe, a.reference);
    }
  }
  t.window = std::min({a.window, ref.engine->context_length(), var.engine->context_length()});
  const auto n = static_cast<int64_t>(t.tokens.size());
  t.n_windows = (n + t.window - 1) / t.window;
  return t;
}

void Totals::add(const LogitComparison& c, double ppl_ref, double ppl_var, int64_t n) {
  rows += c.rows;
  top1 += c.top1_agreement * static_cast<double>(c.rows);
  kl += c.mean_kl * static_cast<double>(c.rows);
  if (!(c.max_kl <= max_kl)) max_kl = c.max_kl;  // NaN sticks
  if (n >= 2) {
    nll_ref += std::log(ppl_ref) * static_cast<double>(n - 1);
    nll_var += std::log(ppl_var) * static_cast<double>(n - 1);
    nll_rows += n - 1;
  }
}

PrecisionReport Totals::report(const PrecisionThresholds& gate) const {
  PrecisionReport r;
  const auto n = static_cast<double>(std::max<int64_t>(rows, 1));
  r.positions = rows;
  r.logits.rows = rows;
  r.logits.top1_agreement = top1 / n;
  r.logits.mean_kl = kl / n;
  r.logits.max_kl = max_kl;
  const auto m = static_cast<double>(std::max<int64_t>(nll_rows, 1));
  r.ppl_baseline = std::exp(nll_ref / m);
  r.ppl_variant = std::exp(nll_var / m);
  r.ppl_change = r.ppl_baseline > 0 ? r.ppl_variant / r.ppl_baseline - 1.0 : 0.0;
  apply_gate(r, gate);
  return r;
}

nlohmann::ordered_json num_json(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

namespace {

nlohmann::ordered_json opt_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

int run_eval(const EvalArgs& a) {
  if (!a.json.empty()) {
    if (Status st = bench::prepare_json_output(a.json, {a.recipe, a.reference, a.text_file});
        !st.ok()) {
      return report_error(st.message());
    }
  }
  auto ref = load(a.reference, 1);
  if (!ref.ok()) return report_error(ref.status().with_context("eval: --vs").message());
  auto var = load(a.recipe, 3);  // the decode check runs 1 and 3 seats
  if (!var.ok()) return report_error(var.status().with_context("eval").message());
  const int64_t n_vocab = ref->engine->decoder().hparams().n_vocab;
  auto text = text_of(a, *ref, *var);
  if (!text.ok()) return report_error(text.status().message());
  const std::vector<int32_t>* tokens = &text->tokens;
  const std::string& source = text->source;
  const int64_t window = text->window, n_windows = text->n_windows;
  const auto n = static_cast<int64_t>(tokens->size());
  const PrecisionThresholds gate = gate_of_recipe(var->recipe.precision);
  std::fprintf(stderr, "rinfer eval: %s against %s: %s of %s, %s of %lld, teacher-forced\n",
               a.recipe.c_str(), a.reference.c_str(), count_of(n, "token").c_str(),
               source.c_str(), count_of(n_windows, "window").c_str(),
               static_cast<long long>(window));

  Totals t;
  std::vector<float> first_ref;  // the first window's reference logits (the decode check)
  Progress bar("eval", n_windows, "window");
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t w = 0; w < n_windows; ++w) {
    const int64_t begin = w * window, len = std::min(window, n - begin);
    const std::span<const int32_t> win(tokens->data() + begin, static_cast<size_t>(len));
    auto lr = teacher_forced_logits(*ref->core, win);
    if (!lr.ok()) return report_error(lr.status().with_context(a.reference).message());
    auto lv = teacher_forced_logits(*var->core, win);
    if (!lv.ok()) return report_error(lv.status().with_context(a.recipe).message());
    t.add(compare_logits(lr->data(), lv->data(), len, n_vocab),
          perplexity_of_logits(*lr, win, n_vocab), perplexity_of_logits(*lv, win, n_vocab), len);
    if (w == 0) first_ref = std::move(lr).value();
    bar.update(w + 1);
  }
  bar.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const PrecisionReport r = t.report(gate);
  // The decode path (one-row kernels, small-batch matvecs, graphs), which teacher forcing does
  // not run: the first window's last positions as decode steps of the recipe.
  const int64_t first_len = std::min(window, n);
  auto dr =
      decode_precision(*var->core, first_ref,
                       std::span<const int32_t>(tokens->data(), static_cast<size_t>(first_len)),
                       kDecodeGateSteps, kDecodeGateSeats, gate);
  if (!dr.ok()) return report_error(dr.status().with_context(a.recipe).message());
  const PrecisionReport& d = *dr;
  const bool passed = r.passed && d.passed;

  const auto bound = [](const std::optional<double>& b, const char* op, double scale,
                        const char* unit) {
    return b ? fmt::format("{} {:g}{}", op, *b * scale, unit) : std::string("-");
  };
  const auto verdict = [](const std::optional<double>& b, bool ok) {
    return b ? (ok ? "ok" : "FAIL") : "";
  };
  // The metric lines of one report against the gate.
  const auto metrics = [&](const PrecisionReport& p) {
    std::string m;
    m += fmt::format("  {:<18} {:>12}  {:<12} {}\n", "metric", "value", "gate", "");
    m += fmt::format("  {:<18} {:>12.4f}  {:<12} {}\n", "top-1 agreement", p.logits.top1_agreement,
                     bound(gate.min_top1, ">=", 1, ""),
                     verdict(gate.min_top1, p.logits.top1_agreement >= gate.min_top1.value_or(0)));
    m += fmt::format("  {:<18} {:>12.4g}  {:<12} {}\n", "mean KL (nats)", p.logits.mean_kl,
                     bound(gate.max_mean_kl, "<=", 1, ""),
                     verdict(gate.max_mean_kl, p.logits.mean_kl <= gate.max_mean_kl.value_or(0)));
    m += fmt::format("  {:<18} {:>12.4g}\n", "max KL (nats)", p.logits.max_kl);
    m += fmt::format("  {:<18} {:>12.4f}  (reference {:.4f})\n", "perplexity", p.ppl_variant,
                     p.ppl_baseline);
    m += fmt::format(
        "  {:<18} {:>+11.2f}%  {:<12} {}\n", "ppl change", 100.0 * p.ppl_change,
        gate.max_ppl_change ? fmt::format("<= +{:g}%", 100.0 * *gate.max_ppl_change) : "-",
        verdict(gate.max_ppl_change, p.ppl_change <= gate.max_ppl_change.value_or(0)));
    return m;
  };
  std::string out = fmt::format("rinfer eval: {} against {}\n{} of {}, {} of {}, {:.1f} s\n\n",
                                a.recipe, a.reference, count_of(n, "token"), source,
                                count_of(n_windows, "window"), window, seconds);
  out += "teacher-forced (every window):\n" + metrics(r);
  out += fmt::format(
      "decode steps (the first window's last {} positions, at {}; the worst "
      "seat):\n",
      d.positions, var->core->options().scheduler.max_seqs >= 3 ? "1 and 3 seats" : "1 seat");
  out += metrics(d);
  std::string failures = r.failures;
  if (!d.failures.empty()) failures += (failures.empty() ? "" : "; ") + d.failures;
  out += fmt::format("gate: {} ({})\n{}\n", gate.to_string(),
                     var->recipe.precision.empty() ? "the defaults" : "the recipe's and defaults",
                     passed ? "PASS" : "FAIL: " + failures);
  if (!write_stdout(out)) return 1;

  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["recipe"] = a.recipe;
    j["reference"] = a.reference;
    j["text"] = source;
    j["tokens"] = n;
    j["window"] = window;
    j["windows"] = n_windows;
    j["seconds"] = seconds;
    j["metrics"] = {{"top1_agreement", num_json(r.logits.top1_agreement)},
                    {"mean_kl", num_json(r.logits.mean_kl)},
                    {"max_kl", num_json(r.logits.max_kl)},
                    {"ppl", num_json(r.ppl_variant)},
                    {"ppl_reference", num_json(r.ppl_baseline)},
                    {"ppl_change", num_json(r.ppl_change)}};
    j["gate"] = {{"min_top1", opt_json(gate.min_top1)},
                 {"max_mean_kl", opt_json(gate.max_mean_kl)},
                 {"max_ppl_change", opt_json(gate.max_ppl_change)},
                 {"text", gate.to_string()}};
    j["decode"] = {{"top1_agreement", num_json(d.logits.top1_agreement)},
                   {"mean_kl", num_json(d.logits.mean_kl)},
                   {"max_kl", num_json(d.logits.max_kl)},
                   {"ppl_change", num_json(d.ppl_change)},
                   {"passed", nlohmann::ordered_json(d.passed)}};
    j["passed"] = passed;
    j["failures"] = failures;
    j["git_sha"] = bench::git_sha(".");
    j["date"] = bench::utc_date();
    if (bench::write_json(a.json, j) != 0) return 1;
  }
  return passed ? 0 : 1;
}

}  // namespace

}  // namespace rinfer::eval_tool

namespace rinfer {

void add_eval_command(CLI::App& app, int& exit_code) {
  using eval_tool::EvalArgs;
  auto* cmd = app.add_subcommand(
      "eval", "Precision of a recipe against a reference recipe; exit 1 when its gate fails");
  auto a = std::make_shared<EvalArgs>();
  cmd->add_option("recipe", a->recipe, "The recipe evaluated (its precision: gate applies)")
      ->required();
  cmd->add_option("--vs", a->reference, "The reference recipe (the baseline)")->required();
  cmd->add_option("--text", a->text_file,
                  "Text to evaluate on (default: the reference's bench.prompts, else GPL-3)");
  cmd->add_option("--tokens", a->tokens, "Tokens of the text to score (default 512)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--window", a->window,
                  "Tokens per teacher-forced sequence (default 256, at most the contexts)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--json", a->json, "Write the metrics and the verdict as JSON");
  cmd->add_flag("--per-layer", a->per_layer,
                "Sensitivity: quantize one layer at a time (the others kept), rank the layers by "
                "the error each adds, then keep the worst until the gate passes");
  cmd->add_option("--max-keep", a->max_keep, "--per-layer: layers it may keep at most (default 8)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  cmd->callback([&exit_code, a] {
    exit_code = a->per_layer ? eval_tool::run_eval_layers(*a) : eval_tool::run_eval(*a);
  });
}

}  // namespace rinfer
