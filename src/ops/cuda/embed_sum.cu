// BERT's input embeddings: out[r] = word[ids[r]] + (pos[positions[r]] + type[types[r]]), the sum
// in the CPU runner's order. One block per row.
#include "ops/cuda/common.cuh"
#include "ops/cuda/encoder_launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void embed_sum_kernel(const float* __restrict__ word, const float* __restrict__ pos,
                                 const float* __restrict__ type, int64_t n,
                                 const int32_t* __restrict__ ids,
                                 const int32_t* __restrict__ positions,
                                 const int32_t* __restrict__ types, float* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const float* w = word + static_cast<int64_t>(ids[row]) * n;
  const float* p = pos + static_cast<int64_t>(positions[row]) * n;
  const float* t = type + (types != nullptr ? static_cast<int64_t>(types[row]) * n : 0);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[row * n + i] = w[i] + (p[i] + t[i]);
}

}  // namespace

cudaError_t launch_embed_sum(const float* word, const float* pos, const float* type, int64_t n,
                             const int32_t* ids, const int32_t* positions, const int32_t* types,
                             int64_t n_rows, float* out, cudaStream_t stream) {
  embed_sum_kernel<<<static_cast<unsigned>(n_rows), 128, 0, stream>>>(word, pos, type, n, ids,
                                                                      positions, types, out);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
