// `rinfer calibrate RECIPE TEXT -o FILE [--alpha A] [--smooth LIST] [--tokens N] [--window W]`:
// runs the recipe's model unquantized (its stored weights, f32 activations) teacher-forced over
// TEXT in windows of W tokens, records through the taps (models/taps.h) the largest |x| of every
// channel of each layer's normed attention and MLP inputs, the attention's output and the MLP's
// activation, and writes them with the migration strength alpha and the inputs to smooth as a
// calibration file (formats/calibration.h) that a recipe names as
// strategies.quantization.smoothing. Prints per layer how far the largest channel stands above
// the median one (the outliers SmoothQuant moves into the weights).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/output_file.h"
#include "engine/llm_engine.h"
#include "formats/calibration.h"
#include "models/taps.h"
#include "recipe/recipe.h"
#include "tools/bench_text.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct CalibrateArgs {
  std::string recipe, text, out;
  double alpha = 0.5;
  std::string smooth = "attn,mlp,down";
  int64_t tokens = 2048;
  int64_t window = 0;  // 0: 256, or the recipe's context when shorter
};

// Keeps the running max |x| of each channel of the attention's and the MLP's normed inputs, of
// the attention's output and of the MLP's activation.
class AbsMaxSink : public TapSink {
 public:
  AbsMaxSink(int64_t n_layer, int64_t n_embd, int64_t n_ff, int64_t q_dim)
      : attn_(static_cast<size_t>(n_layer), std::vector<float>(static_cast<size_t>(n_embd))),
        mlp_(attn_),
        down_(static_cast<size_t>(n_layer), std::vector<float>(static_cast<size_t>(n_ff))),
        o_(static_cast<size_t>(n_layer), std::vector<float>(static_cast<size_t>(q_dim))) {}
  bool wants(TapKind kind) const override {
    return kind == TapKind::kAttnNorm || kind == TapKind::kMlpNorm || kind == TapKind::kMlpAct ||
           kind == TapKind::kAttnCtx;
  }
  void record(TapKind kind, int32_t layer, const float* rows, int64_t n_rows,
              int64_t width) override {
    auto& all = kind == TapKind::kAttnNorm  ? attn_
                : kind == TapKind::kMlpNorm ? mlp_
                : kind == TapKind::kAttnCtx ? o_
                                            : down_;
    if (layer < 0 || static_cast<size_t>(layer) >= all.size() ||
        width != static_cast<int64_t>(all[0].size())) {
      if (status_.ok()) {
        status_ = internal_error("calibrate: a {} tap of layer {} with {} values a row",
                                 tap_name(kind), layer, width);
      }
      return;
    }
    std::vector<float>& m = all[static_cast<size_t>(layer)];
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* x = rows + r * width;
      for (int64_t j = 0; j < width; ++j) {
        const float a = std::fabs(x[j]);
        if (!(a <= m[static_cast<size_t>(j)])) m[static_cast<size_t>(j)] = a;  // NaN sticks
      }
    }
  }
  std::vector<std::vector<float>> attn_, mlp_, down_, o_;
  Status status_;
};

// max over median of one layer's channel maxima.
double outlier_ratio(std::vector<float> v) {
  const float mx = *std::max_element(v.begin(), v.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  const float med = v[v.size() / 2];
  return med > 0 ? mx / med : 0.0;
}

Status run(const CalibrateArgs& a) {
  auto smooth = parse_smooth_inputs(a.smooth);
  if (!smooth.ok()) return smooth.status().with_context("--smooth");
  RINFER_ASSIGN_OR_RETURN(RecipeConfig recipe, load_recipe(a.recipe));
  if (recipe.scenario != "llm-chat" && recipe.scenario != "llm-serve") {
    return invalid_argument(
        "{} is a {} recipe: rinfer calibrate measures the language models' "
        "activations (llm-chat, llm-serve)",
        a.recipe, recipe.scenario);
  }
  if (recipe.device.is_cuda()) {
    return invalid_argument(
        "{} runs on {}: rinfer calibrate measures on the CPU (the MLP's "
        "activation and the attention's output are tapped there); use the recipe's CPU twin",
        a.recipe, recipe.device.to_string());
  }
  int64_t window = a.window;
  if (window == 0) {
    window = recipe.context_length > 0 ? std::min<int64_t>(256, recipe.context_length) : 256;
  } else if (recipe.context_length > 0 && window > recipe.context_length) {
    return invalid_argument("--window {} is longer than {}'s context of {} tokens", window,
                            a.recipe, recipe.context_length);
  }
  // The model as stored, with f32 activations: the activations the quantized recipe will see,
  // before any of its own rounding.
  QuantizationConfig& q = recipe.strategies.quantization;
  q = QuantizationConfig();
  q.activations = ActivationFormat::kFloat;
  LlmEngineOptions eo;
  eo.model_only = true;
  RINFER_ASSIGN_OR_RETURN(auto engine, LlmEngine::create(recipe, eo));
  RINFER_ASSIGN_OR_RETURN(EngineCore * core, engine->scoring_core());
  RINFER_ASSIGN_OR_RETURN(const Tokenizer* tok,
                          engine->sample().require_tokenizer("rinfer calibrate"));
  std::string source;
  RINFER_ASSIGN_OR_RETURN(
      std::vector<int32_t> ids,
      text_tokens(*tok, BenchText{a.text, "the calibration text"}, a.tokens, &source));
  const DecoderHParams& hp = engine->decoder().hparams();
  AbsMaxSink sink(hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim);
  const auto none = [](int64_t, std::span<const float>) { return ok_status(); };
  const auto t0 = std::chrono::steady_clock::now();
  int64_t windows = 0;
  for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(window), ++windows) {
    const size_t n = std::min(ids.size() - at, static_cast<size_t>(window));
    if (n < 2 && windows > 0) break;
    RINFER_RETURN_IF_ERROR(core->score(std::span<const int32_t>(ids).subspan(at, n),
                                       static_cast<int64_t>(n) - 1, 0, none, &sink));
    RINFER_RETURN_IF_ERROR(sink.status_);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CalibrationStats c;
  c.model = std::filesystem::path(engine->model_path()).filename().string();
  c.n_layer = hp.n_layer;
  c.n_embd = hp.n_embd;
  c.n_ff = hp.n_ff;
  c.q_dim = hp.n_head * hp.head_dim;
  c.tokens = static_cast<int64_t>(ids.size());
  c.alpha = a.alpha;
  c.smooth = *smooth;
  c.attn_in = std::move(sink.attn_);
  c.mlp_in = std::move(sink.mlp_);
  c.down_in = std::move(sink.down_);
  c.o_in = std::move(sink.o_);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const auto at = static_cast<size_t>(l);
    for (const auto* v : {&c.attn_in[at], &c.o_in[at], &c.mlp_in[at], &c.down_in[at]}) {
      for (float x : *v) {
        if (!std::isfinite(x)) {
          return data_loss(
              "layer {}: an activation of the model is not finite ({}): nothing "
              "to calibrate on",
              l, x);
        }
      }
    }
  }
  RINFER_ASSIGN_OR_RETURN(const std::string text, calibration_json(c));
  RINFER_RETURN_IF_ERROR(write_file_atomically(a.out, text, {a.recipe, a.text}));
  std::printf("rinfer calibrate: %s on %s: %lld tokens of %s in %lld windows, %.1f s\n",
              a.recipe.c_str(), c.model.c_str(), static_cast<long long>(c.tokens), source.c_str(),
              static_cast<long long>(windows), secs);
  std::printf("largest channel over the median one, by layer (the outliers smoothing moves):\n");
  std::printf("%6s %12s %12s %12s %12s\n", "layer", "attn input", "o input", "mlp input",
              "down input");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const auto at = static_cast<size_t>(l);
    std::printf("%6lld %12.1f %12.1f %12.1f %12.1f\n", static_cast<long long>(l),
                outlier_ratio(c.attn_in[at]), outlier_ratio(c.o_in[at]),
                outlier_ratio(c.mlp_in[at]), outlier_ratio(c.down_in[at]));
  }
  std::printf("alpha %.2f, smoothing %s; wrote %s (strategies.quantization.smoothing)\n", c.alpha,
              smooth_inputs_text(c.smooth).c_str(), a.out.c_str());
  return ok_status();
}

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd =
      app.add_subcommand("calibrate",
                         "Measure a language model's activations over a text for SmoothQuant "
                         "(strategies.quantization.smoothing)");
  cmd->add_option("recipe", a->recipe, "The recipe whose model is measured")->required();
  cmd->add_option("text", a->text, "Calibration text (UTF-8; not the text you evaluate on)")
      ->required();
  cmd->add_option("-o,--output", a->out, "The calibration file to write (JSON)")->required();
  cmd->add_option("--alpha", a->alpha,
                  "Migration strength: how much of the activations' range moves into the "
                  "weights (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--smooth", a->smooth,
                  "The inputs to smooth, of attn (q, k, v's), o (the output projection's), mlp "
                  "(gate and up's), down (ffn_down's) (default attn,mlp,down; every input's "
                  "maxima are recorded)");
  cmd->add_option("--tokens", a->tokens, "Tokens of the text to run (default 2048)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  cmd->add_option("--window", a->window,
                  "Tokens per teacher-forced sequence (default 256, at most the context)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->callback([&exit_code, a] {
    const Status st = run(*a);
    exit_code = st.ok() ? 0 : report_error(st.to_string());
  });
}

}  // namespace rinfer
