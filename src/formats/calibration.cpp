#include "formats/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "core/input_file.h"

namespace rinfer {

namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "rinfer-calibration";
constexpr int kVersion = 2;  // 1 is read too (no o_in_absmax)
constexpr int64_t kMaxDim = int64_t{1} << 20;
// A calibration file of a 1M-wide, 1k-layer model would be far larger than any real one.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

// Checks what read_calibration and calibration_json both require; `where` prefixes messages.
Status check(const CalibrationStats& c, const std::string& where) {
  if (c.n_layer < 1 || c.n_layer > kMaxDim || c.n_embd < 1 || c.n_embd > kMaxDim || c.n_ff < 1 ||
      c.n_ff > kMaxDim) {
    return invalid_argument("{}: n_layer {}, n_embd {} and n_ff {} must be in [1, {}]", where,
                            c.n_layer, c.n_embd, c.n_ff, kMaxDim);
  }
  if (!(c.alpha >= 0.0 && c.alpha <= 1.0)) {
    return invalid_argument("{}: alpha {} is outside [0, 1]", where, c.alpha);
  }
  if (c.tokens < 1) return invalid_argument("{}: tokens {} must be at least 1", where, c.tokens);
  if (c.smooth.o && c.q_dim == 0) {
    return invalid_argument("{}: smooth lists o_in, and there are no attention output maxima",
                            where);
  }
  if (c.q_dim < 0 || c.q_dim > kMaxDim) {
    return invalid_argument("{}: q_dim {} must be in [0, {}]", where, c.q_dim, kMaxDim);
  }
  for (const auto* v : {&c.attn_in, &c.mlp_in, &c.down_in, &c.o_in}) {
    const char* name = v == &c.attn_in  ? "attn_in_absmax"
                       : v == &c.mlp_in ? "mlp_in_absmax"
                       : v == &c.o_in   ? "o_in_absmax"
                                        : "down_in_absmax";
    const int64_t width = v == &c.down_in ? c.n_ff : v == &c.o_in ? c.q_dim : c.n_embd;
    if (v == &c.o_in && c.q_dim == 0) {
      if (!v->empty()) return invalid_argument("{}: o_in_absmax without q_dim", where);
      continue;
    }
    if (static_cast<int64_t>(v->size()) != c.n_layer) {
      return invalid_argument("{}: {} lists for {} layers", where, v->size(), c.n_layer);
    }
    for (size_t l = 0; l < v->size(); ++l) {
      const std::vector<float>& row = (*v)[l];
      if (static_cast<int64_t>(row.size()) != width) {
        return invalid_argument("{}: layers[{}].{} has {} values, expected {} {}", where, l, name,
                                row.size(),
                                v == &c.down_in ? "n_ff"
                                : v == &c.o_in  ? "q_dim"
                                                : "n_embd",
                                width);
      }
      for (size_t j = 0; j < row.size(); ++j) {
        if (!(row[j] >= 0.0f) || !std::isfinite(row[j])) {
          return invalid_argument("{}: layers[{}].{}[{}] is {}, expected a finite value >= 0",
                                  where, l, name, j, row[j]);
        }
      }
    }
  }
  return ok_status();
}

// obj[key] as T, or an error naming the key and what it holds.
template <typename T>
Result<T> field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return invalid_argument("{}: '{}' is missing", where, key);
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) return it->get<std::string>();
    return invalid_argument("{}: '{}' must be a string", where, key);
  } else if constexpr (std::is_integral_v<T>) {
    if (it->is_number_integer()) return it->get<T>();
    return invalid_argument("{}: '{}' must be an integer", where, key);
  } else {
    if (it->is_number()) return it->get<T>();
    return invalid_argument("{}: '{}' must be a number", where, key);
  }
}

constexpr std::pair<const char*, bool CalibrationStats::Inputs::*> kInputs[] = {
    {"attn_in", &CalibrationStats::Inputs::attn},
    {"o_in", &CalibrationStats::Inputs::o},
    {"mlp_in", &CalibrationStats::Inputs::mlp},
    {"down_in", &CalibrationStats::Inputs::down}};

Result<std::vector<float>> floats(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return invalid_argument("{}: '{}' is missing", where, key);
  if (!it->is_array()) return invalid_argument("{}: '{}' must be a list of numbers", where, key);
  std::vector<float> out;
  out.reserve(it->size());
  for (size_t j = 0; j < it->size(); ++j) {
    const json& v = (*it)[j];
    if (!v.is_number()) {
      return invalid_argument("{}: {}[{}] is not a number", where, key, j);
    }
    out.push_back(v.get<float>());
  }
  return out;
}

}  // namespace

Result<CalibrationStats> read_calibration(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(const std::string text, read_regular_file(path, kMaxFileBytes));
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    return invalid_argument("{}: not a calibration file (not JSON: {})", path, e.what());
  }
  if (!j.is_object()) return invalid_argument("{}: not a calibration file (not an object)", path);
  RINFER_ASSIGN_OR_RETURN(const std::string format, field<std::string>(j, "format", path));
  if (format != kFormat) {
    return invalid_argument("{}: format '{}', expected '{}' (written by rinfer calibrate)", path,
                            format, kFormat);
  }
  RINFER_ASSIGN_OR_RETURN(const int64_t version, field<int64_t>(j, "version", path));
  if (version != 1 && version != kVersion) {
    return invalid_argument("{}: version {}, this build reads versions 1 and {}", path, version,
                            kVersion);
  }
  CalibrationStats c;
  RINFER_ASSIGN_OR_RETURN(c.model, field<std::string>(j, "model", path));
  RINFER_ASSIGN_OR_RETURN(c.n_layer, field<int64_t>(j, "n_layer", path));
  RINFER_ASSIGN_OR_RETURN(c.n_embd, field<int64_t>(j, "n_embd", path));
  RINFER_ASSIGN_OR_RETURN(c.n_ff, field<int64_t>(j, "n_ff", path));
  if (version >= 2) {
    RINFER_ASSIGN_OR_RETURN(c.q_dim, field<int64_t>(j, "q_dim", path));
    if (c.q_dim < 1) return invalid_argument("{}: q_dim {} must be at least 1", path, c.q_dim);
    auto s = j.find("smooth");
    if (s == j.end() || !s->is_array()) {
      return invalid_argument("{}: 'smooth' must be a list of the inputs smoothed", path);
    }
    c.smooth = {false, false, false, false};
    for (const json& e : *s) {
      if (!e.is_string()) return invalid_argument("{}: 'smooth' holds a non-string", path);
      auto one = parse_smooth_inputs(e.get<std::string>());
      if (!one.ok()) return one.status().with_context(path + ": smooth");
      for (const auto& [name, member] : kInputs) c.smooth.*member |= (*one).*member;
    }
  }
  RINFER_ASSIGN_OR_RETURN(c.tokens, field<int64_t>(j, "tokens", path));
  RINFER_ASSIGN_OR_RETURN(c.alpha, field<double>(j, "alpha", path));
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) {
    return invalid_argument("{}: 'layers' must be a list of the layers' statistics", path);
  }
  for (size_t l = 0; l < layers->size(); ++l) {
    const json& e = (*layers)[l];
    const std::string where = fmt::format("{}: layers[{}]", path, l);
    if (!e.is_object()) return invalid_argument("{} is not an object", where);
    RINFER_ASSIGN_OR_RETURN(auto a, floats(e, "attn_in_absmax", where));
    RINFER_ASSIGN_OR_RETURN(auto m, floats(e, "mlp_in_absmax", where));
    RINFER_ASSIGN_OR_RETURN(auto d, floats(e, "down_in_absmax", where));
    if (version >= 2) {
      RINFER_ASSIGN_OR_RETURN(auto o, floats(e, "o_in_absmax", where));
      c.o_in.push_back(std::move(o));
    }
    c.attn_in.push_back(std::move(a));
    c.mlp_in.push_back(std::move(m));
    c.down_in.push_back(std::move(d));
  }
  RINFER_RETURN_IF_ERROR(check(c, path));
  return c;
}

Result<std::string> calibration_json(const CalibrationStats& c) {
  RINFER_RETURN_IF_ERROR(check(c, "calibration"));
  if (c.q_dim < 1) {
    return invalid_argument("calibration: no attention output maxima (q_dim 0) to write");
  }
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model"] = c.model;
  j["n_layer"] = c.n_layer;
  j["n_embd"] = c.n_embd;
  j["n_ff"] = c.n_ff;
  j["q_dim"] = c.q_dim;
  j["tokens"] = c.tokens;
  j["alpha"] = c.alpha;
  json smooth = json::array();
  for (const auto& [name, member] : kInputs) {
    if (c.smooth.*member) smooth.push_back(name);
  }
  j["smooth"] = std::move(smooth);
  // Four significant digits: the factors are powers of these maxima, and the file stays small
  // enough to keep beside a recipe.
  auto rounded = [](const std::vector<float>& v) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = std::stod(fmt::format("{:.4g}", v[i]));
    return out;
  };
  json layers = json::array();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const auto at = static_cast<size_t>(l);
    layers.push_back({{"attn_in_absmax", rounded(c.attn_in[at])},
                      {"o_in_absmax", rounded(c.o_in[at])},
                      {"mlp_in_absmax", rounded(c.mlp_in[at])},
                      {"down_in_absmax", rounded(c.down_in[at])}});
  }
  j["layers"] = std::move(layers);
  return j.dump() + "\n";
}

std::string smooth_inputs_text(const CalibrationStats::Inputs& in) {
  std::string out;
  for (const auto& [name, member] : kInputs) {
    if (in.*member) out += (out.empty() ? "" : ",") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

Result<CalibrationStats::Inputs> parse_smooth_inputs(std::string_view list) {
  CalibrationStats::Inputs in{false, false, false, false};
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string name(list.substr(at, comma - at));
    bool found = false;
    for (const auto& [full, member] : kInputs) {  // "attn_in" or "attn"
      if (name == full || name + "_in" == full) {
        in.*member = true;
        found = true;
      }
    }
    if (!found) {
      return invalid_argument("'{}' is not an input that smoothing takes (attn, o, mlp, down)",
                              list.substr(at, comma - at));
    }
    at = comma + 1;
  }
  return in;
}

float smoothing_factor(float act_absmax, float w_absmax, double alpha) {
  if (!(act_absmax > 0.0f) || !(w_absmax > 0.0f)) return 1.0f;
  const double s = std::pow(static_cast<double>(act_absmax), alpha) /
                   std::pow(static_cast<double>(w_absmax), 1.0 - alpha);
  return static_cast<float>(std::clamp(s, 1e-5, 1e5));
}

}  // namespace rinfer
