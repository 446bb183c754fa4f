// Prefill attention: FlashAttention-2 style tiling with an online softmax, causal, GQA.
//
// Block (query tile of 64 tokens, query head) with 4 warps, 16 query rows per warp. K and V
// tiles of kBc positions (64; 32 for head_dim 256, where the output accumulator alone takes 128
// registers a thread) are brought into shared memory with cp.async, double-buffered (the next
// tile loads while this one computes). S = Q K^T and O += P V run on the tensor cores
// (mma.sync m16n8k16, bf16 inputs, f32 accumulators); the softmax stays in registers: the S
// accumulator layout of two 8-column tiles is exactly the A-operand layout of a 16-wide k-step,
// so P never touches shared memory. Q fragments stay in registers for head_dim <= 128 and are
// re-read from shared memory for 256. Rows are padded by 16 bytes in shared memory, which makes
// the ldmatrix row addresses fall in distinct banks.
//
// Inputs: q f32 [n_tokens, n_head, D] (rounded to bf16 on load), k/v bf16 rows kv_row_stride
// elements apart ([n_kv, n_head_kv, D]; position j in row j % ring_rows for a ring cache); the
// new tokens are the last n_tokens positions, token t at position p = n_kv - n_tokens + t sees
// positions <= p (and > p - window with a sliding window: tiles before the block's first
// visible position are skipped, the rest masked). Out f32 or bf16 [n_tokens, n_head, D]. Query
// tiles are scheduled longest first (causal work grows with t).
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_tile.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/mma.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kBr = 64;  // query rows per block
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int kD>
struct PfCfg {
  static constexpr int kBc = kD <= 128 ? 64 : 32;   // KV positions per tile
  static constexpr bool kQInRegs = kD <= 128;       // Q fragments in registers, else re-read
  static constexpr int kStride = kD + 8;            // bf16 elements per shared-memory row
  static constexpr int kQElems = kBr * kStride;     // the Q tile
  static constexpr int kTileElems = kBc * kStride;  // one K or V tile
  static constexpr size_t kSmemBytes =
      (kQElems + 4 * kTileElems) * sizeof(uint16_t);  // Q, 2 K, 2 V
};

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attn_prefill_kernel(AttnArgs a, const float* __restrict__ q, const uint16_t* __restrict__ k,
                        const uint16_t* __restrict__ v, bool out_bf16, void* out) {
  using C = PfCfg<kD>;
  constexpr int S = C::kStride;
  constexpr int kBc = C::kBc;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;                    // [kBr][S]
  uint16_t* sK = smem + C::kQElems;       // [2][kBc][S]
  uint16_t* sV = sK + 2 * C::kTileElems;  // [2][kBc][S]

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int gid = lane / 4, tig = lane % 4;
  const int64_t q_tile = gridDim.x - 1 - blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t hk = h / (a.n_head / a.n_head_kv);
  const int64_t q0 = q_tile * kBr;
  const int64_t pos0 = a.n_kv - a.n_tokens;  // position of token 0
  const int64_t kv_end = min(a.n_kv, pos0 + q0 + kBr);
  // The first position any row of this block sees.
  const int64_t kv_lo = a.window > 0 ? max(int64_t{0}, pos0 + q0 - a.window + 1) : 0;
  const int tile_lo = static_cast<int>(kv_lo / kBc);
  const int tile_end = static_cast<int>((kv_end + kBc - 1) / kBc);
  const auto ring = static_cast<uint32_t>(a.ring_rows);

  auto load_kv = [&](int tile, int buf) {
    constexpr int kChunks = kBc * kD / 8;  // 16-byte chunks per tile
    const int64_t kv0 = static_cast<int64_t>(tile) * kBc;
    for (int i = tid; i < kChunks; i += kThreads) {
      const int r = i / (kD / 8), c = i % (kD / 8);
      const int64_t pos = kv0 + r;
      const bool ok = pos < a.n_kv && pos >= kv_lo;  // else zeros (masked, but never NaN)
      int64_t row = ok ? pos : 0;
      if (ring != 0) row = static_cast<uint32_t>(row) % ring;  // positions < 2^31
      const int64_t src = row * a.kv_row_stride + hk * kD + c * 8;
      const int dst = buf * C::kTileElems + r * S + c * 8;
      cp_async16(smem_u32(sK + dst), k + src, ok);
      cp_async16(smem_u32(sV + dst), v + src, ok);
    }
    cp_async_commit();
  };

  load_kv(tile_lo, 0);
  // Q tile: f32 -> bf16 into shared memory (rows past n_tokens are zeros).
  for (int i = tid; i < kBr * kD / 4; i += kThreads) {
    const int r = i / (kD / 4), c = i % (kD / 4);
    const int64_t t = q0 + r;
    float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (t < a.n_tokens) f = ld_f4(q + (t * a.n_head + h) * kD + c * 4);
    uint2 p;
    p.x = pack_bf16x2(f.x, f.y);
    p.y = pack_bf16x2(f.z, f.w);
    *reinterpret_cast<uint2*>(sQ + r * S + c * 4) = p;
  }
  __syncthreads();
  // A fragment k-step ks of this warp's 16 rows.
  const uint32_t q_frag_addr = smem_u32(sQ + (warp * 16 + (lane % 16)) * S + (lane / 16) * 8);
  constexpr int kQRegs = C::kQInRegs ? kD / 16 : 1;
  uint32_t qf[kQRegs][4];
  if constexpr (C::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) ldmatrix_x4(qf[ks], q_frag_addr + ks * 32);
  }

  float o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float sl2 = a.scale * kLog2e;
  const int64_t row_tok[2] = {q0 + warp * 16 + gid, q0 + warp * 16 + gid + 8};
  const int64_t row_pos[2] = {pos0 + row_tok[0], pos0 + row_tok[1]};
  const int64_t warp_min_pos = pos0 + q0 + warp * 16;
  const int64_t warp_max_pos = warp_min_pos + 15;

  for (int tile = tile_lo; tile < tile_end; ++tile) {
    const int buf = (tile - tile_lo) & 1;
    if (tile + 1 < tile_end) {
      load_kv(tile + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* tk = sK + buf * C::kTileElems;
    const uint16_t* tv = sV + buf * C::kTileElems;
    const int64_t kv0 = static_cast<int64_t>(tile) * kBc;

    // S = Q K^T: 16 rows x kBc keys per warp, n-tiles of 8 keys.
    float s[kBc / 8][4];
    flash_qk<kBc, kD, S, C::kQInRegs, kQRegs>(qf, q_frag_addr, tk, lane, s);

    // Mask (causal, window and past n_kv) only on tiles that reach past some row's range.
    const bool need_mask = kv0 + kBc - 1 > warp_min_pos || kv0 + kBc > a.n_kv ||
                           (a.window > 0 && kv0 <= warp_max_pos - a.window);
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * sl2;
        if (need_mask) {
          const int64_t key = kv0 + nt * 8 + tig * 2 + (e & 1);
          const int64_t rp = row_pos[e / 2];
          if (key > rp || key >= a.n_kv || (a.window > 0 && key <= rp - a.window)) x = -INFINITY;
        }
        s[nt][e] = x;
      }
    }

    // Online softmax per row, then O += P V.
    flash_softmax<kBc, kD>(s, m_run, l_run, o);
    flash_pv<kBc, kD, S>(s, tv, lane, o);
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }

  // Normalize and store.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = 1.0f / l;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t t = row_tok[r];
    if (t >= a.n_tokens) continue;
    const int64_t base = (t * a.n_head + h) * kD;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      const int64_t d = nt * 8 + tig * 2;
      const float x0 = o[nt][2 * r] * inv[r], x1 = o[nt][2 * r + 1] * inv[r];
      if (out_bf16) {
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(out) + base + d) = pack_bf16x2(x0, x1);
      } else {
        *reinterpret_cast<float2*>(static_cast<float*>(out) + base + d) = make_float2(x0, x1);
      }
    }
  }
}

template <int kD>
cudaError_t launch_d(const AttnArgs& a, const float* q, const uint16_t* k, const uint16_t* v,
                     bool out_bf16, void* out, cudaStream_t stream) {
  constexpr size_t smem = PfCfg<kD>::kSmemBytes;
  cudaError_t err = cudaFuncSetAttribute(
      attn_prefill_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((a.n_tokens + kBr - 1) / kBr),
                  static_cast<unsigned>(a.n_head));
  attn_prefill_kernel<kD><<<grid, kThreads, smem, stream>>>(a, q, k, v, out_bf16, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attn_prefill(const AttnArgs& a, const float* q, const uint16_t* k,
                                const uint16_t* v, bool out_bf16, void* out, cudaStream_t stream) {
  if (a.n_tokens <= 0) return cudaSuccess;
  if (a.head_dim == 64) return launch_d<64>(a, q, k, v, out_bf16, out, stream);
  if (a.head_dim == 128) return launch_d<128>(a, q, k, v, out_bf16, out, stream);
  if (a.head_dim == 256) return launch_d<256>(a, q, k, v, out_bf16, out, stream);
  return cudaErrorInvalidValue;
}

}  // namespace rinfer::cuda::kern
