// The CUDA operators of the encoder samples (BERT; CUDA builds only), with the conventions of
// ops_cuda.h: device pointers and a stream, arguments checked before anything is queued
// (kInvalidArgument), stream-ordered and allocation-free. Ground truth: the CPU references of
// ops/cpu/ops.h (tests/ops_cuda/encoder_cuda_test.cpp compares each kernel with them).
//
// The BERT layer on the device (models/bert/cuda): bf16 GEMM operands from cuBLASLt, f32 residual
// stream; every bias is fused into the kernel after its GEMM:
//   qkv (bf16, no bias) -> attention_varlen (q|k|v bias added as the tiles load) -> bf16
//   a Wo^T (f32) -> layer_norm(y + bo + residual) -> f32 residual and the bf16 GEMM input
//   x W1^T (bf16) -> bias_gelu_erf (in place) -> W2^T (f32) -> layer_norm(y + b2 + residual)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/params/op_params.h"  // PoolKind
#include "rinfer/status.h"

namespace rinfer::cuda {

// out = (z - mean(z)) / sqrt(var(z) + eps) * gamma + beta per row of n, z = x + bias + residual
// (bias [n] and residual [n_rows, n] may be null), the biased variance, as cpu::layer_norm.
// x: f32 [n_rows, n]. Outputs (at least one): out f32 [n_rows, n] (may alias x or residual),
// out_bf16 [n_rows, n] (rounded to nearest even). n at most kMaxLayerNorm.
inline constexpr int64_t kMaxLayerNorm = 8192;
Status layer_norm(const float* x, const float* bias, const float* residual, const float* gamma,
                  const float* beta, int64_t n_rows, int64_t n, float eps, float* out,
                  uint16_t* out_bf16, cudaStream_t stream);

// out[r, i] = gelu(x[r, i] + bias[i]) with the exact GELU 0.5 z erfc(-z / sqrt(2)) (cpu::gelu_erf;
// erfc keeps the negative tail's relative accuracy). x: f32 or bf16 [n_rows, n] (`x_dtype`),
// bias f32 [n] or null; out bf16 [n_rows, n], may alias a bf16 x. n even.
Status bias_gelu_erf(const void* x, DType x_dtype, const float* bias, int64_t n_rows, int64_t n,
                     uint16_t* out, cudaStream_t stream);

// The embedding sum of BERT: out[r] = word[ids[r]] + (pos[positions[r]] + type[types[r]]), f32
// tables of rows of n (types null: type row 0). ids, positions, types: device int32 [n_rows],
// within their tables (checked on the host by the caller: check_encoder_batch).
struct EmbedTables {
  const float* word = nullptr;
  const float* pos = nullptr;
  const float* type = nullptr;
  int64_t n = 0;
};
Status embed_sum(const EmbedTables& t, const int32_t* ids, const int32_t* positions,
                 const int32_t* types, int64_t n_rows, float* out, cudaStream_t stream);

// Bidirectional multi-head attention over a batch of sequences packed (or padded) in rows: the
// sequence s holds rows [starts[s], starts[s] + lengths[s]) of qkv and out, and its queries see
// exactly its own rows (no padding, no other sequence). qkv: bf16 rows qkv_stride elements apart,
// [q: n_head heads | k: n_head | v: n_head] of head_dim; `bias` (f32 [3 n_head head_dim], or
// null) is added to q, k and v as they load, each then rounded to bf16. FlashAttention-2 tiles
// on the tensor cores (bf16 inputs and probabilities, f32 accumulation and softmax). out: bf16
// rows out_stride apart, [n_head, head_dim]; rows outside every sequence are not written.
// head_dim 32, 64 or 128; starts and lengths: device int32 [n_seqs]; max_len: the longest
// length (host; sizes the grid).
struct VarlenAttentionParams {
  int64_t n_seqs = 0, n_head = 0, head_dim = 0;
  int64_t qkv_stride = 0, out_stride = 0;
  int32_t max_len = 0;
  float scale = 1.0f;
  const int32_t* starts = nullptr;
  const int32_t* lengths = nullptr;
  const float* bias = nullptr;
};
Status attention_varlen(const VarlenAttentionParams& p, const uint16_t* qkv, uint16_t* out,
                        cudaStream_t stream);

// out[s, :] = the pool of hidden rows [starts[s], starts[s] + lengths[s]) (mean, or the first
// row for kCls), then divided by its L2 norm when `normalize` (a zero row stays zero), as
// cpu::pool_rows. hidden f32 rows of n (at most kMaxLayerNorm); out f32 [n_seqs, n].
Status pool_rows(PoolKind kind, bool normalize, const float* hidden, int64_t n,
                 const int32_t* starts, const int32_t* lengths, int64_t n_seqs, float* out,
                 cudaStream_t stream);

}  // namespace rinfer::cuda
