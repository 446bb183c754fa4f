// Random-weight host models of a named shape (models/llama/shapes.h): the CPU side of a
// `random:<shape>[:<dtype>]` model source (the CUDA side makes its weights on the device:
// make_random_cuda_model). The weights are drawn as f32, uniform in [-1, 1) / sqrt(fan-in) (the
// norms near 1), laid out as an in-memory GGUF file and loaded by LlamaModel::load like any
// other: the same checks, the same weight conversion.
#pragma once

#include <cstdint>
#include <memory>

#include "models/llama/llama_model.h"

namespace rinfer::llama {

// `dtype` is the matrices' type (the embedding table included) unless opts.weight_format
// already names one. The f32 image is checked against the host's available memory first.
Result<std::unique_ptr<LlamaModel>> make_random_host_model(const DecoderHParams& hp, DType dtype,
                                                           uint64_t seed, const LoadOptions& opts);

}  // namespace rinfer::llama
