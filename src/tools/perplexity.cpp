// `rinfer perplexity <recipe> <text-file> [--ctx N] [--max-windows K]`: teacher-forced
// perplexity of the recipe's model on a text file, scored as llama.cpp does (windows of the
// context length, second half of each window scored; see engine/perplexity.h).
#include "engine/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "core/input_file.h"
#include "core/progress.h"
#include "engine/llm_engine.h"
#include "recipe/recipe.h"
#include "tools/input.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct PplArgs {
  std::string recipe;
  std::string text_file;
  std::optional<int64_t> ctx;
  int64_t max_windows = 0;
  std::optional<int> threads;
  bool allow_invalid_utf8 = false;
};

int run_perplexity(const PplArgs& a) {
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().message());
  if (a.ctx) {
    recipe->context_length = *a.ctx;
    recipe->strategies.origins.set("context_length", "--ctx");
  }
  if (a.threads) {
    recipe->strategies.threads = *a.threads;
    recipe->strategies.origins.set("strategies.threads.count", "--threads");
  }
  warn_if_oversubscribed(recipe->strategies.threads,
                         recipe->origins().where("strategies.threads.count"));
  if (recipe->context_length == 0) recipe->context_length = 512;
  // Read before the model loads; never blocks on a FIFO (core/input_file.h).
  auto text = read_regular_file(a.text_file);
  if (!text.ok()) return report_error(text.status().with_context("the text file").message());
  if (Status st = check_utf8(*text, "the text file '" + a.text_file + "'", a.allow_invalid_utf8);
      !st.ok()) {
    return report_error(st.message());
  }
  LlmEngineOptions eo;
  eo.model_only = true;  // scoring_core() makes the one core it needs
  auto engine = LlmEngine::create(*recipe, eo);
  if (!engine.ok()) return report_error(engine.status().message());
  LlmEngine& e = **engine;

  auto tokenizer = e.sample().require_tokenizer("perplexity over a text");
  if (!tokenizer.ok()) return report_error(tokenizer.status().message());
  const Tokenizer& tok = **tokenizer;
  auto ids = tok.encode(*text, EncodeOptions{.add_special = false, .parse_special = false});
  if (!ids.ok()) return report_error(ids.status().message());

  auto core = e.scoring_core();
  if (!core.ok()) return report_error(core.status().message());
  PerplexityOptions opts;
  opts.n_ctx = e.context_length();
  opts.max_windows = a.max_windows;
  opts.bos = tok.add_bos() ? tok.bos() : -1;
  const int64_t available = static_cast<int64_t>(ids->size()) / opts.n_ctx;
  const int64_t total = a.max_windows > 0 ? std::min(available, a.max_windows) : available;
  std::fprintf(stderr, "%s: %zu tokens, %lld windows of %lld (second half scored); %s\n",
               a.text_file.c_str(), ids->size(), static_cast<long long>(total),
               static_cast<long long>(opts.n_ctx), e.recipe().strategies_summary().c_str());

  Progress bar("perplexity", total, "window");
  auto progress = [&](int64_t done, int64_t, double ppl) {
    bar.update(done, fmt::format("ppl {:.4f}", ppl));
  };
  auto r = compute_perplexity(**core, *ids, opts, progress);
  bar.finish();
  if (!r.ok()) return report_error(r.status().message());
  std::printf("perplexity %.4f +/- %.4f over %lld windows of %lld tokens (%lld scored), %.1f s\n",
              r->ppl, r->ppl_stderr, static_cast<long long>(r->windows),
              static_cast<long long>(opts.n_ctx), static_cast<long long>(r->scored_tokens),
              r->seconds);
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a recipe's model on a text file (llama.cpp's scoring)");
  auto a = std::make_shared<PplArgs>();
  cmd->add_option("recipe", a->recipe, "Recipe YAML (model, kernels, threads)")->required();
  cmd->add_option("text-file", a->text_file, "A UTF-8 text file")->required();
  cmd->add_option("--ctx", a->ctx, "Window length in tokens (default: the recipe's context)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--max-windows", a->max_windows, "Score at most K windows (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--allow-invalid-utf8", a->allow_invalid_utf8,
                "Score a file that is not valid UTF-8 as raw bytes (default: an error)");
  cmd->callback([&exit_code, a] { exit_code = run_perplexity(*a); });
}

}  // namespace rinfer
