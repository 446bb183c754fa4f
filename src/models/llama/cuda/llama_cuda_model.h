// The Llama-family decoder sample on a CUDA device (CUDA builds only): the same math as
// LlamaModel (llama_model.h), with the weights in device memory, run by its runner
// (llama_cuda_runner.h) over the engine core's paged KV arena on the device.
//
// Per layer, with the fusions of LoadOptions::fusion (each has its unfused baseline):
//   h = rms_norm(x) * attn_norm               fused with the previous block's residual add
//   qkv = h [Wq|Wk|Wv]^T (+ b)                qkv: one merged matrix (else three)
//   q, k = per-head norms (Gemma), rope      qkv: rope + K/V cache store in one kernel
//   K/V arena rows <- k, v (bf16, or f32)
//   attn = attention(q, K, V)                 paged: decode split-K, many rows FA2-style tiles
//   o = attn Wo^T (Gemma: o = rms_norm(o) * post_attn_norm)
//   x += o; h = rms_norm(x) * ffn_norm        residual_norm: one kernel, or (decode) none: the
//                                             matvecs on either side do it (else add, norm)
//   gu = h [Wgate|Wup]^T                      swiglu: one merged matrix (else two)
//   a = silu(gate) * up (Gemma: gelu_tanh)
//   o = a Wdown^T (Gemma: post_ffn_norm)
// logits = rms_norm(x) * output_norm  Wout^T for the requested rows only.
//
// A decode step of one sequence runs the model's one-row pass (LlamaCudaModel::forward):
// matrix-vector kernels, f32 activations for bf16/f16/f32 weights, int16 activations quantized
// once per input and shared by every matrix that reads it for Q8_0, Q4_0, Q4_1 and Q4_K
// weights. Other batches run the runner's bf16 GEMMs through cuBLASLt (quantized weights
// dequantized per call into one workspace, or the small-batch matvec). With
// LoadOptions::cuda.graphs the one-row step is replayed from a CUDA graph per arena and
// attention length bound (llama_cuda_graphs.h). The decode kernels use programmatic dependent
// launch (each one's launch overlaps the previous one's tail; strategies.kernels.cuda.pdl).
#pragma once

#include <memory>
#include <vector>

#include "models/llama/llama_model.h"
#include "models/model.h"

namespace rinfer::llama {

class LlamaCudaModel;

// Uploads a loaded host model (GGUF or safetensors) to opts.device. The host model's memory is
// released once its weights are on the device.
Result<std::unique_ptr<DecoderModel>> make_cuda_model(std::unique_ptr<LlamaModel> host,
                                                      const LoadOptions& opts);

// A model of the given shape with random weights made on the device in `dtype` (bf16, f16,
// q8_0, q4_0, q4_1, q4_k), for benchmarks of real shapes without model files.
Result<std::unique_ptr<DecoderModel>> make_random_cuda_model(const DecoderHParams& hp, DType dtype,
                                                             uint64_t seed,
                                                             const LoadOptions& opts);

// Decode steps the runners of a model made by make_cuda_model or make_random_cuda_model have
// replayed from CUDA graphs (one-row and batch steps; 0 for any other model).
int64_t cuda_graph_steps(const DecoderModel& m);

}  // namespace rinfer::llama
