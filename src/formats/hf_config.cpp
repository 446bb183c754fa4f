#include "formats/hf_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/strings.h"
#include "core/mapped_file.h"

namespace rinfer {

namespace {

using json = nlohmann::json;

// config.json files are a few KB; anything this large is not one.
constexpr size_t kMaxConfigBytes = 16u << 20;

// Model types whose transformers config class defaults tie_word_embeddings to false.
constexpr std::array<std::string_view, 8> kUntiedByDefault = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3"};

std::string describe(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a non-integer number";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unexpected value";
  }
}

// Typed access to the keys of one JSON object, with messages that name the key.
class Reader {
 public:
  Reader(const json& obj, const std::string& name) : obj_(obj), name_(name) {}

  // nullptr when the key is absent or null.
  const json* get(std::string_view key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status wrong_type(std::string_view key, const json& v, std::string_view expected) const {
    return data_loss("{}: key '{}' is {}, expected {}", name_, key, describe(v), expected);
  }
  Status missing(std::string_view key) const {
    return data_loss("{}: missing required key '{}'", name_, key);
  }

  Result<std::optional<int64_t>> opt_int(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<int64_t>();
    if (v->is_number_unsigned()) {
      const auto u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return data_loss("{}: key '{}' = {} is too large", name_, key, u);
      }
      return std::optional<int64_t>(static_cast<int64_t>(u));
    }
    if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
    return wrong_type(key, *v, "an integer");
  }

  // A required integer that must be > 0.
  Result<int64_t> positive_int(std::string_view key) const {
    RINFER_ASSIGN_OR_RETURN(auto v, opt_int(key));
    if (!v) return missing(key);
    return check_positive(key, *v);
  }

  Result<int64_t> check_positive(std::string_view key, int64_t v) const {
    if (v <= 0) return data_loss("{}: key '{}' must be positive, got {}", name_, key, v);
    return v;
  }

  Result<std::optional<double>> opt_double(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return wrong_type(key, *v, "a number");
    return std::optional<double>(v->get<double>());
  }

  Result<std::optional<std::string>> opt_string(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return wrong_type(key, *v, "a string");
    return std::optional<std::string>(v->get<std::string>());
  }

  Result<std::optional<bool>> opt_bool(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<bool>();
    if (!v->is_boolean()) return wrong_type(key, *v, "a boolean");
    return std::optional<bool>(v->get<bool>());
  }

  const std::string& name() const { return name_; }

 private:
  const json& obj_;
  const std::string& name_;
};

Status parse_into(const json& root, const std::string& name, HfConfig* c) {
  if (!root.is_object()) {
    return data_loss("{}: config is {}, expected a JSON object", name, describe(root));
  }
  const Reader r(root, name);

  if (const json* a = r.get("architectures"); a != nullptr) {
    if (!a->is_array()) return r.wrong_type("architectures", *a, "an array of strings");
    for (const auto& e : *a) {
      if (!e.is_string()) return r.wrong_type("architectures", e, "an array of strings");
      c->architectures.push_back(e.get<std::string>());
    }
  }
  RINFER_ASSIGN_OR_RETURN(auto model_type, r.opt_string("model_type"));
  if (!model_type) return r.missing("model_type");
  c->model_type = std::move(*model_type);

  RINFER_ASSIGN_OR_RETURN(c->hidden_size, r.positive_int("hidden_size"));
  RINFER_ASSIGN_OR_RETURN(c->num_hidden_layers, r.positive_int("num_hidden_layers"));
  RINFER_ASSIGN_OR_RETURN(c->intermediate_size, r.positive_int("intermediate_size"));
  RINFER_ASSIGN_OR_RETURN(c->num_attention_heads, r.positive_int("num_attention_heads"));
  RINFER_ASSIGN_OR_RETURN(c->max_position_embeddings, r.positive_int("max_position_embeddings"));
  RINFER_ASSIGN_OR_RETURN(c->vocab_size, r.positive_int("vocab_size"));

  RINFER_ASSIGN_OR_RETURN(auto kv, r.opt_int("num_key_value_heads"));
  if (kv) {
    RINFER_ASSIGN_OR_RETURN(c->num_key_value_heads, r.check_positive("num_key_value_heads", *kv));
  } else {
    c->num_key_value_heads = c->num_attention_heads;
  }
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return data_loss("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", name,
                     c->num_attention_heads, c->num_key_value_heads);
  }

  RINFER_ASSIGN_OR_RETURN(auto head_dim, r.opt_int("head_dim"));
  if (head_dim) {
    RINFER_ASSIGN_OR_RETURN(c->head_dim, r.check_positive("head_dim", *head_dim));
  } else {
    if (c->hidden_size % c->num_attention_heads != 0) {
      return data_loss(
          "{}: hidden_size {} is not divisible by num_attention_heads {} (and head_dim is absent)",
          name, c->hidden_size, c->num_attention_heads);
    }
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }

  RINFER_ASSIGN_OR_RETURN(auto theta, r.opt_double("rope_theta"));
  if (!theta) {
    if (const json* rp = r.get("rope_parameters"); rp != nullptr) {
      if (!rp->is_object()) return r.wrong_type("rope_parameters", *rp, "an object");
      const std::string sub_name = name + ": rope_parameters";
      RINFER_ASSIGN_OR_RETURN(theta, Reader(*rp, sub_name).opt_double("rope_theta"));
    }
  }
  if (theta) c->rope_theta = *theta;
  RINFER_ASSIGN_OR_RETURN(auto positions, r.opt_string("position_embedding_type"));
  c->absolute_positions = positions && *positions == "absolute";
  if (!(c->rope_theta > 0) || !std::isfinite(c->rope_theta)) {
    return data_loss("{}: rope_theta must be a positive number, got {}", name, c->rope_theta);
  }

  std::optional<double> eps;
  for (std::string_view key : {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"}) {
    RINFER_ASSIGN_OR_RETURN(eps, r.opt_double(key));
    if (eps) {
      if (!(*eps >= 0) || !std::isfinite(*eps)) {
        return data_loss("{}: key '{}' must be a non-negative number, got {}", name, key, *eps);
      }
      break;
    }
  }
  if (!eps) {
    return data_loss(
        "{}: missing required key 'rms_norm_eps' (or 'layer_norm_eps', 'layer_norm_epsilon')",
        name);
  }
  c->norm_eps = *eps;

  RINFER_ASSIGN_OR_RETURN(auto tie, r.opt_bool("tie_word_embeddings"));
  if (tie) {
    c->tie_word_embeddings = *tie;
  } else {
    c->tie_word_embeddings = std::find(kUntiedByDefault.begin(), kUntiedByDefault.end(),
                                       c->model_type) == kUntiedByDefault.end();
  }

  RINFER_ASSIGN_OR_RETURN(auto dtype, r.opt_string("torch_dtype"));
  if (!dtype) {
    RINFER_ASSIGN_OR_RETURN(dtype, r.opt_string("dtype"));
  }
  if (dtype) c->torch_dtype = std::move(*dtype);

  RINFER_ASSIGN_OR_RETURN(auto window, r.opt_int("sliding_window"));
  RINFER_ASSIGN_OR_RETURN(auto use_window, r.opt_bool("use_sliding_window"));
  if (window && use_window.value_or(true)) {
    RINFER_ASSIGN_OR_RETURN(int64_t w, r.check_positive("sliding_window", *window));
    c->sliding_window = w;
  }
  return ok_status();
}

}  // namespace

Result<HfConfig> parse_hf_config(std::string_view text, const std::string& name_for_errors) {
  const std::string& name = name_for_errors;
  try {
    json root;
    try {
      root = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                         /*ignore_comments=*/false);
    } catch (const json::parse_error& e) {
      return data_loss("{}: not valid JSON at byte {}: {}", name, e.byte, printable(e.what()));
    } catch (const json::exception& e) {
      return data_loss("{}: not valid JSON: {}", name, printable(e.what()));
    }
    HfConfig c;
    RINFER_RETURN_IF_ERROR(parse_into(root, name, &c));
    c.raw_json = std::string(text);
    return c;
  } catch (const std::bad_alloc&) {
    return out_of_memory("{}: out of memory while parsing the config", name);
  } catch (const std::exception& e) {
    return internal_error("{}: unexpected exception: {}", name, e.what());
  }
}

Result<HfConfig> read_hf_config(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  if (file->size() > kMaxConfigBytes) {
    return data_loss("{}: {} bytes is too large for a config.json (limit {})", path, file->size(),
                     kMaxConfigBytes);
  }
  return parse_hf_config(
      std::string_view(reinterpret_cast<const char*>(file->data()), file->size()), path);
}

}  // namespace rinfer
