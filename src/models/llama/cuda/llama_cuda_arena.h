// The CUDA runner's KV arena (llama_cuda_runner.h): K and V of every layer in device memory,
// [n_blocks(group), block_size, kv_dim] of the spec's dtype, zeroed. Block copies (swap out, swap
// in, device to device) run on a copy stream ordered after the compute stream's work so far, and
// the compute stream waits for them; grow() copies the old blocks into new buffers.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <span>

#include "kv/kv_arena.h"
#include "rinfer/status.h"

namespace rinfer::llama {

Result<std::unique_ptr<kv::KvArena>> make_device_arena(const kv::KvSpec& spec,
                                                       std::span<const int32_t> n_blocks,
                                                       int device, cudaStream_t compute);

}  // namespace rinfer::llama
