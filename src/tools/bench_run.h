// One measured request through an engine core, as rinfer bench and rinfer tune run it: an empty
// prefix cache, the prompt, then max_tokens greedy tokens with end-of-generation ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine_core.h"
#include "rinfer/status.h"

namespace rinfer {

// Greedy, no penalties: every variant generates the same tokens.
SamplingParams bench_sampling();

// `on_token` after each sampled token.
Result<RequestStats> bench_core_run(EngineCore& core, const std::vector<int32_t>& prompt,
                                    int64_t max_tokens, const std::function<void()>& on_token);

}  // namespace rinfer
