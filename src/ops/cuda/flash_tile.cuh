// The per-warp math of one KV tile in the FlashAttention-2 kernels (attention_prefill.cu,
// attention_paged.cu): a warp owns 16 query rows (rows gid and gid + 8 of each lane, fragment
// layouts in mma.cuh); K and V tiles of kBc positions sit in shared memory, rows kStride bf16
// elements apart. Included by .cu files only.
#pragma once

#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/mma.cuh"

namespace rinfer::cuda::kern {

// s[kBc / 8][4] = Q K^T for the warp's rows: the Q fragments from registers (qf, head_dim <= 128)
// or re-read from shared memory at q_frag_addr.
template <int kBc, int kD, int kStride, bool kQInRegs, int kQRegs>
__device__ __forceinline__ void flash_qk(const uint32_t (&qf)[kQRegs][4], uint32_t q_frag_addr,
                                         const uint16_t* tk, int lane, float (&s)[kBc / 8][4]) {
#pragma unroll
  for (int i = 0; i < kBc / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t qa[4];
    if constexpr (kQInRegs) {
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[i] = qf[ks][i];
    } else {
      ldmatrix_x4(qa, q_frag_addr + ks * 32);
    }
#pragma unroll
    for (int np = 0; np < kBc / 16; ++np) {
      const int mi = lane / 8;
      const int key = np * 16 + (lane % 8) + (mi / 2) * 8;
      const int col = ks * 16 + (mi % 2) * 8;
      uint32_t b[4];
      ldmatrix_x4(b, smem_u32(tk + key * kStride + col));
      mma_bf16(s[2 * np], qa, b[0], b[1]);
      mma_bf16(s[2 * np + 1], qa, b[2], b[3]);
    }
  }
}

// The online softmax over one tile of scaled (log2-domain), masked scores: the running max and
// sum of each of the lane's two rows updated, s turned into exp2(s - max), o rescaled. A row
// whose scores are all -inf so far keeps max -inf and contributes zeros.
template <int kBc, int kD>
__device__ __forceinline__ void flash_softmax(float (&s)[kBc / 8][4], float (&m_run)[2],
                                              float (&l_run)[2], float (&o)[kD / 8][4]) {
  float corr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m_run[r];
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == -INFINITY ? 0.0f : mx;
    corr[r] = exp2f(m_run[r] - base);
    m_run[r] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt) {
      s[nt][2 * r] = exp2f(s[nt][2 * r] - base);
      s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - base);
      sum += s[nt][2 * r] + s[nt][2 * r + 1];
    }
    l_run[r] = l_run[r] * corr[r] + sum;  // this lane's share; the quad is summed at the end
  }
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) {
    o[i][0] *= corr[0];
    o[i][1] *= corr[0];
    o[i][2] *= corr[1];
    o[i][3] *= corr[1];
  }
}

// o += P V: P from registers as A fragments (the S accumulator layout of two 8-column tiles is
// the A layout of a 16-wide k-step), V through ldmatrix.trans.
template <int kBc, int kD, int kStride>
__device__ __forceinline__ void flash_pv(const float (&s)[kBc / 8][4], const uint16_t* tv, int lane,
                                         float (&o)[kD / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
    uint32_t pa[4];
    pa[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      const int mi = lane / 8;
      const int key = kk * 16 + (lane % 8) + (mi % 2) * 8;
      const int col = dp * 16 + (mi / 2) * 8;
      uint32_t b[4];
      ldmatrix_x4_trans(b, smem_u32(tv + key * kStride + col));
      mma_bf16(o[2 * dp], pa, b[0], b[1]);
      mma_bf16(o[2 * dp + 1], pa, b[2], b[3]);
    }
  }
}

}  // namespace rinfer::cuda::kern
