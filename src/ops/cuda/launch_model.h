// Launchers of model_ops_kernels.cu (internal; nvcc includes this: no fmt, no host headers).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rinfer::cuda::kern {

cudaError_t launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t s);
cudaError_t launch_scale(float* x, int64_t n, float v, cudaStream_t s);
cudaError_t launch_add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t n,
                                 int64_t stride, cudaStream_t s);
cudaError_t launch_rms_norm_heads(float* x, const float* w, int64_t n_tokens, int64_t n_heads,
                                  int64_t head_dim, int64_t token_stride, float eps,
                                  cudaStream_t s);
cudaError_t launch_gather_rows(const float* src, int64_t src_stride, const int32_t* rows,
                               int64_t n_rows, int64_t n, float* dst, cudaStream_t s);

// Decode fusions with the int16 activation quantization of matvec_q16 (n % 32 == 0):
// [residual += x]; out = rms_norm(residual or x) * w, and q/scale/sum16 of out (none when q is
// null), and out's e4m3 codes and row scale (none when f8 is null); one block, n <= 32768.
cudaError_t launch_rms_norm_q16(const float* x, float* residual, const float* w, int64_t n,
                                float eps, float* out, int16_t* q, float* scale, float* sum16,
                                uint8_t* f8, float* f8_scale, cudaStream_t s);
// out = silu(gate) * up (gelu: gelu_tanh(gate) * up), and q/scale/sum16 of out.
cudaError_t launch_glu_q16(const float* gate, const float* up, int64_t n, bool gelu, float* out,
                           int16_t* q, float* scale, float* sum16, cudaStream_t s);

}  // namespace rinfer::cuda::kern
