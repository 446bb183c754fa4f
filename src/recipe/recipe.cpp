#include "recipe/recipe.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"
#include "strategies/registry.h"
#include "strategies/yaml_fields.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxContext = int64_t{1} << 20;
constexpr size_t kMaxStopStrings = 64;

Status parse_sampling(const YamlMap& m, RecipeConfig& r) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys({"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                    "presence_penalty", "frequency_penalty", "seed", "max_tokens", "stop"}));
  SamplingParams& s = r.sampling;
  std::optional<double> v;
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("temperature", {0.0, SamplingParams::kMaxTemperature}));
  if (v && *v > 0.0 && *v < SamplingParams::kMinTemperature) {
    return m.error("temperature",
                   fmt::format("{} is below the smallest usable temperature {} (0: greedy)", *v,
                               SamplingParams::kMinTemperature));
  }
  if (v) s.temperature = static_cast<float>(*v);
  RINFER_ASSIGN_OR_RETURN(auto top_k, m.get_int("top_k", 0, 1 << 24));
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("top_p", {0.0, 1.0, true, false}));
  if (v) s.top_p = static_cast<float>(*v);
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("min_p", {0.0, 1.0, false, true}));
  if (v) s.min_p = static_cast<float>(*v);
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("repeat_penalty", {0.0, 10.0, true, false}));
  if (v) s.repeat_penalty = static_cast<float>(*v);
  RINFER_ASSIGN_OR_RETURN(auto last_n, m.get_int("repeat_last_n", 0, kMaxContext));
  if (last_n) s.repeat_last_n = static_cast<int32_t>(*last_n);
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("presence_penalty", {-10.0, 10.0}));
  if (v) s.presence_penalty = static_cast<float>(*v);
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("frequency_penalty", {-10.0, 10.0}));
  if (v) s.frequency_penalty = static_cast<float>(*v);
  RINFER_ASSIGN_OR_RETURN(auto seed, m.get_int("seed", 0, INT64_MAX));
  if (seed) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seed_set = true;
  }
  RINFER_ASSIGN_OR_RETURN(auto max_tokens, m.get_int("max_tokens", 0, kMaxContext));
  if (max_tokens) r.max_tokens = *max_tokens;
  RINFER_ASSIGN_OR_RETURN(auto stop, m.get_string_list("stop", kMaxStopStrings));
  if (stop) r.stop = std::move(*stop);
  return ok_status();
}

Status parse_bench(const YamlMap& m, BenchConfig& b, const std::string& file) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys({"prompt_tokens", "gen_tokens", "repeat", "warmup", "prompts"}));
  RINFER_ASSIGN_OR_RETURN(auto prompt, m.get_int("prompt_tokens", 1, kMaxContext));
  if (prompt) b.prompt_tokens = *prompt;
  RINFER_ASSIGN_OR_RETURN(auto gen, m.get_int("gen_tokens", 1, kMaxContext));
  if (gen) b.gen_tokens = *gen;
  RINFER_ASSIGN_OR_RETURN(auto repeat, m.get_int("repeat", 1, 1000));
  if (repeat) b.repeat = *repeat;
  RINFER_ASSIGN_OR_RETURN(auto warmup, m.get_int("warmup", 0, 100));
  if (warmup) b.warmup = *warmup;
  RINFER_ASSIGN_OR_RETURN(auto prompts, m.get_string("prompts"));
  if (prompts) {
    const fs::path p(*prompts);
    b.prompts = p.is_absolute() ? p.string()
                                : (fs::path(file).parent_path() / p).lexically_normal().string();
  }
  return ok_status();
}

// A served model's name: letters, digits and . _ - : / (what an OpenAI client sends as `model`).
Status check_served_name(const YamlMap& m, const std::string& key, const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
               c == ':' || c == '/';
      });
  if (ok) return ok_status();
  return m.error(
      key, fmt::format("'{}' is not a model name (1 to 128 letters, digits and . _ - : /)", name));
}

Status parse_serve(const YamlMap& m, ServeConfig& sv) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"name", "aliases"}));
  RINFER_ASSIGN_OR_RETURN(auto name, m.get_string("name"));
  if (name) {
    RINFER_RETURN_IF_ERROR(check_served_name(m, "name", *name));
    sv.name = *name;
  }
  RINFER_ASSIGN_OR_RETURN(auto aliases, m.get_string_list("aliases", 16));
  if (aliases) {
    for (const std::string& a : *aliases)
      RINFER_RETURN_IF_ERROR(check_served_name(m, "aliases", a));
    sv.aliases = std::move(*aliases);
  }
  return ok_status();
}

Status parse_embedding(const YamlMap& m, EmbeddingConfig& e) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"pooling", "normalize", "max_length"}));
  RINFER_ASSIGN_OR_RETURN(auto pooling, m.get_enum("pooling", {"mean", "cls"}));
  if (pooling) e.pooling = *pooling == 0 ? cpu::PoolKind::kMean : cpu::PoolKind::kCls;
  RINFER_ASSIGN_OR_RETURN(auto normalize, m.get_bool("normalize"));
  if (normalize) e.normalize = *normalize;
  RINFER_ASSIGN_OR_RETURN(auto max_length, m.get_int("max_length", 0, kMaxContext));
  if (max_length) {
    if (*max_length == 1) {
      return m.error("max_length", "1 leaves no room for [CLS] and [SEP] (0: the model's)");
    }
    e.max_length = *max_length;
  }
  return ok_status();
}

Status parse_classifier(const YamlMap& m, ClassifierConfig& c, const std::string& path) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"network", "preprocess", "labels", "top_k", "max_batch"}));
  RINFER_ASSIGN_OR_RETURN(auto net, m.get_map("network"));
  if (net) {
    RINFER_RETURN_IF_ERROR(
        net->check_keys({"family", "strides", "activation", "padding", "bn_eps"}));
    RINFER_ASSIGN_OR_RETURN(auto family, net->get_enum("family", {"inverted_residual", "resnet"}));
    if (family) c.network.family = *family == 0 ? "inverted_residual" : "resnet";
    RINFER_ASSIGN_OR_RETURN(auto strides, net->get_int_list("strides", 1, 2));
    if (strides) {
      if (strides->empty()) return net->error("strides", "expected one stride per block");
      c.network.strides = std::move(*strides);
    }
    RINFER_ASSIGN_OR_RETURN(auto act,
                            net->get_enum("activation", {"none", "relu", "relu6", "silu"}));
    if (act) c.network.activation = static_cast<cpu::Activation>(*act);
    RINFER_ASSIGN_OR_RETURN(auto padding, net->get_enum("padding", {"symmetric", "same"}));
    if (padding) c.network.same_padding = *padding == 1;
    RINFER_ASSIGN_OR_RETURN(auto eps, net->get_number("bn_eps", {0.0, 1.0, true}));
    if (eps) c.network.bn_eps = static_cast<float>(*eps);
  }
  RINFER_ASSIGN_OR_RETURN(auto pre, m.get_map("preprocess"));
  if (pre) {
    RINFER_RETURN_IF_ERROR(pre->check_keys({"resize", "crop", "mean", "std"}));
    RINFER_ASSIGN_OR_RETURN(auto resize, pre->get_int("resize", 0, 4096));
    if (resize) c.preprocess.resize = *resize;
    RINFER_ASSIGN_OR_RETURN(auto crop, pre->get_int("crop", 8, 4096));
    if (crop) c.preprocess.crop = *crop;
    for (const char* key : {"mean", "std"}) {
      const bool is_std = std::string_view(key) == "std";
      RINFER_ASSIGN_OR_RETURN(
          auto v, pre->get_number_list(key, {is_std ? 0.0 : -10.0, 10.0, is_std, false}));
      if (!v) continue;
      if (v->size() != 3) {
        return pre->error(key, fmt::format("expected 3 numbers (R, G, B), got {}", v->size()));
      }
      auto& dst = is_std ? c.preprocess.std : c.preprocess.mean;
      for (size_t i = 0; i < 3; ++i) dst[i] = static_cast<float>((*v)[i]);
    }
    if (c.preprocess.resize != 0 && c.preprocess.resize < c.preprocess.crop) {
      return pre->error("resize", fmt::format("{} is smaller than the crop {}", c.preprocess.resize,
                                              c.preprocess.crop));
    }
  }
  RINFER_ASSIGN_OR_RETURN(auto labels, m.get_string("labels"));
  if (labels) {
    c.labels = *labels;
    if (c.labels.starts_with("./") || c.labels.starts_with("../")) {
      c.labels = (fs::path(path).parent_path() / c.labels).lexically_normal().string();
    }
  }
  RINFER_ASSIGN_OR_RETURN(auto top_k, m.get_int("top_k", 1, 1000));
  if (top_k) c.top_k = *top_k;
  RINFER_ASSIGN_OR_RETURN(auto max_batch, m.get_int("max_batch", 1, 4096));
  if (max_batch) c.max_batch = *max_batch;
  return ok_status();
}

Status parse_precision(const YamlMap& m, PrecisionGate& g) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"min_top1", "max_mean_kl", "max_ppl_change"}));
  RINFER_ASSIGN_OR_RETURN(auto top1, m.get_number("min_top1", {0.0, 1.0}));
  if (top1) g.min_top1 = *top1;
  RINFER_ASSIGN_OR_RETURN(auto kl, m.get_number("max_mean_kl", {0.0, 100.0}));
  if (kl) g.max_mean_kl = *kl;
  RINFER_ASSIGN_OR_RETURN(auto ppl, m.get_number("max_ppl_change", {0.0, 10.0}));
  if (ppl) g.max_ppl_change = *ppl;
  return ok_status();
}

// Records where each present key of `m` (and, one level down, of its mappings) was written.
void note_keys(const YamlMap& m, KeyOrigins& o) {
  for (const std::string& k : m.keys()) o.set(m.key_path(k), m.location(k));
}

// A recipe is a few dozen lines; a file far larger is refused before YAML parses it (a parser
// holds tens of bytes per byte of input).
constexpr size_t kMaxRecipeBytes = size_t{1} << 20;

Result<YAML::Node> parse_yaml(const std::string& text, const std::string& path) {
  if (text.size() > kMaxRecipeBytes) {
    return invalid_argument("{}: {} bytes; a recipe is at most {} bytes (1 MiB)", path, text.size(),
                            kMaxRecipeBytes);
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return invalid_argument("{}: invalid YAML: {}", path, e.msg);
    return invalid_argument("{}:{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.mark.column + 1,
                            e.msg);
  } catch (const std::exception& e) {
    return invalid_argument("{}: invalid YAML: {}", path, e.what());
  }
  if (docs.empty() || docs[0].IsNull()) return invalid_argument("{}: the recipe is empty", path);
  if (docs.size() > 1) {
    return invalid_argument("{}: holds {} YAML documents; a recipe is one", path, docs.size());
  }
  return docs[0];
}

// A FIFO, device or directory is refused at once (core/input_file.h), never read; so is a file
// over the size limit.
Result<std::string> read_text(const std::string& path) {
  return read_regular_file(path, kMaxRecipeBytes);
}

// A file's identity for cycle detection.
std::string file_key(const std::string& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal().string();
  const fs::path p = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal().string() : p.string();
}

std::string chain_text(const std::vector<std::string>& chain) {
  std::string s;
  for (const std::string& c : chain) {
    if (!s.empty()) s += " -> ";
    s += c;
  }
  return s;
}

constexpr size_t kMaxBaseDepth = 16;

Status apply_file(const std::string& text, const std::string& path, RecipeConfig& r,
                  std::vector<std::string>& stack);

// Applies the base named by `root`'s `base` key, if any, over `r`.
Status apply_base(const YamlMap& root, const std::string& path, RecipeConfig& r,
                  std::vector<std::string>& stack) {
  RINFER_ASSIGN_OR_RETURN(auto base, root.get_string("base"));
  if (!base) return ok_status();
  const fs::path bp(*base);
  const std::string base_path =
      bp.is_absolute() ? bp.string()
                       : (fs::path(path).parent_path() / bp).lexically_normal().string();
  std::vector<std::string> chain = stack;
  chain.push_back(base_path);
  const std::string key = file_key(base_path);
  for (const std::string& s : stack) {
    if (file_key(s) == key) return root.error("base", "cycle: " + chain_text(chain));
  }
  if (stack.size() > kMaxBaseDepth) {
    return root.error("base",
                      fmt::format("more than {} bases: {}", kMaxBaseDepth, chain_text(chain)));
  }
  std::error_code ec;
  if (!fs::exists(base_path, ec)) {
    return root.error("base", fmt::format("{} not found (a path relative to this recipe; chain: "
                                          "{})",
                                          base_path, chain_text(chain)));
  }
  auto base_text = read_text(base_path);
  if (!base_text.ok()) return root.error("base", base_text.status().message());
  stack.push_back(base_path);
  RINFER_RETURN_IF_ERROR(apply_file(*base_text, base_path, r, stack));
  stack.pop_back();
  return ok_status();
}

// Applies one recipe file (its bases first) over `r`. `stack` holds the files being applied,
// the top recipe first, for cycle detection and messages.
Status apply_file(const std::string& text, const std::string& path, RecipeConfig& r,
                  std::vector<std::string>& stack) {
  RINFER_ASSIGN_OR_RETURN(YAML::Node doc, parse_yaml(text, path));
  try {
    RINFER_ASSIGN_OR_RETURN(YamlMap root, YamlMap::from(doc, path, ""));
    RINFER_RETURN_IF_ERROR(root.check_keys({"base", "model", "device", "scenario", "context_length",
                                            "strategies", "sampling", "chat_template", "bench",
                                            "precision", "serve", "embedding", "classifier"}));
    RINFER_RETURN_IF_ERROR(apply_base(root, path, r, stack));
    r.chain.push_back(path);
    KeyOrigins& o = r.strategies.origins;
    note_keys(root, o);

    RINFER_ASSIGN_OR_RETURN(auto model, root.get_string("model"));
    if (model) {
      r.model = *model;
      r.model_ref = r.model;
      if (r.model.starts_with("./") || r.model.starts_with("../")) {
        r.model_ref = (fs::path(path).parent_path() / r.model).lexically_normal().string();
      }
    }

    RINFER_ASSIGN_OR_RETURN(auto device, root.get_string("device"));
    if (device) {
      auto d = parse_device(*device);
      if (!d.ok()) {
        return root.error("device", fmt::format("expected cpu or cuda:N, got {}", *device));
      }
      r.device = *d;
    }

    RINFER_ASSIGN_OR_RETURN(auto scenario, root.get_string("scenario"));
    if (scenario) {
      if (*scenario != "llm-chat" && *scenario != "llm-serve" && *scenario != "embedding" &&
          *scenario != "image-classification") {
        return root.error("scenario", fmt::format("expected llm-chat, llm-serve, embedding or "
                                                  "image-classification, got {}",
                                                  *scenario));
      }
      r.scenario = *scenario;
    }

    RINFER_ASSIGN_OR_RETURN(auto ctx, root.get_int("context_length", 0, kMaxContext));
    if (ctx) {
      if (*ctx != 0 && *ctx < 16) {
        return root.error("context_length",
                          fmt::format("expected 0 (the model's) or at least 16, got {}", *ctx));
      }
      r.context_length = *ctx;
    }

    RINFER_ASSIGN_OR_RETURN(auto strategies, root.get_map("strategies"));
    if (strategies) RINFER_RETURN_IF_ERROR(parse_strategies(*strategies, r.strategies));
    RINFER_ASSIGN_OR_RETURN(auto sampling, root.get_map("sampling"));
    if (sampling) {
      RINFER_RETURN_IF_ERROR(parse_sampling(*sampling, r));
      note_keys(*sampling, o);
    }
    RINFER_ASSIGN_OR_RETURN(auto chat_template, root.get_string("chat_template"));
    if (chat_template) r.chat_template = chat_template;
    RINFER_ASSIGN_OR_RETURN(auto bench, root.get_map("bench"));
    if (bench) {
      RINFER_RETURN_IF_ERROR(parse_bench(*bench, r.bench, path));
      note_keys(*bench, o);
    }
    RINFER_ASSIGN_OR_RETURN(auto serve, root.get_map("serve"));
    if (serve) {
      RINFER_RETURN_IF_ERROR(parse_serve(*serve, r.serve));
      note_keys(*serve, o);
    }
    RINFER_ASSIGN_OR_RETURN(auto embedding, root.get_map("embedding"));
    if (embedding) {
      RINFER_RETURN_IF_ERROR(parse_embedding(*embedding, r.embedding));
      note_keys(*embedding, o);
    }
    RINFER_ASSIGN_OR_RETURN(auto classifier, root.get_map("classifier"));
    if (classifier) {
      RINFER_RETURN_IF_ERROR(parse_classifier(*classifier, r.classifier, path));
      note_keys(*classifier, o);
    }
    RINFER_ASSIGN_OR_RETURN(auto precision, root.get_map("precision"));
    if (precision) {
      RINFER_RETURN_IF_ERROR(parse_precision(*precision, r.precision));
      note_keys(*precision, o);
    }
  } catch (const YAML::Exception& e) {
    return invalid_argument("{}: invalid recipe: {}", path, e.msg);
  }
  return ok_status();
}

}  // namespace

std::string RecipeConfig::strategies_summary() const {
  return fmt::format("{}, context {}", describe_strategies(strategies, device),
                     context_length == 0 ? std::string("model") : std::to_string(context_length));
}

Result<RecipeConfig> parse_recipe(const std::string& text, const std::string& path) {
  RecipeConfig r;
  r.path = path;
  r.strategies.origins.file = path;
  std::vector<std::string> stack{path};
  RINFER_RETURN_IF_ERROR(apply_file(text, path, r, stack));
  const KeyOrigins& o = r.strategies.origins;
  for (const char* key : {"model", "scenario"}) {
    if (!o.has(key)) {
      return invalid_argument("{}: {}: missing (required{})", path, key,
                              r.chain.size() > 1 ? "; not set by this recipe or its bases" : "");
    }
  }
  if (o.has("embedding") && r.scenario != "embedding") {
    return invalid_argument(
        "{}: embedding: set, but the scenario is {} (embedding settings "
        "belong to scenario: embedding)",
        o.where("embedding"), r.scenario);
  }
  if (o.has("classifier") != (r.scenario == "image-classification")) {
    return invalid_argument(
        "{}: {}", o.has("classifier") ? o.where("classifier") : path,
        o.has("classifier")
            ? fmt::format("classifier: set, but the scenario is {} (classifier settings belong "
                          "to scenario: image-classification)",
                          r.scenario)
            : std::string("classifier: missing (an image-classification recipe describes its "
                          "network: classifier.network.family and strides)"));
  }
  if (r.scenario == "image-classification" &&
      (r.classifier.network.family.empty() || r.classifier.network.strides.empty())) {
    return invalid_argument("{}: classifier.network: family and strides are required",
                            o.where("classifier"));
  }
  return r;
}

Result<RecipeConfig> load_recipe(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return not_found(
        "recipe '{}' not found (give the path of a .yaml file, e.g. "
        "recipes/llm-chat/smollm2-135m/optimized.yaml)",
        path);
  }
  RINFER_ASSIGN_OR_RETURN(const std::string text, read_text(path));
  return parse_recipe(text, path);
}

}  // namespace rinfer
