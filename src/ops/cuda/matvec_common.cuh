// Shared by the decode matvec kernels (matvec.cu, matvec_q16.cu; included by them only).
#pragma once

#include <cstdint>

#include "ops/cuda/common.cuh"

namespace rinfer::cuda::kern {

// Split-K of the decode matvecs: warps per group of `rows` rows (1, 2 or 4), each walking its
// share of the row's `chunks` 16-byte chunks. Matrices with few rows (attn_out, ffn_down) split
// until about 32 warps per SM are busy, so enough loads are in flight to reach the memory
// bandwidth; RINFER_MATVEC_SPLIT=1|2|4 in the environment forces a value (measurements).
// Defined in matvec.cu.
int matvec_split(int64_t n_out, int rows, int64_t chunks);

// The end of a decode matvec (matvec.cu, matvec_q16.cu): a warp holds per-lane partial sums
// acc[r] of rows row0 + r; with split-K, S adjacent warps of the block hold partial sums of the
// same rows (each over its share of the row) and are added through shared memory. Writes
// y[row] = sum (+ add[row]) for the rows below n_out. Every thread of the block must call it
// (S > 1 has a barrier); at most 32 warps a block.
template <int R, int S>
__device__ __forceinline__ void matvec_store(float (&acc)[R], int lane, int wi, int64_t row0,
                                             int64_t n_out, const float* add, float* y) {
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
  float v = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) v = lane == r ? acc[r] : v;
  if constexpr (S > 1) {
    __shared__ float part[32][R];
    if (lane < R) part[wi][lane] = v;
    __syncthreads();
    if (wi % S != 0 || lane >= R) return;
#pragma unroll
    for (int k = 1; k < S; ++k) v += part[wi + k][lane];
  }
  if (lane < R && row0 + lane < n_out) {
    const int64_t row = row0 + lane;
    if (add != nullptr) v += add[row];
    y[row] = v;
  }
}

}  // namespace rinfer::cuda::kern
