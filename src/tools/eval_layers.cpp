// `rinfer eval RECIPE --vs REFERENCE --per-layer [--max-keep K]`: which layers a quantized
// recipe should keep in their stored precision (strategies.quantization.keep_layers). Each layer
// is quantized on its own in the recipe's weight format, every other layer kept, and scored
// teacher-forced against the reference on the same text and windows as `rinfer eval`: the error
// that layer's quantization adds alone. The layers are ranked by how far that error is from the
// recipe's `precision:` gate (gate_distance; the worst first); then
// the recipe is scored with the worst 1, 2, ... up to K layers kept, until its `precision:` gate
// passes. Prints the table and the smallest keep list that passes (exit 0), or says none of up
// to K layers does (exit 1). The reference's logits are computed once and held.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "core/progress.h"
#include "tools/bench_report.h"
#include "tools/eval_internal.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer::eval_tool {

namespace {

// The reference logits of every window, held for the sweep: at most this many bytes.
constexpr double kMaxHeldBytes = 4.0 * (1 << 30);

struct Scored {
  std::vector<int64_t> keep;  // the layers kept in their stored precision
  int64_t layer = -1;         // the one layer quantized, for the sweep's rows
  PrecisionReport report;
};

// How far a report is from its gate: the largest of its metrics over their bounds (top-1 as the
// disagreement over the disagreement allowed; a perplexity drop counts as none), 1 at the edge.
// The mean KL alone when the gate has no bound.
double gate_distance(const PrecisionReport& r, const PrecisionThresholds& g) {
  const LogitComparison& c = r.logits;
  double d = 0.0;
  bool bounded = false;
  auto over = [&](double v, double bound) {
    d = std::max(d, bound > 0 ? v / bound : (v > 0 ? 1e30 : 0.0));
    bounded = true;
  };
  if (g.min_top1) over(1.0 - c.top1_agreement, 1.0 - *g.min_top1);
  if (g.max_mean_kl) over(c.mean_kl, *g.max_mean_kl);
  if (g.max_ppl_change) over(std::max(r.ppl_change, 0.0), *g.max_ppl_change);
  return bounded ? d : c.mean_kl;
}

std::string list_of(const std::vector<int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

nlohmann::ordered_json scored_json(const Scored& s) {
  nlohmann::ordered_json j;
  if (s.layer >= 0) j["layer"] = s.layer;
  j["keep"] = s.keep;
  j["top1_agreement"] = num_json(s.report.logits.top1_agreement);
  j["mean_kl"] = num_json(s.report.logits.mean_kl);
  j["max_kl"] = num_json(s.report.logits.max_kl);
  j["ppl_change"] = num_json(s.report.ppl_change);
  j["passed"] = s.report.passed;
  return j;
}

std::string row(const std::string& what, const PrecisionReport& r, const std::string& last) {
  return fmt::format("| {} | {:.4f} | {:.4g} | {:+.2f}% | {} |\n", what, r.logits.top1_agreement,
                     r.logits.mean_kl, 100.0 * r.ppl_change, last);
}

}  // namespace

int run_eval_layers(const EvalArgs& a) {
  if (!a.json.empty()) {
    if (Status st = bench::prepare_json_output(a.json, {a.recipe, a.reference, a.text_file});
        !st.ok()) {
      return report_error(st.message());
    }
  }
  auto base = load_recipe(a.recipe);
  if (!base.ok()) return report_error(base.status().with_context("eval").message());
  const std::optional<DType> format = base->strategies.quantization.weights;
  if (!format) {
    return report_error(fmt::format(
        "eval --per-layer: {} converts no weights (strategies.quantization.weights): the sweep "
        "quantizes one layer at a time in that format",
        a.recipe));
  }
  auto ref = load(a.reference, 1);
  if (!ref.ok()) return report_error(ref.status().with_context("eval: --vs").message());
  const int64_t n_layer = ref->engine->decoder().hparams().n_layer;
  const int64_t n_vocab = ref->engine->decoder().hparams().n_vocab;
  auto variant = [&](std::vector<int64_t> keep) -> Result<Loaded> {
    RecipeConfig r = *base;
    r.strategies.quantization.keep_layers = std::move(keep);
    return load(std::move(r), a.recipe, 1);
  };
  auto every = variant({});
  if (!every.ok()) return report_error(every.status().with_context("eval").message());
  auto text = text_of(a, *ref, *every);
  if (!text.ok()) return report_error(text.status().message());
  const auto n = static_cast<int64_t>(text->tokens.size());
  const double held = static_cast<double>(n) * static_cast<double>(n_vocab) * 4.0;
  if (held > kMaxHeldBytes) {
    return report_error(fmt::format(
        "eval --per-layer: the reference logits of {} tokens would take {:.1f} GiB (at most "
        "{:.0f} are held): ask for fewer --tokens",
        n, held / (1 << 30), kMaxHeldBytes / (1 << 30)));
  }
  const PrecisionThresholds gate = gate_of_recipe(base->precision);
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<std::vector<float>> ref_logits(static_cast<size_t>(text->n_windows));
  std::vector<double> ref_ppl(ref_logits.size());
  auto window_of = [&](int64_t w) {
    const int64_t begin = w * text->window, len = std::min(text->window, n - begin);
    return std::span<const int32_t>(text->tokens.data() + begin, static_cast<size_t>(len));
  };
  for (int64_t w = 0; w < text->n_windows; ++w) {
    auto lr = teacher_forced_logits(*ref->core, window_of(w));
    if (!lr.ok()) return report_error(lr.status().with_context(a.reference).message());
    ref_ppl[static_cast<size_t>(w)] = perplexity_of_logits(*lr, window_of(w), n_vocab);
    ref_logits[static_cast<size_t>(w)] = std::move(lr).value();
  }
  auto score = [&](Loaded& v, Scored& s) -> Status {
    Totals t;
    for (int64_t w = 0; w < text->n_windows; ++w) {
      const auto win = window_of(w);
      const auto len = static_cast<int64_t>(win.size());
      RINFER_ASSIGN_OR_RETURN(std::vector<float> lv, teacher_forced_logits(*v.core, win));
      t.add(compare_logits(ref_logits[static_cast<size_t>(w)].data(), lv.data(), len, n_vocab),
            ref_ppl[static_cast<size_t>(w)], perplexity_of_logits(lv, win, n_vocab), len);
    }
    s.report = t.report(gate);
    return ok_status();
  };
  auto score_keep = [&](std::vector<int64_t> keep, int64_t layer) -> Result<Scored> {
    Scored s;
    s.keep = keep;
    s.layer = layer;
    RINFER_ASSIGN_OR_RETURN(Loaded v, variant(std::move(keep)));
    RINFER_RETURN_IF_ERROR(score(v, s));
    return s;
  };

  std::fprintf(stderr,
               "rinfer eval --per-layer: %s (weights %s) against %s: %s, each layer alone, "
               "teacher-forced\n",
               a.recipe.c_str(), weight_format_name(format).c_str(), a.reference.c_str(),
               count_of(n, "token").c_str());
  Scored all;
  if (Status st = score(*every, all); !st.ok()) {
    return report_error(st.with_context(a.recipe).message());
  }
  *every = Loaded();  // its memory goes before the next load
  std::vector<Scored> alone;
  Progress bar("layers", n_layer, "layer");
  for (int64_t il = 0; il < n_layer; ++il) {
    std::vector<int64_t> keep;
    for (int64_t k = 0; k < n_layer; ++k) {
      if (k != il) keep.push_back(k);
    }
    auto s = score_keep(std::move(keep), il);
    if (!s.ok())
      return report_error(s.status().with_context(fmt::format("layer {}", il)).message());
    alone.push_back(std::move(s).value());
    bar.update(il + 1);
  }
  bar.finish();
  std::vector<int64_t> ranked(static_cast<size_t>(n_layer));
  std::iota(ranked.begin(), ranked.end(), 0);
  std::vector<double> dist(alone.size());
  for (size_t i = 0; i < alone.size(); ++i) dist[i] = gate_distance(alone[i].report, gate);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t x, int64_t y) {
    return dist[static_cast<size_t>(x)] > dist[static_cast<size_t>(y)];
  });

  // The worst layers kept, one more at a time, until the gate passes.
  all.keep = {};
  std::vector<Scored> search = {all};
  const int64_t max_keep = std::min(a.max_keep, n_layer);
  for (int64_t k = 1; !search.back().report.passed && k <= max_keep; ++k) {
    std::vector<int64_t> keep(ranked.begin(), ranked.begin() + k);
    std::sort(keep.begin(), keep.end());
    auto s = score_keep(std::move(keep), -1);
    if (!s.ok()) return report_error(s.status().with_context(a.recipe).message());
    search.push_back(std::move(s).value());
  }
  const bool found = search.back().report.passed;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<int64_t> rank_of(static_cast<size_t>(n_layer));
  for (size_t r = 0; r < ranked.size(); ++r) rank_of[static_cast<size_t>(ranked[r])] = r + 1;
  std::string out = fmt::format(
      "rinfer eval --per-layer: {} (weights {}) against {}\n{} of {}, {} of {}, {:.1f} s\n\n",
      a.recipe, weight_format_name(format), a.reference, count_of(n, "token"), text->source,
      count_of(text->n_windows, "window"), text->window, seconds);
  out += "Each layer quantized alone (every other layer kept):\n\n";
  out += "| layer | top-1 | mean KL | ppl change | to the gate | rank |\n";
  out += "|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < alone.size(); ++i) {
    out += row(std::to_string(alone[i].layer), alone[i].report,
               fmt::format("x{:.3g} | {}", dist[i], rank_of[i]));
  }
  out += fmt::format("\nThe worst layers kept (gate: {}):\n\n", gate.to_string());
  out += "| keep | top-1 | mean KL | ppl change | gate |\n|---|---|---|---|---|\n";
  for (const Scored& s : search) {
    out += row(s.keep.empty() ? "none (every layer quantized)" : list_of(s.keep), s.report,
               s.report.passed ? "pass" : "FAIL");
  }
  out += found ? fmt::format("\nkeep_layers: {} passes the gate\n", list_of(search.back().keep))
               : fmt::format("\nno {} of the worst layers pass the gate\n",
                             max_keep == 1 ? std::string("one") : fmt::format("{}", max_keep));
  if (!write_stdout(out)) return 1;

  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["recipe"] = a.recipe;
    j["reference"] = a.reference;
    j["weights"] = weight_format_name(format);
    j["text"] = text->source;
    j["tokens"] = n;
    j["window"] = text->window;
    j["windows"] = text->n_windows;
    j["seconds"] = seconds;
    j["gate"] = gate.to_string();
    j["layers"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < alone.size(); ++i) {
      j["layers"].push_back(scored_json(alone[i]));
      j["layers"].back()["gate_distance"] = num_json(dist[i]);
    }
    j["ranking"] = ranked;
    j["keep_search"] = nlohmann::ordered_json::array();
    for (const Scored& s : search) j["keep_search"].push_back(scored_json(s));
    j["suggested_keep_layers"] =
        found ? nlohmann::ordered_json(search.back().keep) : nlohmann::ordered_json(nullptr);
    j["git_sha"] = bench::git_sha(".");
    j["date"] = bench::utc_date();
    if (bench::write_json(a.json, j) != 0) return 1;
  }
  return found ? 0 : 1;
}

}  // namespace rinfer::eval_tool
