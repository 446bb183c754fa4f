// Shared by the decode matvec kernels (matvec.cu, matvec_q16.cu; included by them only).
#pragma once

#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {

// Split-K of the decode matvecs: warps per group of `rows` rows (1, 2 or 4), each walking its
// share of the row's `chunks` 16-byte chunks. Matrices with few rows (attn_out, ffn_down) split
// until about 32 warps per SM are busy, so enough loads are in flight to reach the memory
// bandwidth; RINFER_MATVEC_SPLIT=1|2|4 in the environment forces a value (measurements).
// Defined in matvec.cu.
int matvec_split(int64_t n_out, int rows, int64_t chunks);
// The integer kernel (matvec_q16.cu): 2 wherever each warp keeps a chunk per lane, else 1. Its
// register cap leaves fewer resident warps than matvec_split's target assumes, and on the H200
// (Llama-3-8B decode step) split 2 everywhere beat that target's choice (4 for qkv, Wo and
// down, 1 for gate|up and the output): q4_0 1.89 -> 1.81 ms, q8_0 2.50 -> 2.47, q4_k 2.16 ->
// 2.10, SmolLM2 q4_1 0.548 -> 0.540; the 16-bit formats keep matvec_split (split 2 everywhere:
// bf16 3.88 -> 3.97).
int matvec_split_q16(int64_t chunks);
// Whether RINFER_MATVEC_SPLIT forces the split (then no rule may change it).
bool matvec_split_forced();

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

// The rows a warp reads: R consecutive rows from row0, clamped to the last row (tail rows
// recompute it and are never stored), as base pointers at row0 and 32-bit row offsets (fewer
// registers than R 64-bit pointers: the kernels' occupancy is register-bound).
struct MvRows {
  const uint8_t* w0 = nullptr;  // row0's weights
  const uint8_t* s0 = nullptr;  // row0's scales (Q8_0 / Q4_0: f16; Q4_1: f16 pairs; F8: f32)
  int32_t last = 0;             // the last row that exists, relative to row0
  int32_t rb = 0;               // weight bytes per row
  int32_t sb = 0;               // scale bytes per row
  __device__ __forceinline__ int32_t row(int r) const { return min(r, last); }
};

template <int F>
__device__ __forceinline__ MvRows matvec_rows(const WeightView& w, int64_t row0) {
  MvRows m;
  m.rb = static_cast<int32_t>(w_row_bytes<F>(w));
  const int64_t nb = w.n_in / 32;
  m.sb = static_cast<int32_t>(F == kWF8 ? 4 : (F == kWQ4_1 ? nb * 4 : nb * 2));
  const int64_t r0 = min(row0, w.n_out - 1);
  m.last = static_cast<int32_t>(w.n_out - 1 - r0);
  m.w0 = static_cast<const uint8_t*>(w.data) + r0 * m.rb;
  // Integer arithmetic: the 16-bit layouts have no scales (null), and are never read here.
  m.s0 = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(w.scales) +
                                          static_cast<uintptr_t>(r0 * m.sb));
  return m;
}

// One step's weight loads, all issued before any is used: chunks c0 + u * step (u < U, below nc)
// of the R rows, with the Q4_K super-block headers and the Q8_0 / Q4_0 f16 scales or Q4_1 (d, m)
// pairs.
template <int F, int U, int R>
__device__ __forceinline__ void matvec_load_step(const MvRows& m, int32_t c0, int32_t step,
                                                 int32_t nc, uint4 (&wv)[U][R], uint4 (&hdr)[U][R],
                                                 uint32_t (&sc)[U][R]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int32_t ci = c0 + u * step;
    if (ci < nc) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint8_t* rp = m.w0 + m.row(r) * m.rb;
        wv[u][r] = ld_stream16(rp + w_chunk_offset<F>(ci));
        if constexpr (F == kWQ4_K) hdr[u][r] = ld_stream16(rp + (ci >> 3) * 144);
        if constexpr (F == kWQ8_0 || F == kWQ4_0 || F == kWQ4_1) {
          const uint8_t* sp = m.s0 + m.row(r) * m.sb;
          if constexpr (F == kWQ8_0) {
            sc[u][r] = __ldg(reinterpret_cast<const uint16_t*>(sp) + ci / 2);
          } else if constexpr (F == kWQ4_0) {
            sc[u][r] = __ldg(reinterpret_cast<const uint16_t*>(sp) + ci);
          } else {
            sc[u][r] = __ldg(reinterpret_cast<const uint32_t*>(sp) + ci);
          }
        }
      }
    }
  }
}

}  // namespace rinfer::cuda::kern
