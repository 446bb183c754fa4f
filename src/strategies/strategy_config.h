// The optimization strategies a recipe selects (`strategies:` in a recipe), as plain values.
// Each field belongs to one strategy module in src/strategies/<name>/ (parse, validate, apply);
// the registry (registry.h) lists them and composes them into LoadOptions / GeneratorOptions.
//
// Defaults are the optimized settings; every strategy has a baseline value (see registry.h)
// so `rinfer bench` can measure both.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "models/model.h"
#include "ops/cpu/ops.h"

namespace rinfer {

// Where each key a recipe set explicitly was written ("file:line:col"), keyed by its path
// ("strategies.cuda_graphs.enabled", "device"). Keys absent here are defaults. Compatibility
// checks use it to tell an explicit choice from a default and to name both keys of a conflict.
class KeyOrigins {
 public:
  void set(const std::string& key, std::string where) { where_[key] = std::move(where); }
  bool has(std::string_view key) const { return where_.find(std::string(key)) != where_.end(); }
  // The location of an explicit key, or `file` (the recipe) for a default.
  std::string where(std::string_view key) const;

  std::string file;  // the recipe file (the top of a base chain)

 private:
  std::map<std::string, std::string> where_;
};

enum class ActivationFormat : uint8_t {
  kInt8,   // quantize activations to int8 per block of 32, integer dot products (CPU fast)
  kFloat,  // f32 activations; quantized weights dequantized on the fly
};

struct QuantizationConfig {
  // strategies.quantization.weights: nullopt = keep each tensor's stored format.
  std::optional<DType> weights;
  // strategies.quantization.keep_layers as written (nullopt: the default, first and last).
  std::optional<std::vector<int64_t>> keep_layers;
  bool embeddings = false;  // convert the token embedding / output projection too
  ActivationFormat activations = ActivationFormat::kInt8;

  // The layers that keep their stored precision: keep_layers, or {0, -1} when the weights are
  // converted and keep_layers is absent; empty when nothing is converted.
  std::vector<int64_t> effective_keep_layers() const;
};

struct StrategyConfig {
  bool kv_cache = true;                  // strategies.kv_cache.enabled
  std::optional<DType> kv_dtype;         // strategies.kv_cache.dtype (nullopt: auto)
  cpu::Impl kernels = cpu::Impl::kFast;  // strategies.kernels.impl
  int threads = 0;                       // strategies.threads.count (0: all cores)
  FusionOptions fusion;                  // strategies.fusion.{attention, residual_norm, ...}
  QuantizationConfig quantization;       // strategies.quantization.*
  bool cuda_graphs = true;               // strategies.cuda_graphs.enabled (CUDA decode)
  bool device_sampling = true;           // strategies.device_sampling.enabled (CUDA decode)
  AllocatorKind allocator = AllocatorKind::kCaching;  // strategies.allocator.kind

  KeyOrigins origins;  // which keys were set, and where (filled by the recipe parser)
};

// "q8_0" for a weight format, "keep" for nullopt.
std::string weight_format_name(const std::optional<DType>& weights);

}  // namespace rinfer
