// Bidirectional variable-length attention for encoders (BERT): the FlashAttention-2 tiling of
// attention_prefill.cu over sequences packed in rows, reading q, k and v straight from the fused
// qkv GEMM output with its bias added on load.
//
// A block (grid: query tiles x heads x sequences) owns 64 query rows of one head of one sequence,
// 4 warps of 16 rows. Q, then each K and V tile of 64 positions, are loaded as 16-byte chunks of
// bf16, the bias added in f32 and rounded back to bf16, into shared memory (rows padded by 16
// bytes: distinct ldmatrix banks). S = Q K^T and O += P V run on the tensor cores (mma.sync
// m16n8k16, bf16 inputs, f32 accumulators), the softmax online in registers (flash_tile.cuh).
// Only the last tile is masked (keys past the sequence); query rows past it are computed from
// zeros and never stored. Encoder sequences are short (a few tiles), so the loads are plain and
// single-buffered.
#include "ops/cuda/common.cuh"
#include "ops/cuda/encoder_launch.h"
#include "ops/cuda/flash_tile.cuh"
#include "ops/cuda/mma.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kBr = 64;  // query rows per block
constexpr int kBc = 64;  // KV positions per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int kD>
struct VlCfg {
  static constexpr int kStride = kD + 8;  // bf16 elements per shared-memory row
  static constexpr int kTileElems = kBr * kStride;
  static constexpr size_t kSmemBytes = 3 * kTileElems * sizeof(uint16_t);  // Q, K, V
};

// Rows [r0, r0 + 64) of part `part` (0 q, 1 k, 2 v) of head h into dst, bias added; rows at or
// past len are zeros.
template <int kD>
__device__ __forceinline__ void load_tile(const VarlenAttnArgs& a, const uint16_t* __restrict__ qkv,
                                          int64_t row0, int len, int part, int h, int r0,
                                          uint16_t* dst) {
  constexpr int S = VlCfg<kD>::kStride;
  constexpr int kChunks = kBr * kD / 8;
  const int64_t col0 = static_cast<int64_t>(part) * a.n_head * kD + static_cast<int64_t>(h) * kD;
  for (int i = threadIdx.x; i < kChunks; i += kThreads) {
    const int r = i / (kD / 8), c = i % (kD / 8);
    const int t = r0 + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < len) {
      const int64_t col = col0 + c * 8;
      v = *reinterpret_cast<const uint4*>(qkv + (row0 + t) * a.qkv_stride + col);
      if (a.bias != nullptr) {
        const float4 b0 = *reinterpret_cast<const float4*>(a.bias + col);
        const float4 b1 = *reinterpret_cast<const float4*>(a.bias + col + 4);
        v.x = pack_bf16x2(bf16_lo(v.x) + b0.x, bf16_hi(v.x) + b0.y);
        v.y = pack_bf16x2(bf16_lo(v.y) + b0.z, bf16_hi(v.y) + b0.w);
        v.z = pack_bf16x2(bf16_lo(v.z) + b1.x, bf16_hi(v.z) + b1.y);
        v.w = pack_bf16x2(bf16_lo(v.w) + b1.z, bf16_hi(v.w) + b1.w);
      }
    }
    *reinterpret_cast<uint4*>(dst + r * S + c * 8) = v;
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attn_varlen_kernel(VarlenAttnArgs a, const uint16_t* __restrict__ qkv,
                       uint16_t* __restrict__ out) {
  using C = VlCfg<kD>;
  constexpr int S = C::kStride;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = smem + C::kTileElems;
  uint16_t* sV = sK + C::kTileElems;

  const int seq = blockIdx.z, h = blockIdx.y;
  const int len = a.lengths[seq];
  const int q0 = blockIdx.x * kBr;
  if (q0 >= len) return;
  const int64_t row0 = a.starts[seq];
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int gid = lane / 4, tig = lane % 4;

  load_tile<kD>(a, qkv, row0, len, 0, h, q0, sQ);
  __syncthreads();
  const uint32_t q_frag_addr = smem_u32(sQ + (warp * 16 + (lane % 16)) * S + (lane / 16) * 8);
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) ldmatrix_x4(qf[ks], q_frag_addr + ks * 32);

  float o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float sl2 = a.scale * kLog2e;
  const bool warp_live = q0 + warp * 16 < len;

  for (int kv0 = 0; kv0 < len; kv0 += kBc) {
    load_tile<kD>(a, qkv, row0, len, 1, h, kv0, sK);
    load_tile<kD>(a, qkv, row0, len, 2, h, kv0, sV);
    __syncthreads();
    if (warp_live) {
      float s[kBc / 8][4];
      flash_qk<kBc, kD, S, true, kD / 16>(qf, q_frag_addr, sK, lane, s);
      const bool need_mask = kv0 + kBc > len;
#pragma unroll
      for (int nt = 0; nt < kBc / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nt][e] * sl2;
          if (need_mask && kv0 + nt * 8 + tig * 2 + (e & 1) >= len) x = -INFINITY;
          s[nt][e] = x;
        }
      }
      flash_softmax<kBc, kD>(s, m_run, l_run, o);
      flash_pv<kBc, kD, S>(s, sV, lane, o);
    }
    __syncthreads();
  }

  if (!warp_live) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int t = q0 + warp * 16 + gid + 8 * r;
    if (t >= len) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    uint16_t* dst = out + (row0 + t) * a.out_stride + static_cast<int64_t>(h) * kD;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      const int d = nt * 8 + tig * 2;
      *reinterpret_cast<uint32_t*>(dst + d) =
          pack_bf16x2(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
    }
  }
}

template <int kD>
cudaError_t launch_d(const VarlenAttnArgs& a, const uint16_t* qkv, uint16_t* out,
                     cudaStream_t stream) {
  constexpr size_t smem = VlCfg<kD>::kSmemBytes;
  if (smem > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(attn_varlen_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>((a.max_len + kBr - 1) / kBr),
                  static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_seqs));
  attn_varlen_kernel<kD><<<grid, kThreads, smem, stream>>>(a, qkv, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attn_varlen(const VarlenAttnArgs& a, const uint16_t* qkv, uint16_t* out,
                               cudaStream_t stream) {
  if (a.head_dim == 32) return launch_d<32>(a, qkv, out, stream);
  if (a.head_dim == 64) return launch_d<64>(a, qkv, out, stream);
  if (a.head_dim == 128) return launch_d<128>(a, qkv, out, stream);
  return cudaErrorInvalidValue;
}

}  // namespace rinfer::cuda::kern
