// Paged attention over block tables for a multi-sequence batch (decode rows, prefill chunks and
// whole prompts in one launch): the FlashAttention-2 tiling of attention_prefill.cu with the
// query heads of one KV head packed into the tile's rows and K/V rows found through each
// sequence's block table.
//
// A block (grid: KV heads x items x splits) works on one work item (a sequence and its tokens [t0,
// t0 + T), T = R / G for G query heads per KV head), one KV head hk and one split of the item's KV
// tiles. Its R rows (64, 4 warps; or 128, 8 warps, for batches of long prompt chunks: each K/V tile
// then serves twice the rows) are (token t0 + r / G, query head hk * G + r % G), so each K/V tile
// is loaded once for all the heads that read it: a decode row fills G rows, a prefill chunk all
// R. Rows past
// the item's tokens are computed as fully masked and never stored; a warp whose 16 rows are all
// such skips the math. K and V tiles of kBc positions come through cp.async, double-buffered;
// position p of sequence s is row table[s][p / block_size] * block_size + p % block_size of the
// arena. S = Q K^T and O += P V run on the tensor cores (bf16 inputs, f32 accumulators).
//
// Splits (grid.z > 1): split z takes its share of the item's tiles and writes its unnormalized
// output and (max, sum) per row to the workspace; attn_paged_combine merges them.
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_tile.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/mma.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// kRows query rows a block (64 or 128), 16 a warp.
template <int kD, int kTile, int kStages, int kRows>
struct PgCfg {
  static constexpr int kBr = kRows;
  static constexpr int kThreads = kRows / 16 * 32;
  static constexpr int kBc = kTile;
  static constexpr bool kQInRegs = kD <= 128;
  static constexpr int kStride = kD + 8;
  static constexpr int kQElems = kBr * kStride;
  static constexpr int kTileElems = kBc * kStride;
  static constexpr size_t kSmemBytes = (kQElems + 2 * kStages * kTileElems) * sizeof(uint16_t);
};

template <int kD, int kTile, int kStages, int kRows>
__global__ void __launch_bounds__(kRows / 16 * 32)
    attn_paged_kernel(PagedAttnArgs a, const float* __restrict__ q, const uint16_t* __restrict__ k,
                      const uint16_t* __restrict__ v, uint16_t* __restrict__ out,
                      float* __restrict__ part_o, float* __restrict__ part_ml) {
  using C = PgCfg<kD, kTile, kStages, kRows>;
  constexpr int kBr = C::kBr, kThreads = C::kThreads;
  constexpr int S = C::kStride;
  constexpr int kBc = C::kBc;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = smem + C::kQElems;
  uint16_t* sV = sK + kStages * C::kTileElems;

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int gid = lane / 4, tig = lane % 4;
  const int2 item = a.work[blockIdx.y];
  const int seq = item.x;
  if (seq < 0) return;  // padding of a fixed-size grid
  const int t0 = item.y;
  const int hk = blockIdx.x;  // heads fastest: a sequence's heads read its rows together
  const int split = blockIdx.z, n_splits = gridDim.z;
  const int G = a.n_head / a.n_head_kv;
  const int T = kBr / G;  // tokens per item
  const int qs = a.query_start[seq];
  const int nq = a.query_start[seq + 1] - qs;
  const int L = a.kv_len[seq];
  const int pos0 = L - nq;
  const int n_tok = min(T, nq - t0);  // tokens of this item
  const int n_rows = n_tok * G;       // valid rows: [0, n_rows)
  const int* __restrict__ table = a.tables + static_cast<int64_t>(seq) * a.table_stride;

  // KV positions any row of the item sees.
  const int kv_end = a.causal ? min(L, pos0 + t0 + n_tok) : L;
  const int kv_lo = a.window > 0 ? max(0, pos0 + t0 - a.window + 1) : 0;
  const int tile_lo0 = kv_lo / kBc;
  const int tile_end0 = (kv_end + kBc - 1) / kBc;
  const int per = (tile_end0 - tile_lo0 + n_splits - 1) / n_splits;
  const int tile_lo = tile_lo0 + split * per;
  const int tile_end = min(tile_end0, tile_lo + per);

  // Shifts and masks where block_size and G are powers of two: a division by a value known only
  // at run time is a dozen instructions, and the table lookups take two a chunk a tile.
  auto row_token = [&](int r) {  // within the sequence
    return t0 + (a.group_shift >= 0 ? r >> a.group_shift : r / G);
  };
  auto row_head = [&](int r) { return hk * G + (a.group_shift >= 0 ? r & (G - 1) : r % G); };
  auto block_of = [&](int pos) {
    return a.block_shift >= 0 ? pos >> a.block_shift : pos / a.block_size;
  };
  auto in_block = [&](int pos) {
    return a.block_shift >= 0 ? pos & (a.block_size - 1) : pos % a.block_size;
  };

  if (tile_lo >= tile_end) {
    // An empty split (short sequences in a split launch): nothing seen.
    if (n_splits > 1) {
      for (int r = tid; r < n_rows; r += kThreads) {
        const int64_t row = static_cast<int64_t>(qs + row_token(r)) * a.n_head + row_head(r);
        const int64_t pi = static_cast<int64_t>(split) * a.n_tokens * a.n_head + row;
        part_ml[2 * pi] = -INFINITY;
        part_ml[2 * pi + 1] = 0.0f;
      }
    }
    return;
  }

  // A tile's rows through the table, in two steps so the table reads never stall a copy: the
  // block ids of a thread's rows of tile t + 2 are read (plain loads, used one iteration later)
  // while tile t + 1 is copied with the ids read one iteration before.
  constexpr int kChunks = kBc * kD / 8;
  constexpr int kPer = kChunks / kThreads;
  static_assert(kChunks % kThreads == 0);
  auto lookup = [&](int tile, int(&blk)[kPer]) {
    const int kv0 = tile * kBc;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int pos = kv0 + (tid + j * kThreads) / (kD / 8);
      blk[j] = tile < tile_end && pos < kv_end && pos >= kv_lo ? table[block_of(pos)] : -1;
    }
  };
  auto load_kv = [&](int tile, int buf, const int(&blk)[kPer]) {
    const int kv0 = tile * kBc;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * kThreads;
      const int r = i / (kD / 8), c = i % (kD / 8);
      const int pos = kv0 + r;
      const bool ok = blk[j] >= 0;
      const int64_t row = ok ? static_cast<int64_t>(blk[j]) * a.block_size + in_block(pos) : 0;
      const int64_t src = row * a.kv_row_stride + static_cast<int64_t>(hk) * kD + c * 8;
      const int dst = buf * C::kTileElems + r * S + c * 8;
      cp_async16(smem_u32(sK + dst), k + src, ok);
      cp_async16(smem_u32(sV + dst), v + src, ok);
    }
    cp_async_commit();
  };

  // The first kStages - 1 tiles (an empty group past the end keeps the group count uniform).
  {
    int blk0[kStages - 1][kPer];
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) lookup(tile_lo + st, blk0[st]);
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (tile_lo + st < tile_end) {
        load_kv(tile_lo + st, st, blk0[st]);
      } else {
        cp_async_commit();
      }
    }
  }
  int blk_next[kPer];
  lookup(tile_lo + kStages - 1, blk_next);
  for (int i = tid; i < kBr * kD / 4; i += kThreads) {
    const int r = i / (kD / 4), c = i % (kD / 4);
    float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < n_rows) {
      f = ld_f4(q + static_cast<int64_t>(qs + row_token(r)) * a.q_stride +
                static_cast<int64_t>(row_head(r)) * kD + c * 4);
    }
    uint2 p;
    p.x = pack_bf16x2(f.x, f.y);
    p.y = pack_bf16x2(f.z, f.w);
    *reinterpret_cast<uint2*>(sQ + r * S + c * 4) = p;
  }
  __syncthreads();
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
  const int rows_of[2] = {warp * 16 + gid, warp * 16 + gid + 8};
  const bool row_ok[2] = {rows_of[0] < n_rows, rows_of[1] < n_rows};
  const int row_pos[2] = {pos0 + row_token(rows_of[0]), pos0 + row_token(rows_of[1])};
  const bool warp_live = warp * 16 < n_rows;
  const bool warp_partial = warp * 16 + 15 >= n_rows;
  const int warp_min_pos = pos0 + row_token(warp * 16);
  const int warp_max_pos = pos0 + row_token(warp * 16 + 15);

  for (int tile = tile_lo; tile < tile_end; ++tile) {
    const int it = tile - tile_lo;
    const int buf = it % kStages;
    // Tile it + kStages - 1 goes into the buffer computed last iteration (free after its
    // closing barrier); then tile `it` is waited for.
    const int pre = tile + kStages - 1;
    if (pre < tile_end) {
      load_kv(pre, (it + kStages - 1) % kStages, blk_next);
    } else {
      cp_async_commit();
    }
    lookup(pre + 1, blk_next);
    cp_async_wait<kStages - 1>();
    __syncthreads();
    if (warp_live) {
      const uint16_t* tk = sK + buf * C::kTileElems;
      const uint16_t* tv = sV + buf * C::kTileElems;
      const int kv0 = tile * kBc;
      float s[kBc / 8][4];
      flash_qk<kBc, kD, S, C::kQInRegs, kQRegs>(qf, q_frag_addr, tk, lane, s);
      const bool need_mask = warp_partial || kv0 + kBc > kv_end || kv0 < kv_lo ||
                             (a.causal && kv0 + kBc - 1 > warp_min_pos) ||
                             (a.window > 0 && kv0 <= warp_max_pos - a.window);
#pragma unroll
      for (int nt = 0; nt < kBc / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nt][e] * sl2;
          if (need_mask) {
            const int key = kv0 + nt * 8 + tig * 2 + (e & 1);
            const int rp = row_pos[e / 2];
            if (!row_ok[e / 2] || key >= L || (a.causal && key > rp) ||
                (a.window > 0 && key <= rp - a.window)) {
              x = -INFINITY;
            }
          }
          s[nt][e] = x;
        }
      }
      flash_softmax<kBc, kD>(s, m_run, l_run, o);
      flash_pv<kBc, kD, S>(s, tv, lane, o);
    }
    __syncthreads();
  }

  if (!warp_live) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (!row_ok[r]) continue;
    const int64_t row =
        static_cast<int64_t>(qs + row_token(rows_of[r])) * a.n_head + row_head(rows_of[r]);
    if (n_splits == 1) {
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      uint16_t* dst = out + static_cast<int64_t>(qs + row_token(rows_of[r])) * a.out_stride +
                      static_cast<int64_t>(row_head(rows_of[r])) * kD;
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        const int d = nt * 8 + tig * 2;
        *reinterpret_cast<uint32_t*>(dst + d) =
            pack_bf16x2(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
      }
    } else {
      const int64_t pi = static_cast<int64_t>(split) * a.n_tokens * a.n_head + row;
      float* dst = part_o + pi * kD;
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        const int d = nt * 8 + tig * 2;
        *reinterpret_cast<float2*>(dst + d) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
      }
      if (tig == 0) {
        part_ml[2 * pi] = m_run[r];
        part_ml[2 * pi + 1] = l;
      }
    }
  }
}

// One block per (token, head) row: out = sum_z o_z 2^(m_z - M) / sum_z l_z 2^(m_z - M).
__global__ void attn_paged_combine_kernel(int64_t n_rows, int n_splits, int head_dim,
                                          int64_t n_head, int64_t out_stride,
                                          const float* __restrict__ part_o,
                                          const float* __restrict__ part_ml,
                                          uint16_t* __restrict__ out) {
  const int64_t row = blockIdx.x;
  if (row >= n_rows) return;
  float mx = -INFINITY;
  for (int z = 0; z < n_splits; ++z) mx = fmaxf(mx, part_ml[2 * (z * n_rows + row)]);
  float l = 0.0f;
  for (int z = 0; z < n_splits; ++z) {
    const float m = part_ml[2 * (z * n_rows + row)];
    if (m != -INFINITY) l += part_ml[2 * (z * n_rows + row) + 1] * exp2f(m - mx);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  const int64_t t = row / n_head, h = row % n_head;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int z = 0; z < n_splits; ++z) {
      const float m = part_ml[2 * (z * n_rows + row)];
      if (m != -INFINITY) acc += part_o[(z * n_rows + row) * head_dim + d] * exp2f(m - mx);
    }
    out[t * out_stride + h * head_dim + d] = f32_to_bf16_bits(acc * inv);
  }
}

template <int kD, int kTile, int kStages, int kRows = 64>
cudaError_t launch_d(const PagedAttnArgs& a, const float* q, const uint16_t* k, const uint16_t* v,
                     uint16_t* out, float* part_o, float* part_ml, cudaStream_t stream) {
  using C = PgCfg<kD, kTile, kStages, kRows>;
  constexpr size_t smem = C::kSmemBytes;
  cudaError_t err =
      cudaFuncSetAttribute(attn_paged_kernel<kD, kTile, kStages, kRows>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(a.n_work),
                  static_cast<unsigned>(a.n_splits));
  attn_paged_kernel<kD, kTile, kStages, kRows>
      <<<grid, C::kThreads, smem, stream>>>(a, q, k, v, out, part_o, part_ml);
  return cudaGetLastError();
}

// The tile and pipeline of head dims 64 and 128 (set_attn_paged_config): 0: 64 positions, 2
// stages; 1: 32, 3; 2: 32, 4. Head dim 256: 32 positions, 2 stages.
int g_config = 0;

template <int kD>
cudaError_t launch_cfg(const PagedAttnArgs& a, const float* q, const uint16_t* k, const uint16_t* v,
                       uint16_t* out, float* part_o, float* part_ml, cudaStream_t stream) {
  if (a.rows == 128) {
    if (g_config != 0) return cudaErrorInvalidValue;
    return launch_d<kD, 64, 2, 128>(a, q, k, v, out, part_o, part_ml, stream);
  }
  if (g_config == 1) return launch_d<kD, 32, 3>(a, q, k, v, out, part_o, part_ml, stream);
  if (g_config == 2) return launch_d<kD, 32, 4>(a, q, k, v, out, part_o, part_ml, stream);
  return launch_d<kD, 64, 2>(a, q, k, v, out, part_o, part_ml, stream);
}

}  // namespace

int attn_paged_tile(int64_t head_dim) { return head_dim > 128 || g_config != 0 ? 32 : 64; }
void set_attn_paged_config(int c) { g_config = c >= 0 && c <= 2 ? c : 0; }
bool attn_paged_rows_supported(int64_t head_dim, int rows) {
  return rows == 64 || (rows == 128 && g_config == 0 && (head_dim == 64 || head_dim == 128));
}

cudaError_t launch_attn_paged(const PagedAttnArgs& a, const float* q, const uint16_t* k,
                              const uint16_t* v, uint16_t* out, float* part_o, float* part_ml,
                              cudaStream_t stream) {
  if (a.n_work <= 0 || a.n_tokens <= 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  if (a.head_dim == 64) err = launch_cfg<64>(a, q, k, v, out, part_o, part_ml, stream);
  if (a.head_dim == 128) err = launch_cfg<128>(a, q, k, v, out, part_o, part_ml, stream);
  if (a.head_dim == 256 && a.rows == 64) {
    err = launch_d<256, 32, 2>(a, q, k, v, out, part_o, part_ml, stream);
  }
  if (err != cudaSuccess || a.n_splits == 1) return err;
  const int64_t n_rows = a.n_tokens * a.n_head;
  attn_paged_combine_kernel<<<static_cast<unsigned>(n_rows), 64, 0, stream>>>(
      n_rows, a.n_splits, static_cast<int>(a.head_dim), a.n_head, a.out_stride, part_o, part_ml,
      out);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
