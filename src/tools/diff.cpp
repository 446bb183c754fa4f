// `rinfer diff A.yaml B.yaml [-p PROMPT | --tokens FILE] [--threshold X] [--json FILE]
//  [--svg FILE]`: runs two recipes of one model (baseline against optimized, CPU against CUDA,
// bf16 against a quantized format) on the same tokens, teacher-forced through the engine core
// (EngineCore::score with taps, models/taps.h; an embedding recipe: one forward pass of the
// encoder, Embedder::embed_tapped, whose last tap is the pooled vector), and prints per layer
// and op the relative L2,
// cosine and max |diff| of B's activations against A's (engine/layer_diff.h), the logits' rel
// L2, top-1 agreement and KL(A || B), the first tap whose error passes the threshold, and the
// layer whose residual stream grew its error most. A runs first and its taps are kept in memory;
// then A is unloaded and B runs, compared as it goes. JSON: one row per layer and op; SVG: the
// error by layer of each op.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/strings.h"
#include "engine/classifier.h"
#include "engine/embedder.h"
#include "engine/layer_diff.h"
#include "engine/llm_engine.h"
#include "engine/logit_metrics.h"
#include "image/image.h"
#include "recipe/recipe.h"
#include "tools/bench_report.h"
#include "tools/input.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

// Used when neither -p nor --tokens is given: plain prose that every tokenizer splits into a
// few dozen tokens.
constexpr const char* kDefaultPrompt =
    "The lighthouse keeper climbed the stairs at dusk, lit the lamp, and wrote in his log that "
    "the sea was calm, the wind came from the west, and three ships had passed before noon.";

struct DiffArgs {
  std::string a, b;
  std::optional<std::string> prompt;
  std::string tokens_file;
  std::string image;  // an image-classification recipe's input (default: a built-in pattern)
  double threshold = 0.05;
  std::string json;
  std::string svg;
};

// What one run leaves behind.
struct RunInfo {
  std::string recipe, model, device, summary, scenario;
  int64_t n_layer = 0, n_embd = 0, n_vocab = 0;
  int64_t rows = 0;  // the tokens it ran
  double seconds = 0;
};

// Token ids written as text: integers separated by spaces, commas or newlines, optionally in
// brackets (a JSON list). Errors name the file and the offending text.
Result<std::vector<int32_t>> read_token_file(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, 64u << 20));
  for (char& c : text) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream in(text);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
      return invalid_argument("{}: '{}' (token {}) is not a token id", path, display_text(word),
                              ids.size());
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return invalid_argument("{}: no token ids", path);
  return ids;
}

// What a run of `recipe` over `model` says of itself (its sizes set by the caller).
RunInfo run_info(const RecipeConfig& recipe, const std::string& model) {
  RunInfo info;
  info.recipe = recipe.path;
  info.model = model;
  info.device = recipe.device.to_string();
  info.summary = recipe.strategies_summary();
  info.scenario = recipe.scenario;
  return info;
}

// The same as run_one for an embedding recipe: the encoder's one pass over the input (the
// prompt through this model's tokenizer, or --tokens wrapped in [CLS] ... [SEP]), with taps;
// `tokens` the ids it ran (with a prompt, B must tokenize it the same way). No logits.
Result<RunInfo> run_encoder(const RecipeConfig& recipe, const DiffArgs& a, const char* which,
                            std::vector<int32_t>& tokens, TapSink& taps) {
  RINFER_ASSIGN_OR_RETURN(auto embedder, Embedder::create(recipe));
  RunInfo info = run_info(recipe, embedder->model_path());
  const EncoderHParams& hp = embedder->model().hparams();
  info.n_layer = hp.n_layer;
  info.n_embd = hp.n_embd;
  info.n_vocab = hp.n_vocab;
  TokenEncoding enc;
  if (a.tokens_file.empty()) {
    const std::string texts[1] = {a.prompt.value_or(kDefaultPrompt)};
    RINFER_ASSIGN_OR_RETURN(auto encs, embedder->tokenize(texts));
    enc = std::move(encs.front());
    if (!tokens.empty() && enc.ids != tokens) {
      return invalid_argument(
          "{} ({}) tokenizes the prompt into other ids than the first recipe's ({} against {} "
          "tokens): rinfer diff compares variants of one model; give both the same ids with "
          "--tokens",
          which, recipe.path, enc.ids.size(), tokens.size());
    }
  } else {
    RINFER_ASSIGN_OR_RETURN(enc, embedder->wrap_ids(tokens));
  }
  std::fprintf(stderr, "rinfer diff: %s %s: %s on %s, %zu tokens (%s)\n", which,
               recipe.path.c_str(), info.model.c_str(), info.device.c_str(), enc.ids.size(),
               info.summary.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  RINFER_RETURN_IF_ERROR(embedder->embed_tapped(enc, taps).status());
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.tokens_file.empty()) tokens = enc.ids;
  info.rows = static_cast<int64_t>(enc.ids.size());
  return info;
}

// The input of a classifier run without --image: 256 x 192 pixels of smooth gradients and
// stripes, decoded from nothing, the same on every machine.
Image builtin_image() {
  Image img;
  img.width = 256;
  img.height = 192;
  img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      uint8_t* p = img.rgb.data() + (static_cast<size_t>(y) * img.width + x) * 3;
      p[0] = static_cast<uint8_t>(x);
      p[1] = static_cast<uint8_t>((y * 4 / 3) ^ (x / 16 % 2 ? 0x40 : 0));
      p[2] = static_cast<uint8_t>(128 + 100 * std::sin((x + 2 * y) * 0.05));
    }
  }
  return img;
}

// The same as run_one for an image-classification recipe: one image (--image, else
// builtin_image()) preprocessed by the recipe and run with taps; its logits row to `logits`.
Result<RunInfo> run_classifier(const RecipeConfig& recipe, const DiffArgs& a, const char* which,
                               TapSink& taps, std::vector<float>& logits) {
  RINFER_ASSIGN_OR_RETURN(auto classifier, Classifier::create(recipe));
  RunInfo info = run_info(recipe, classifier->model_path());
  info.n_embd = classifier->input_size();
  info.n_vocab = classifier->n_classes();
  info.rows = 1;
  Image img;
  if (a.image.empty()) {
    img = builtin_image();
  } else {
    RINFER_ASSIGN_OR_RETURN(img, load_image(a.image));
  }
  const std::vector<float> pixels = classifier->preprocess(img);
  std::fprintf(stderr, "rinfer diff: %s %s: %s on %s, one image of %dx%d (%s)\n", which,
               recipe.path.c_str(), info.model.c_str(), info.device.c_str(), img.width, img.height,
               info.summary.c_str());
  logits.assign(static_cast<size_t>(info.n_vocab), 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  RINFER_RETURN_IF_ERROR(classifier->logits(pixels, 1, logits.data(), nullptr, &taps));
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

// Loads `recipe_path` alone (the model, one seat) and scores `tokens` with `taps`, appending
// every row's logits to `logits`. `tokens` empty: made from the prompt with this model's
// tokenizer; otherwise, with a prompt, this model must tokenize it the same way. An embedding
// recipe runs its encoder instead (run_encoder).
Result<RunInfo> run_one(const std::string& recipe_path, const DiffArgs& a, const char* which,
                        std::vector<int32_t>& tokens, TapSink& taps, std::vector<float>& logits) {
  RINFER_ASSIGN_OR_RETURN(RecipeConfig recipe, load_recipe(recipe_path));
  const bool classifier = recipe.scenario == "image-classification";
  if (!a.image.empty() && !classifier) {
    return invalid_argument("{} is a {} recipe: --image is for image-classification recipes",
                            recipe_path, recipe.scenario);
  }
  if (classifier && (a.prompt || !a.tokens_file.empty())) {
    return invalid_argument(
        "{} is an image-classification recipe: give --image, not -p or --tokens", recipe_path);
  }
  if (recipe.scenario == "embedding" || classifier) {
    return classifier ? run_classifier(recipe, a, which, taps, logits)
                      : run_encoder(recipe, a, which, tokens, taps);
  }
  LlmEngineOptions eo;
  eo.model_only = true;
  RINFER_ASSIGN_OR_RETURN(auto engine, LlmEngine::create(recipe, eo));
  LlmEngine& e = *engine;
  RunInfo info = run_info(recipe, e.model_path());
  const DecoderHParams& hp = e.decoder().hparams();
  info.n_layer = hp.n_layer;
  info.n_embd = hp.n_embd;
  info.n_vocab = hp.n_vocab;
  if (a.tokens_file.empty()) {
    const std::string prompt = a.prompt.value_or(kDefaultPrompt);
    RINFER_ASSIGN_OR_RETURN(const Tokenizer* tok,
                            e.sample().require_tokenizer("rinfer diff without --tokens"));
    (void)tok;
    RINFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids, e.sample().preprocess_raw(prompt));
    if (tokens.empty()) {
      tokens = std::move(ids);
    } else if (ids != tokens) {
      return invalid_argument(
          "{} ({}) tokenizes the prompt into other ids than the first recipe's ({} against {} "
          "tokens): rinfer diff compares variants of one model; give both the same ids with "
          "--tokens",
          which, recipe_path, ids.size(), tokens.size());
    }
  }
  RINFER_ASSIGN_OR_RETURN(EngineCore * core, e.scoring_core());
  std::fprintf(stderr, "rinfer diff: %s %s: %s on %s, %zu tokens (%s)\n", which,
               recipe_path.c_str(), e.model_path().c_str(), info.device.c_str(), tokens.size(),
               info.summary.c_str());
  logits.clear();
  const auto t0 = std::chrono::steady_clock::now();
  RINFER_RETURN_IF_ERROR(core->score(
      tokens, 0, 0,
      [&](int64_t, std::span<const float> rows) {
        logits.insert(logits.end(), rows.begin(), rows.end());
        return ok_status();
      },
      &taps));
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  info.rows = static_cast<int64_t>(tokens.size());
  return info;
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  if (v == 0) return "0";
  return fmt::format("{:.3e}", v);
}

nlohmann::ordered_json json_num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}

nlohmann::ordered_json run_json(const RunInfo& r) {
  return {{"recipe", r.recipe},   {"model", r.model},     {"device", r.device},
          {"strategies", r.summary}, {"n_layer", r.n_layer}, {"seconds", r.seconds}};
}

// log10(rel L2) of each op against the layer (embed at -1), one line per op kind.
std::string svg_plot(const std::vector<TapDiff>& diffs, int64_t n_layer, double threshold) {
  const double w = 760, h = 420, left = 70, right = 150, top = 30, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  double lo = std::log10(threshold), hi = lo;
  for (const TapDiff& d : diffs) {
    if (d.kind == TapKind::kLogits || d.kind == TapKind::kPooled || !(d.rel_l2 > 0) ||
        !std::isfinite(d.rel_l2)) {
      continue;
    }
    lo = std::min(lo, std::log10(d.rel_l2));
    hi = std::max(hi, std::log10(d.rel_l2));
  }
  lo = std::floor(lo);
  hi = std::max(std::ceil(hi), lo + 1);
  const auto x_of = [&](double layer) { return left + pw * (layer + 1) / std::max(1.0, static_cast<double>(n_layer)); };
  const auto y_of = [&](double v) {
    const double l = v > 0 && std::isfinite(v) ? std::clamp(std::log10(v), lo, hi) : lo;
    return top + ph * (hi - l) / (hi - lo);
  };
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"18\">rel L2 of B against A, by layer (log "
      "scale)</text>\n",
      w, h, left);
  for (double e = lo; e <= hi; e += 1) {
    o += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/><text "
        "x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">1e{5}</text>\n",
        left, left + pw, y_of(std::pow(10.0, e)), left - 6, y_of(std::pow(10.0, e)) + 4,
        static_cast<int>(e));
  }
  o += fmt::format(
      "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#c00\" "
      "stroke-dasharray=\"4 3\"/>\n<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">layer</text>\n",
      left, left + pw, y_of(threshold), h - 12);
  const int64_t step = std::max<int64_t>(1, (n_layer + 9) / 10);
  for (int64_t l = 0; l < n_layer; l += step) {
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                     x_of(static_cast<double>(l)), top + ph + 16, l);
  }
  const char* colors[] = {"#555",    "#1f77b4", "#ff7f0e", "#2ca02c",
                          "#d62728", "#000",    "#8c564b", "#9467bd"};
  int legend = 0;
  for (int k = 0; k < kTapKindCount; ++k) {
    const auto kind = static_cast<TapKind>(k);
    if (kind == TapKind::kLogits || kind == TapKind::kEmbed || kind == TapKind::kPooled ||
        kind == TapKind::kMlpAct || kind == TapKind::kAttnCtx) {
      continue;
    }
    std::string pts;
    for (const TapDiff& d : diffs) {
      if (d.kind == kind) pts += fmt::format("{:.1f},{:.1f} ", x_of(d.layer), y_of(d.rel_l2));
    }
    if (pts.empty()) continue;
    o += fmt::format(
        "<polyline fill=\"none\" stroke=\"{0}\" stroke-width=\"{1}\" points=\"{2}\"/>\n"
        "<text x=\"{3}\" y=\"{4}\" fill=\"{0}\">{5}</text>\n",
        colors[k], kind == TapKind::kBlockOut ? 2.5 : 1.2, pts, left + pw + 12, top + 16 * ++legend,
        tap_name(kind));
  }
  return o + "</svg>\n";
}

int run_diff(const DiffArgs& a) {
  if (a.prompt && !a.tokens_file.empty()) return report_error("diff: give -p or --tokens, not both");
  if (a.prompt && a.prompt->empty()) return report_error("diff: the prompt (-p) is empty");
  if (!(a.threshold > 0)) return report_error("diff: --threshold must be positive");
  const std::vector<std::string> inputs = {a.a, a.b, a.tokens_file, a.image};
  for (const std::string* out : {&a.json, &a.svg}) {
    if (out->empty()) continue;
    if (Status st = bench::prepare_json_output(*out, inputs); !st.ok()) {
      return report_error(st.message());
    }
  }
  if (a.prompt) {
    if (Status st = check_utf8(*a.prompt, "the prompt (-p)", false); !st.ok()) {
      return report_error(st.message());
    }
  }
  std::vector<int32_t> tokens;
  if (!a.tokens_file.empty()) {
    auto ids = read_token_file(a.tokens_file);
    if (!ids.ok()) return report_error(ids.status().message());
    tokens = std::move(*ids);
  }

  auto recorder = std::make_unique<TapRecorder>();
  std::vector<float> logits_a, logits_b;
  auto ra = run_one(a.a, a, "A", tokens, *recorder, logits_a);
  if (!ra.ok()) return report_error(ra.status().with_context("diff: A").message());
  TapComparer comparer(*recorder);
  auto rb = run_one(a.b, a, "B", tokens, comparer, logits_b);
  if (!rb.ok()) return report_error(rb.status().with_context("diff: B").message());
  const auto kind_of = [](const std::string& scenario) {
    return scenario == "embedding" || scenario == "image-classification" ? scenario
                                                                         : std::string("llm");
  };
  if (kind_of(ra->scenario) != kind_of(rb->scenario)) {
    return report_error(
        fmt::format("diff: A is a {} recipe and B a {} one: rinfer diff compares "
                    "variants of one model",
                    ra->scenario, rb->scenario));
  }
  const bool encoder = ra->scenario == "embedding";
  const bool images = ra->scenario == "image-classification";
  if (ra->n_layer != rb->n_layer || ra->n_embd != rb->n_embd || ra->n_vocab != rb->n_vocab) {
    return report_error(fmt::format(
        "diff: the recipes run different models (A: {} layers of {}, vocabulary {}; B: {} of {}, "
        "{}); rinfer diff compares variants of one model",
        ra->n_layer, ra->n_embd, ra->n_vocab, rb->n_layer, rb->n_embd, rb->n_vocab));
  }
  auto diffs = comparer.results();
  if (!diffs.ok()) return report_error(diffs.status().with_context("diff").message());
  const int64_t n_tok = ra->rows;
  const LogitComparison lc =
      encoder ? LogitComparison{}
              : compare_logits(logits_a.data(), logits_b.data(), n_tok, ra->n_vocab);

  const std::string input =
      images ? (a.image.empty() ? "the built-in image" : "one image (" + a.image + ")")
             : count_of(n_tok, "token") + (encoder ? ", one encoder pass" : ", teacher-forced");
  std::string out = fmt::format("rinfer diff: A {} ({})\n             B {} ({})\n{}\n\n", a.a,
                                ra->device, a.b, rb->device, input);
  out += fmt::format("{:>6}  {:<10} {:>10} {:>10} {:>10}\n", "layer", "op", "rel L2", "cosine",
                     "max |diff|");
  for (const TapDiff& d : *diffs) {
    if (d.kind == TapKind::kLogits) continue;
    const std::string layer =
        d.kind == TapKind::kEmbed || d.kind == TapKind::kPooled ? "-" : fmt::format("{}", d.layer);
    out += fmt::format("{:>6}  {:<10} {:>10} {:>10.6f} {:>10}\n", layer, tap_name(d.kind),
                       num(d.rel_l2), d.cosine, num(d.max_abs));
  }
  if (!encoder) {
    out += fmt::format(
        "{:>6}  {:<10} {:>10} {:>10} {:>10}   top-1 {:.4f}, mean KL {} nats, max KL {}\n", "-",
        "logits", num(lc.rel_l2), "", num(lc.max_abs), lc.top1_agreement, num(lc.mean_kl),
        num(lc.max_kl));
  }
  const auto first = first_past(*diffs, a.threshold);
  const auto differ = first_difference(*diffs);
  const auto growth = largest_growth(*diffs);
  out += "\n";
  if (differ) {
    const TapDiff& d = (*diffs)[*differ];
    out += fmt::format("first difference: {} (rel L2 {})\n", tap_label(d.kind, d.layer),
                       num(d.rel_l2));
  } else {
    out += "no difference: every tap is identical\n";
  }
  if (first) {
    const TapDiff& d = (*diffs)[*first];
    out += fmt::format("first past rel L2 {}: {} (rel L2 {})\n", a.threshold,
                       tap_label(d.kind, d.layer), num(d.rel_l2));
  } else {
    out += fmt::format("none past rel L2 {}\n", a.threshold);
  }
  if (growth) {
    const TapDiff& d = (*diffs)[growth->first];
    out += fmt::format("largest growth of the residual stream's error: layer {} (x{:.2f})\n",
                       d.layer, growth->second);
  }
  if (!write_stdout(out)) return 1;

  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["a"] = run_json(*ra);
    j["b"] = run_json(*rb);
    if (images) {
      j["images"] = n_tok;
    } else {
      j["tokens"] = n_tok;
    }
    j["threshold"] = a.threshold;
    j["taps"] = nlohmann::ordered_json::array();
    for (const TapDiff& d : *diffs) {
      j["taps"].push_back({{"layer", d.layer},
                           {"op", tap_name(d.kind)},
                           {"rows", d.rows},
                           {"width", d.width},
                           {"rel_l2", json_num(d.rel_l2)},
                           {"cosine", json_num(d.cosine)},
                           {"max_abs", json_num(d.max_abs)}});
    }
    j["scenario"] = ra->scenario;
    if (encoder) {
      j["logits"] = nullptr;  // the pooled tap is the output
    } else {
      j["logits"] = {{"rows", lc.rows},
                     {"rel_l2", json_num(lc.rel_l2)},
                     {"max_abs", json_num(lc.max_abs)},
                     {"top1_agreement", json_num(lc.top1_agreement)},
                     {"mean_kl", json_num(lc.mean_kl)},
                     {"max_kl", json_num(lc.max_kl)}};
    }
    const auto at = [&](const std::optional<size_t>& i) {
      if (!i) return nlohmann::ordered_json(nullptr);
      const TapDiff& d = (*diffs)[*i];
      return nlohmann::ordered_json{
          {"layer", d.layer}, {"op", tap_name(d.kind)}, {"rel_l2", json_num(d.rel_l2)}};
    };
    j["first_past_threshold"] = at(first);
    j["first_difference"] = at(differ);
    if (growth) {
      j["largest_growth"] = {{"layer", (*diffs)[growth->first].layer},
                             {"ratio", json_num(growth->second)}};
    } else {
      j["largest_growth"] = nullptr;
    }
    j["git_sha"] = bench::git_sha(".");
    j["date"] = bench::utc_date();
    if (bench::write_json(a.json, j) != 0) return 1;
  }
  if (!a.svg.empty()) {
    // A network's taps are numbered by node: the plot spans the largest.
    int64_t span = ra->n_layer;
    for (const TapDiff& d : *diffs) {
      if (d.kind != TapKind::kLogits && d.kind != TapKind::kPooled) {
        span = std::max<int64_t>(span, d.layer + 1);
      }
    }
    const Status st = write_file_atomically(a.svg, svg_plot(*diffs, span, a.threshold), inputs);
    if (!st.ok()) return report_error(st.with_context("writing --svg").message());
    std::fprintf(stderr, "wrote %s\n", a.svg.c_str());
  }
  return 0;
}

}  // namespace

void add_diff_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "diff", "Compare two recipes of one model layer by layer on the same tokens");
  auto a = std::make_shared<DiffArgs>();
  cmd->add_option("a", a->a, "The reference recipe (A: the baseline)")->required();
  cmd->add_option("b", a->b, "The recipe compared with it (B)")->required();
  cmd->add_option("-p,--prompt", a->prompt,
                  "Text to run (default: a built-in sentence); tokenized by A's tokenizer");
  cmd->add_option("--tokens", a->tokens_file,
                  "A file of token ids (text: spaces, commas or a JSON list) instead of a prompt");
  cmd->add_option("--image", a->image,
                  "An image-classification recipe's input: a JPEG or PNG file (default: a "
                  "built-in pattern)");
  cmd->add_option("--threshold", a->threshold,
                  "The rel L2 past which a tap is named (default 0.05)");
  cmd->add_option("--json", a->json, "Write every row (layer, op, metrics) as JSON");
  cmd->add_option("--svg", a->svg, "Plot the error by layer of each op as SVG");
  cmd->callback([&exit_code, a] { exit_code = run_diff(*a); });
}

}  // namespace rinfer
