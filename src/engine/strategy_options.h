// The strategies a recipe chose (strategies/strategy_config.h, validated by the registry) turned
// into the options of the layers that act on them: the model's LoadOptions and the engine core's
// EngineCoreOptions. Each StrategyInfo's `hooks` names the fields its strategy sets here.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "engine/engine_core.h"
#include "models/model.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"
#include "strategies/strategy_config.h"

namespace rinfer {

// Validates the composition (validate_strategies), then sets load.device, load.cpu.ops (impl,
// quantize_activations), weight_format / keep_precision_layers / convert_embeddings, fusion,
// cuda_graphs, device_sampling, allocator and kv_dtype (kv_cache on or off is the engine core's:
// engine_core_options). The thread count stays in s.threads: the engine sizes its pool with it.
Status apply_strategies(const StrategyConfig& s, const Device& device, LoadOptions& load);
// The same with the recipe's strategies and device (errors name the recipe's keys). Does not
// check that a CUDA device exists: check_device_available() does, at load.
Status apply_strategies(const RecipeConfig& recipe, LoadOptions& load);

// What every engine does first with a recipe: apply_strategies, check_device_available, then
// resolve the model (errors name the recipe's keys). Returns the model's path.
Result<std::string> prepare_model_load(const RecipeConfig& recipe, LoadOptions& load);

// The engine core's options: kv_cache (off: every decode step recomputes its sequence),
// kv_cache.layout / block_size / prefix_caching, batching.* and the context length.
EngineCoreOptions engine_core_options(const StrategyConfig& s, int64_t n_ctx);

}  // namespace rinfer
