#include "recipe/recipe.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "recipe/yaml_fields.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxContext = int64_t{1} << 20;

Status parse_strategies(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"kv_cache", "kernels", "threads"}));

  RINFER_ASSIGN_OR_RETURN(auto kv, m.get_map("kv_cache"));
  if (kv) {
    RINFER_RETURN_IF_ERROR(kv->check_keys({"enabled"}));
    RINFER_ASSIGN_OR_RETURN(auto enabled, kv->get_bool("enabled"));
    if (enabled) s.kv_cache = *enabled;
  }

  RINFER_ASSIGN_OR_RETURN(auto kernels, m.get_map("kernels"));
  if (kernels) {
    RINFER_RETURN_IF_ERROR(kernels->check_keys({"impl"}));
    RINFER_ASSIGN_OR_RETURN(const std::string impl, kernels->get_string_or("impl", "fast"));
    if (impl == "reference") {
      s.kernels = cpu::Impl::kReference;
    } else if (impl == "fast") {
      s.kernels = cpu::Impl::kFast;
    } else {
      return kernels->error("impl", fmt::format("expected reference or fast, got {}", impl));
    }
  }

  RINFER_ASSIGN_OR_RETURN(auto threads, m.get_map("threads"));
  if (threads) {
    RINFER_RETURN_IF_ERROR(threads->check_keys({"count"}));
    RINFER_ASSIGN_OR_RETURN(auto count, threads->get_int("count", 0, 1024));
    if (count) s.threads = static_cast<int>(*count);
  }
  return ok_status();
}

Status parse_sampling(const YamlMap& m, RecipeConfig& r) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys({"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                    "presence_penalty", "seed", "max_tokens", "stop"}));
  SamplingParams& s = r.sampling;
  std::optional<double> v;
  RINFER_ASSIGN_OR_RETURN(v, m.get_number("temperature", {0.0, 100.0}));
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
  RINFER_ASSIGN_OR_RETURN(auto seed, m.get_int("seed", 0, INT64_MAX));
  if (seed) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seed_set = true;
  }
  RINFER_ASSIGN_OR_RETURN(auto max_tokens, m.get_int("max_tokens", 0, kMaxContext));
  if (max_tokens) r.max_tokens = *max_tokens;
  RINFER_ASSIGN_OR_RETURN(auto stop, m.get_string_list("stop"));
  if (stop) r.stop = std::move(*stop);
  return ok_status();
}

}  // namespace

std::string RecipeConfig::strategies_summary() const {
  return fmt::format(
      "kv_cache {}, kernels {}, threads {}, context {}", strategies.kv_cache ? "on" : "off",
      strategies.kernels == cpu::Impl::kFast ? "fast" : "reference",
      strategies.threads == 0 ? std::string("all cores") : std::to_string(strategies.threads),
      context_length == 0 ? std::string("model") : std::to_string(context_length));
}

Result<RecipeConfig> parse_recipe(const std::string& text, const std::string& path) {
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

  RecipeConfig r;
  r.path = path;
  try {
    RINFER_ASSIGN_OR_RETURN(YamlMap root, YamlMap::from(docs[0], path, ""));
    RINFER_RETURN_IF_ERROR(root.check_keys({"model", "device", "scenario", "context_length",
                                            "strategies", "sampling", "chat_template"}));
    RINFER_RETURN_IF_ERROR(root.require("model"));
    RINFER_RETURN_IF_ERROR(root.require("scenario"));

    RINFER_ASSIGN_OR_RETURN(r.model, root.get_string_or("model", ""));
    r.model_ref = r.model;
    if (r.model.starts_with("./") || r.model.starts_with("../")) {
      r.model_ref = (fs::path(path).parent_path() / r.model).lexically_normal().string();
    }

    RINFER_ASSIGN_OR_RETURN(const std::string device, root.get_string_or("device", "cpu"));
    auto d = parse_device(device);
    if (!d.ok()) return root.error("device", fmt::format("expected cpu or cuda:N, got {}", device));
    r.device = *d;

    RINFER_ASSIGN_OR_RETURN(r.scenario, root.get_string_or("scenario", ""));
    if (r.scenario != "llm-chat") {
      return root.error("scenario", fmt::format("expected llm-chat (the only scenario so far), "
                                                "got {}",
                                                r.scenario));
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
    if (sampling) RINFER_RETURN_IF_ERROR(parse_sampling(*sampling, r));
    RINFER_ASSIGN_OR_RETURN(r.chat_template, root.get_string("chat_template"));
  } catch (const YAML::Exception& e) {
    return invalid_argument("{}: invalid recipe: {}", path, e.msg);
  }
  return r;
}

Result<RecipeConfig> load_recipe(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return not_found(
        "recipe '{}' not found (give the path of a .yaml file, e.g. "
        "recipes/llm-chat/smollm2-135m/optimized.yaml)",
        path);
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("{}: cannot open the recipe", path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("{}: read error", path);
  return parse_recipe(ss.str(), path);
}

}  // namespace rinfer
