// The kernel launchers of the encoder ops (internal; encoder_ops.h is the API). Each launches
// without checking and returns cudaGetLastError(). Free of the host headers: nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rinfer::cuda::kern {

cudaError_t launch_layer_norm(const float* x, const float* bias, const float* residual,
                              const float* gamma, const float* beta, int64_t n_rows, int64_t n,
                              float eps, float* out, uint16_t* out_bf16, cudaStream_t stream);

cudaError_t launch_bias_gelu_erf(const void* x, bool x_bf16, const float* bias, int64_t n_rows,
                                 int64_t n, uint16_t* out, cudaStream_t stream);

cudaError_t launch_embed_sum(const float* word, const float* pos, const float* type, int64_t n,
                             const int32_t* ids, const int32_t* positions, const int32_t* types,
                             int64_t n_rows, float* out, cudaStream_t stream);

struct VarlenAttnArgs {
  int n_seqs, n_head, head_dim, max_len;
  int64_t qkv_stride, out_stride;
  float scale;
  const int32_t* starts;
  const int32_t* lengths;
  const float* bias;
};
cudaError_t launch_attn_varlen(const VarlenAttnArgs& a, const uint16_t* qkv, uint16_t* out,
                               cudaStream_t stream);

cudaError_t launch_pool_rows(bool cls, bool normalize, const float* hidden, int64_t n,
                             const int32_t* starts, const int32_t* lengths, int64_t n_seqs,
                             float* out, cudaStream_t stream);

}  // namespace rinfer::cuda::kern
