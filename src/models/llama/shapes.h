// Hyper-parameters of real model shapes, for random-weight models (benchmarks of a shape
// without its files: llm_cuda_bench, a recipe's `model: random:<shape>[:<dtype>]`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/model.h"

namespace rinfer::llama {

// "llama3-8b" (hidden 4096, FFN 14336, 32 layers, 32 heads over 8 KV heads of 128, vocabulary
// 32000), "smollm2" (SmolLM2-135M: 576, 1536, 30 layers, 9 heads over 3 of 64, 49152, tied) or
// "tiny" (a test shape: 64, 160, 2 layers, 4 heads over 2 of 16, vocabulary 512, context 1024).
Result<DecoderHParams> named_shape(std::string_view name);
std::vector<std::string> shape_names();

}  // namespace rinfer::llama
