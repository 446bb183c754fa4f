#include "tools/tune_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string_view>

#include "strategies/registry.h"

namespace rinfer {

namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(trim(s.substr(b, i - b)));
      b = i + 1;
    }
  }
  return out;
}

// Whether `key` of a strategy whose `devices` reads "cpu, cuda" or, per key,
// "attention, residual_norm: cuda; qkv, swiglu: cpu, cuda" acts on `kind`.
bool key_on_device(std::string_view devices, std::string_view key, std::string_view kind) {
  const auto has_kind = [&](std::string_view list) {
    for (const std::string& d : split(list, ',')) {
      if (d == kind) return true;
    }
    return false;
  };
  if (devices.find(':') == std::string_view::npos) return has_kind(devices);
  for (const std::string& seg : split(devices, ';')) {
    const size_t colon = seg.find(':');
    if (colon == std::string::npos) continue;
    for (const std::string& k : split(std::string_view(seg).substr(0, colon), ',')) {
      if (k == key) return has_kind(std::string_view(seg).substr(colon + 1));
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> domain_values(const std::string& type, int64_t int_cap,
                                       size_t max_int_points) {
  if (type == "bool") return {"true", "false"};
  long long lo = 0, hi = 0;
  if (std::sscanf(type.c_str(), "int in [%lld, %lld]", &lo, &hi) == 2 && lo <= hi) {
    if (int_cap > 0) hi = std::min<long long>(hi, int_cap);
    std::vector<long long> pts = {lo};
    for (long long p = 1; p < hi; p *= 2) {
      if (p > lo) pts.push_back(p);
    }
    if (hi > lo) pts.push_back(hi);
    if (pts.size() > max_int_points && max_int_points >= 2) {
      // Spread: the ends and evenly spaced points between.
      std::vector<long long> keep;
      for (size_t i = 0; i < max_int_points; ++i) {
        keep.push_back(pts[i * (pts.size() - 1) / (max_int_points - 1)]);
      }
      pts = keep;
    }
    std::vector<std::string> out;
    for (long long p : pts) out.push_back(std::to_string(p));
    return out;
  }
  if (type.find('|') != std::string::npos && type.rfind("list", 0) != 0 &&
      type.rfind("number", 0) != 0) {
    return split(type, '|');
  }
  return {};
}

std::vector<TuneKnob> tune_space(const Device& device, const std::string& scenario, int64_t cores,
                                 int64_t seats_cap) {
  const std::string kind = device.is_cuda() ? "cuda" : "cpu";
  std::vector<TuneKnob> out;
  for (const StrategyInfo& info : strategy_registry()) {
    if (info.name == "dynamic_batching") continue;  // the encoders'
    const bool batching = info.name == "batching";
    if (batching && scenario != "llm-serve") continue;         // one request: nothing to batch
    if (device.is_cuda() && info.name == "threads") continue;  // host-side work only there
    for (const StrategyKey& k : info.keys) {
      const std::string key(k.name);
      if (!key_on_device(info.devices, key, kind)) continue;
      if (std::string_view(k.meaning).rfind("image classifiers", 0) == 0 &&
          scenario != "image-classification") {
        continue;
      }
      if (key.rfind("cuda.", 0) == 0 && !device.is_cuda()) continue;  // the CUDA kernels' switches
      // The serving knobs worth a trial: the queue's order and the swap space are not speed.
      if (batching && (key == "priority" || key == "swap_blocks")) continue;
      const bool threads = info.name == "threads";
      const int64_t cap = threads                       ? cores
                          : key == "max_seqs"           ? seats_cap
                          : key == "max_batched_tokens" ? 16384
                                                        : 0;
      std::vector<std::string> vals = domain_values(std::string(k.type), cap, threads ? 8 : 6);
      if (vals.size() < 2) continue;
      out.push_back({fmt::format("{}.{}", info.name, key), std::move(vals)});
    }
  }
  return out;
}

std::string tune_recipe_yaml(const std::string& base, const TuneSettings& settings,
                             const std::vector<std::string>& header) {
  std::string out;
  for (const std::string& h : header) out += h.empty() ? "#\n" : "# " + h + "\n";
  out += fmt::format("base: {}\n", base);
  if (settings.empty()) return out;
  out += "strategies:\n";
  // Nested by the dots, in key order (the map's order keeps siblings together).
  std::vector<std::string> open;  // the mapping path written so far
  for (const auto& [path, value] : settings) {
    std::vector<std::string> parts = split(path, '.');
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out += std::string(2 * (i + 1), ' ') + parts[i] + ":\n";
      open.push_back(parts[i]);
    }
    out += std::string(2 * parts.size(), ' ') + parts.back() + ": " + value + "\n";
  }
  return out;
}

std::string describe_settings(const TuneSettings& settings) {
  std::string out;
  for (const auto& [k, v] : settings) {
    if (!out.empty()) out += ", ";
    out += k + "=" + v;
  }
  return out;
}

std::string recipe_fingerprint(const RecipeConfig& r) {
  StrategyConfig s = r.strategies;
  // auto: bf16 on CUDA, f32 on the CPU (strategies/kv_cache): the same cache either way.
  const DType kv = s.kv_dtype.value_or(r.device.is_cuda() ? DType::kBF16 : DType::kF32);
  s.kv_dtype.reset();
  std::string keep;
  for (int64_t l : s.quantization.effective_keep_layers()) keep += std::to_string(l) + " ";
  std::string fp =
      fmt::format("{} | {} | {} | ctx {} | kv {} {} {} {} {} | weights {} keep [{}] embeddings {}",
                  r.model_ref, r.device.to_string(), describe_strategies(s, r.device),
                  r.context_length, s.kv_cache, static_cast<int>(s.kv_layout), s.kv_block_size,
                  s.prefix_caching, static_cast<int>(s.kv_prealloc),
                  weight_format_name(s.quantization.weights), keep, s.quantization.embeddings);
  fp += fmt::format(" kv_dtype {}", static_cast<int>(kv));
  if (r.device.is_cuda()) fp += " | " + describe_cuda_kernels(s.cuda_kernels);
  return fp;
}

std::string fnv1a_hex(const std::string& s) {
  uint64_t h = 14695981039346656037ull;  // the 64-bit offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace rinfer
