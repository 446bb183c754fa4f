// Taps of the CUDA runner's multi-row pass (models/taps.h): the device rows of an activation,
// copied to the host as f32 once the stream has computed them. A pass with taps runs eagerly
// (no graph, no one-row decode pass), so every tap sees the pass's rows in order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "models/taps.h"
#include "rinfer/status.h"

namespace rinfer::llama {

// When `taps` wants `kind`: waits for `stream`, copies rows [n_rows, width] of `dtype` (f32 or
// bf16, rows packed) from `device` into `host` (as f32) and records them. Otherwise nothing.
Status tap_device_rows(TapSink* taps, TapKind kind, int64_t layer, const void* device, DType dtype,
                       int64_t n_rows, int64_t width, cudaStream_t stream,
                       std::vector<float>& host);

}  // namespace rinfer::llama
