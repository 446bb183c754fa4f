#include "engine/strategy_options.h"

#include <fmt/format.h>

#include "formats/calibration.h"
#include "formats/model_cache.h"
#include "models/registry.h"
#include "strategies/registry.h"

namespace rinfer {

Status apply_strategies(const StrategyConfig& s, const Device& device, LoadOptions& load) {
  RINFER_RETURN_IF_ERROR(validate_strategies(s, device));
  load.device = device;
  // kv_cache (on or off: engine_core_options)
  load.kv_dtype = s.kv_dtype;
  // kernels
  load.cpu.ops.impl = s.kernels;
  load.cuda.kernels = s.cuda_kernels;
  // fusion
  load.fusion = s.fusion;
  // quantization
  const QuantizationConfig& q = s.quantization;
  load.weight_format = q.weights;
  load.keep_precision_layers = q.effective_keep_layers();
  load.convert_embeddings = q.weights.has_value() && q.embeddings;
  load.smoothing = nullptr;
  load.smoothing_file = q.smoothing;
  if (!q.smoothing.empty()) {
    auto stats = read_calibration(q.smoothing);
    if (!stats.ok()) {
      return stats.status().with_context(
          fmt::format("{}: strategies.quantization.smoothing",
                      s.origins.where("strategies.quantization.smoothing")));
    }
    load.smoothing = std::make_shared<const CalibrationStats>(std::move(stats).value());
  }
  load.cpu.ops.quantize_activations = q.activations == ActivationFormat::kInt8;
  load.cpu.bf16_matmuls = q.activations == ActivationFormat::kBf16;
  // cuda_graphs, device_sampling
  load.cuda.graphs = cuda_decode_switch_on(s, device, s.cuda_graphs);
  load.cuda.device_sampling = cuda_decode_switch_on(s, device, s.device_sampling);
  // allocator
  load.cuda.allocator = s.allocator;
  return ok_status();
}

Status apply_strategies(const RecipeConfig& recipe, LoadOptions& load) {
  return apply_strategies(recipe.strategies, recipe.device, load);
}

EngineCoreOptions engine_core_options(const StrategyConfig& s, int64_t n_ctx) {
  EngineCoreOptions o;
  o.n_ctx = n_ctx;
  o.layout = s.kv_layout;
  o.block_size = s.kv_block_size;
  o.prefix_caching = s.prefix_caching && s.kv_layout == kv::Layout::kPaged;
  o.prealloc = s.kv_prealloc;
  const BatchingConfig& b = s.batching;
  // Swap space: swap_blocks, or with preemption swap and none given, as much as the device pool.
  o.swap_blocks = b.swap_blocks > 0                       ? static_cast<int32_t>(b.swap_blocks)
                  : b.preemption == PreemptionMode::kSwap ? -1
                                                          : 0;
  SchedulerConfig& sc = o.scheduler;
  sc.policy = b.policy;
  sc.max_seqs = b.max_seqs;
  sc.max_batched_tokens = b.max_batched_tokens;
  sc.chunked_prefill = b.chunked_prefill;
  sc.preemption = b.preemption;
  sc.watermark = b.watermark;
  sc.order = b.priority ? QueueOrder::kPriority : QueueOrder::kFcfs;
  if (!s.kv_cache) {  // the baseline: every decode step recomputes the whole sequence
    sc.recompute_each_step = true;
    o.prefix_caching = false;
  }
  return o;
}

Result<std::string> prepare_model_load(const RecipeConfig& r, LoadOptions& load) {
  RINFER_RETURN_IF_ERROR(apply_strategies(r, load));
  RINFER_RETURN_IF_ERROR(check_device_available(r.device, r.origins()));
  if (is_random_source(r.model)) return r.model;  // random weights: no file to find
  auto path = resolve_recipe_model(r.model_ref);
  if (!path.ok()) return path.status().with_context(r.path + ": model");
  return path;
}

}  // namespace rinfer
