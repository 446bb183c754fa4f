// The optimization strategies a recipe selects (`strategies:` in a recipe), as plain values.
// Each field belongs to one strategy module in src/strategies/<name>/ (parse, validate,
// describe); the registry (registry.h) lists them, and the engine turns them into its options
// (engine/strategy_options.h).
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
#include "kv/kv_spec.h"
#include "ops/params/kernel_config.h"
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

// Operator fusions a sample may apply (strategies.fusion). Off is the unfused baseline: the
// same math as separate kernels with intermediate tensors in memory.
struct FusionOptions {
  bool attention = true;      // one flash-attention kernel vs scores, softmax, weighted sum
  bool residual_norm = true;  // residual add + RMSNorm in one kernel (CUDA decode: in the matvecs)
  bool swiglu = true;         // gate/up activation fused into one kernel pass
  bool qkv = true;            // Q, K, V (and gate, up) read one quantized activation / launch
  // Image classifiers: each batch norm folded into its convolution's weights and bias at load.
  bool batchnorm = true;
  // Image classifiers: bias, residual and activation applied inside the convolution.
  bool conv_epilogue = true;
  // Image classifiers: each inverted-residual block (expand, depthwise, project) band by band,
  // its expanded tensor never whole in memory (needs batchnorm and conv_epilogue).
  bool blocks = true;
};

enum class AllocatorKind : uint8_t { kCaching, kPlain };

enum class BatchingPolicy : uint8_t { kStatic, kContinuous };
// How much KV memory the engine core reserves (kv_cache.prealloc.policy).
enum class KvPrealloc : uint8_t { kMax, kAuto };
enum class PreemptionMode : uint8_t { kRecompute, kSwap };
std::string_view batching_policy_name(BatchingPolicy p);
std::string_view preemption_mode_name(PreemptionMode m);

// strategies.batching (docs/strategies/batching.md).
struct BatchingConfig {
  BatchingPolicy policy = BatchingPolicy::kContinuous;
  int64_t max_seqs = 16;             // requests per step
  int64_t max_batched_tokens = 512;  // rows per forward pass
  bool chunked_prefill = true;
  PreemptionMode preemption = PreemptionMode::kRecompute;
  int64_t swap_blocks = 0;  // host blocks per layer group
  double watermark = 0.01;  // fraction of the pool kept free when admitting
  bool priority = false;    // order the queue by request priority, then arrival
};

// strategies.dynamic_batching (docs/strategies/dynamic_batching.md): how an embedding recipe
// groups many inputs into forward passes.
enum class EmbedBatching : uint8_t {
  kSingle,  // one input per forward pass (the baseline)
  kPadded,  // batches in input order, every sequence padded to the batch's longest
  kPacked,  // inputs sorted by length into batches, packed back to back without padding
};
std::string_view embed_batching_name(EmbedBatching p);
struct DynamicBatchingConfig {
  EmbedBatching policy = EmbedBatching::kPacked;
  int64_t max_seqs = 256;     // inputs per forward pass
  int64_t max_tokens = 8192;  // rows per forward pass (padding included)
};

enum class ActivationFormat : uint8_t {
  kInt8,   // quantize activations to int8 per block of 32, integer dot products (CPU fast)
  kFloat,  // f32 activations; quantized weights dequantized on the fly
  kBf16,   // encoders: matrices rounded to bf16 at load, bf16 activations on AMX tiles
};
std::string_view activation_format_name(ActivationFormat a);

struct QuantizationConfig {
  // strategies.quantization.weights: nullopt = keep each tensor's stored format.
  std::optional<DType> weights;
  // strategies.quantization.keep_layers as written (nullopt: the default, first and last).
  std::optional<std::vector<int64_t>> keep_layers;
  bool embeddings = false;  // convert the token embedding / output projection too
  ActivationFormat activations = ActivationFormat::kInt8;
  // strategies.quantization.smoothing: a `rinfer calibrate` file (a path relative to the recipe
  // that names it resolved against that recipe's folder); empty: none.
  std::string smoothing;

  // The layers that keep their stored precision: keep_layers, or {0, -1} when the weights are
  // converted and keep_layers is absent; empty when nothing is converted.
  std::vector<int64_t> effective_keep_layers() const;
};

struct StrategyConfig {
  bool kv_cache = true;                       // strategies.kv_cache.enabled
  std::optional<DType> kv_dtype;              // strategies.kv_cache.dtype (nullopt: auto)
  kv::Layout kv_layout = kv::Layout::kPaged;  // strategies.kv_cache.layout
  int64_t kv_block_size = 16;                 // strategies.kv_cache.block_size
  bool prefix_caching = true;                 // strategies.kv_cache.prefix_caching
  KvPrealloc kv_prealloc = KvPrealloc::kMax;  // strategies.kv_cache.prealloc.policy
  BatchingConfig batching;                    // strategies.batching.*
  DynamicBatchingConfig dynamic_batching;     // strategies.dynamic_batching.* (embeddings)
  cpu::Impl kernels = cpu::Impl::kFast;       // strategies.kernels.impl
  cuda::KernelConfig cuda_kernels;            // strategies.kernels.cuda.*
  int threads = 0;                            // strategies.threads.count (0: all cores)
  FusionOptions fusion;                       // strategies.fusion.{attention, residual_norm, ...}
  QuantizationConfig quantization;            // strategies.quantization.*
  bool cuda_graphs = true;                    // strategies.cuda_graphs.enabled (CUDA decode)
  bool device_sampling = true;                // strategies.device_sampling.enabled (CUDA decode)
  AllocatorKind allocator = AllocatorKind::kCaching;  // strategies.allocator.kind

  KeyOrigins origins;  // which keys were set, and where (filled by the recipe parser)
};

// "q8_0" for a weight format, "keep" for nullopt.
std::string weight_format_name(const std::optional<DType>& weights);

}  // namespace rinfer
