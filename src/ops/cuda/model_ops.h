// Small CUDA operators the model samples need around the big kernels of ops_cuda.h: residual
// adds, scaling, bias rows, per-head RMSNorm inside a fused QKV buffer, row gathers. Each queues
// one kernel on `stream` (graph-capturable, allocation-free) and returns a Status; scalar
// references and tests: tests/ops_cuda/model_ops_cuda_test.cpp (rms_norm_q16:
// elementwise_cuda_test.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/ops_cuda.h"  // QuantizedActivation
#include "rinfer/status.h"

namespace rinfer::cuda {

// out[i] = a[i] + b[i], n floats (out may alias a or b).
Status add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream);

// x[i] *= s, n floats.
Status scale(float* x, int64_t n, float s, cudaStream_t stream);

// x[r * stride + i] += bias[i] for r < n_rows, i < n (stride >= n).
Status add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t n, int64_t stride,
                     cudaStream_t stream);

// Per-head RMSNorm in place: for token t < n_tokens and head h < n_heads, the head_dim floats at
// x + t * token_stride + h * head_dim become rms_norm(.) * w (w: [head_dim] f32).
Status rms_norm_heads(float* x, const float* w, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      int64_t token_stride, float eps, cudaStream_t stream);

// dst[r, :] = src[rows[r], :] for r < n_rows; rows of n floats, src rows src_stride apart,
// dst contiguous. rows: device int32.
Status gather_rows(const float* src, int64_t src_stride, const int32_t* rows, int64_t n_rows,
                   int64_t n, float* dst, cudaStream_t stream);

// Decode fusions with quantize_activation (one row, n a multiple of 32, qa.n == n):
// residual != nullptr: residual += x, out = rms_norm(residual) * w; else out = rms_norm(x) * w.
// out (f32 [n]) and qa receive the result (qa exactly as quantize_activation(out) would).
// n <= 32768 (one block holds the row in registers).
Status rms_norm_q16(const float* x, float* residual, const float* w, int64_t n, float eps,
                    float* out, const QuantizedActivation& qa, cudaStream_t stream);
// The same kernel without the quantization (decode with f32 activations: bf16/f16 weights).
Status rms_norm_row(const float* x, float* residual, const float* w, int64_t n, float eps,
                    float* out, cudaStream_t stream);
// The same with out's e4m3 codes f8 [n] (4-byte aligned) and scale f8_scale [1], exactly as
// quantize_rows_f8(out) makes them (decode over f8_e4m3 weights); n <= 16384.
Status rms_norm_row_f8(const float* x, float* residual, const float* w, int64_t n, float eps,
                       float* out, uint8_t* f8, float* f8_scale, cudaStream_t stream);
// out = silu(gate) * up, or gelu_tanh(gate) * up when gelu; and qa = quantized out.
Status glu_q16(const float* gate, const float* up, int64_t n, bool gelu, float* out,
               const QuantizedActivation& qa, cudaStream_t stream);

}  // namespace rinfer::cuda
