// Decode attention (one new token) over a long KV cache: flash-decoding.
//
// The cache [n_kv, n_head_kv, head_dim] (f32 or bf16, rows kv_row_stride elements apart) is cut
// into n_splits chunks of positions; block (split, kv head) streams its chunk once with 16-byte
// loads and serves every query head of the GQA group (up to kG heads per block), so each K/V byte
// is read from memory once. Inside a block, sub-groups of kTpr lanes own one KV row at a time
// (lane i holds elements [i * kEpt, (i + 1) * kEpt) of the row), keep an online softmax (running
// max m, sum l, unnormalized output acc) per query head, and are merged through shared memory at
// the end; a second kernel merges the splits: out = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s -
// M). Scores are in the log2 domain (q pre-scaled by scale * log2(e)); all arithmetic is f32.
//
// The splits cut only the positions a query sees: [n_kv - window, n_kv) with a sliding window,
// else [0, n_kv); a ring cache keeps position j in row j % ring_rows, a paged cache (the engine
// core's arena) in the row its block table gives (kv_row). The kernels derive the
// split boundaries themselves from n_kv, which may be read from device memory (n_kv_dev): the
// grid and workspace are sized for the upper bound a.n_kv, blocks past the real range exit at
// once and the merge skips them, so one captured launch serves every decode step of a graph.
//
// The fused decode step (launch_attn_decode_rope, kRope) takes the raw qkv row instead of q: every
// block rotates its group's q heads, the block that owns the new position also rotates k and
// writes k and v to the cache, the splits of a head group merge in clusters through distributed
// shared memory (and, past one cluster, the last cluster to finish each slice of the output
// merges the clusters from the workspace: an atomic counter per slice, reset by that cluster),
// and the output is written with its int16 blocks when the next matvec wants them: one kernel
// instead of RoPE + KV store, attention, merge and quantization (measured: docs/strategies/kernels.md, "Measured choices"). For a bf16 cache of
// head_dim 64 or 128 its split runs on the tensor cores (mma_attend below; the scalar split
// stays for head_dim 256 and behind RINFER_ATTN_MMA=0).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/mma.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr float kLog2e = 1.4426950408889634f;

template <bool kBf16, int kD>
struct DecCfg {
  static constexpr int kVec = kBf16 ? 8 : 4;                  // elements per 16-byte load
  static constexpr int kVecs = kD / kVec;                     // 16-byte pieces per row
  static constexpr int kTpr = kVecs < kWarp ? kVecs : kWarp;  // lanes per KV row
  static constexpr int kChunks = kVecs / kTpr;                // 16-byte loads per lane and row
  static constexpr int kEpt = kChunks * kVec;                 // elements per lane
  static constexpr int kRpw = kWarp / kTpr;                   // rows a warp holds at once
  static constexpr int kSubgroups = kWarps * kRpw;
  // Element e of a lane's share: load e / kVec is lane-interleaved so each load instruction of a
  // warp reads contiguous bytes.
  static __device__ __forceinline__ int elem(int li, int e) {
    return ((e / kVec) * kTpr + li) * kVec + e % kVec;
  }
};

// Fewest positions per split (below this the merge costs more than the split saves).
constexpr int kMinChunk = 32;
// Blocks of a cluster in the fused step (consecutive splits of one head group; 8: the portable
// cluster size).
constexpr int kCluster = 8;

// AttnArgs' sizes as 32-bit integers (checked by ops_cuda.cpp: check_decode_sizes): the kernels are
// latency-bound, and 64-bit divisions and products cost each thread hundreds of instructions.
// Measured with ncu (scripts/device/ncu_sass.sh) and in decode steps: docs/strategies/kernels.md, "Measured choices".
struct DecArgs {
  int n_kv;  // positions, or their upper bound when n_kv_dev is set
  int n_head, n_head_kv, ratio;
  int stride;  // kv_row_stride
  int window;  // > 0: sliding window
  int ring;    // > 0: rows of a ring cache
  float scale;
  const int32_t* n_kv_dev;
  const int32_t* table;  // a paged cache: the block of each position / block
  int block;
};

// The cache row of position j: j itself, j % ring in a ring cache, or its slot in a paged one.
__device__ __forceinline__ uint32_t kv_row(const DecArgs& a, uint32_t j) {
  if (a.table != nullptr) {
    const auto b = static_cast<uint32_t>(a.block);
    return static_cast<uint32_t>(__ldg(a.table + j / b)) * b + j % b;
  }
  return a.ring > 0 ? j % static_cast<uint32_t>(a.ring) : j;
}

// The positions of one decode step and their cut into splits, derived on the device from n_kv
// (read from n_kv_dev when set, clamped to [1, n_kv]) and the grid's split count.
struct DecRange {
  int lo, end, chunk;
  int n_active;
};
// fused (the fused step, whose clusters of kCluster blocks merge through shared memory): up to
// kCluster * kFusedChunk positions stay in one cluster (two steps of rows a block rather than a
// second cluster, whose merge goes through the workspace; measured: docs/strategies/kernels.md, "Measured choices").
constexpr int kFusedChunk = 64;
__device__ __forceinline__ DecRange dec_range(const DecArgs& a, int n_splits, bool fused = false) {
  int n_kv = a.n_kv;
  if (a.n_kv_dev != nullptr) n_kv = max(1, min(*a.n_kv_dev, a.n_kv));
  DecRange r;
  r.lo = a.window > 0 ? max(0, n_kv - a.window) : 0;
  r.end = n_kv;
  const auto len = static_cast<unsigned>(n_kv - r.lo);
  const auto ns = static_cast<unsigned>(n_splits);
  r.chunk = max(kMinChunk, static_cast<int>((len + ns - 1) / ns));
  if (fused)
    r.chunk = max(r.chunk, min(kFusedChunk, static_cast<int>((len + kCluster - 1) / kCluster)));
  r.n_active = static_cast<int>((len + r.chunk - 1) / static_cast<unsigned>(r.chunk));
  return r;
}

// The fused step of head_dim 128 with up to 4 query heads a block (Llama-3-8B) takes six KV rows
// a sub-group and step instead of four: 48 rows a step, so that the chunks of up to 384
// positions (one cluster of 8 blocks) take one step, not two whose second waits on the first's
// math. It needs 241 registers (2 blocks an SM rather than 3; the grid follows). Not for
// head_dim 64, whose 16 sub-groups already take 64 rows a step (measured: docs/strategies/kernels.md, "Measured choices").
__host__ __device__ constexpr bool six_row_step(int kD, int kG, bool kRope) {
  return kRope && kD == 128 && kG <= 4;
}

// KV rows per sub-group per step, all loaded before the first use (more rows: more bytes in
// flight; the wide GQA groups keep fewer for registers).
template <int kG, int kD = 0, bool kRope = false>
__host__ __device__ constexpr int rows_in_flight() {
  return six_row_step(kD, kG, kRope) ? 6 : (kG <= 4 ? 4 : 2);
}

// Blocks per SM the register budget must allow: the splits aim at 4 per SM (at most 128
// registers a thread), which holds when a thread's q and accumulators (2 kG kEpt floats) fit in
// 64 registers with one 16-byte load per row; wider groups run fewer blocks without spilling.
// The fused RoPE step keeps the first K/V rows in registers across its prologue: 3 blocks (2
// with six rows a step).
template <int kG, int kEpt, int kChunks, bool kRope = false, int kD = 0>
__host__ __device__ constexpr int min_blocks() {
  if (six_row_step(kD, kG, kRope)) return 2;
  return kG * kEpt <= 32 && kChunks == 1 ? (kRope ? 3 : 4) : 1;
}

// Loads a lane's kEpt elements of one row; `elem` is the row's first element + li * kVec.
template <bool kBf16, int kD>
__device__ __forceinline__ void load_row(const void* base, uint32_t elem,
                                         float (&out)[DecCfg<kBf16, kD>::kEpt]) {
  using C = DecCfg<kBf16, kD>;
  const auto* b = static_cast<const uint8_t*>(base);
#pragma unroll
  for (int c = 0; c < C::kChunks; ++c) {
    const uint4 v =
        ld_stream16(b + static_cast<size_t>(elem + c * C::kTpr * C::kVec) * (kBf16 ? 2 : 4));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    if constexpr (kBf16) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[c * 8 + 2 * i] = bf16_lo(w[i]);
        out[c * 8 + 2 * i + 1] = bf16_hi(w[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) out[c * 4 + i] = __uint_as_float(w[i]);
    }
  }
}

// One step's K and V rows of a sub-group: positions base + t * SG + sg (t < R); rows past j_end
// read position j_begin's row and are marked invalid.
template <bool kBf16, int kD, int R, int SG, bool kZeroInvalid>
__device__ __forceinline__ void load_kv_step(const DecArgs& a, const void* k, const void* v,
                                             int base, int j_begin, int j_end, int sg,
                                             uint32_t head_off,
                                             float (&kr)[R][DecCfg<kBf16, kD>::kEpt],
                                             float (&vr)[R][DecCfg<kBf16, kD>::kEpt],
                                             bool (&valid)[R]) {
#pragma unroll
  for (int t = 0; t < R; ++t) {
    const int j = base + t * SG + sg;
    valid[t] = j < j_end;
    const uint32_t row = kv_row(a, static_cast<uint32_t>(valid[t] ? j : j_begin));
    const uint32_t off = row * static_cast<uint32_t>(a.stride) + head_off;
    load_row<kBf16, kD>(k, off, kr[t]);
    load_row<kBf16, kD>(v, off, vr[t]);
  }
  // An invalid row's values are never used, but its V enters acc += 0 * v: kZeroInvalid zeroes
  // it when the row it read may not hold finite numbers yet (the fused step loads the new row
  // before storing it; elsewhere j_begin's row is a stored position).
  if constexpr (kZeroInvalid) {
#pragma unroll
    for (int t = 0; t < R; ++t) {
#pragma unroll
      for (int e = 0; e < DecCfg<kBf16, kD>::kEpt; ++e) vr[t][e] = valid[t] ? vr[t][e] : 0.0f;
    }
  }
}

// Requests into L2 the K and V rows [from, to) of kv head hk (their kD elements, 128-byte lines),
// a line per thread and pass: the rows of a block's later steps, whose loads otherwise wait for
// the earlier steps' math and go to memory one round trip at a time: a small gain at long
// contexts, none at short ones, as the kernel is bound by its instructions there (measured:
// docs/strategies/kernels.md, "Measured choices").
template <bool kBf16, int kD>
__device__ __forceinline__ void prefetch_kv_rows(const DecArgs& a, const void* k, const void* v,
                                                 int from, int to, int hk) {
  constexpr int kLines = kD * (kBf16 ? 2 : 4) / 128;  // lines of a row's head slice
  const int n = (to - from) * kLines * 2;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int line = i % kLines, kv = (i / kLines) % 2;
    const uint32_t row = kv_row(a, static_cast<uint32_t>(from + i / (2 * kLines)));
    const size_t elem =
        static_cast<size_t>(row) * static_cast<uint32_t>(a.stride) + static_cast<uint32_t>(hk * kD);
    const auto* base = static_cast<const uint8_t*>(kv == 0 ? k : v);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + elem * (kBf16 ? 2 : 4) + line * 128));
  }
}

constexpr int kMaxSplits = 256;

// kRope (the fused decode step, bf16 cache only): the group's q heads, and in the block that owns
// the new position its k and v heads, are read raw from the qkv row into shared memory, rotated
// there (cos/sin per pair computed once per block, in double like rope.cu), k and v are written
// to the cache, and this block's row of the new position is taken from shared memory (the bf16
// values just stored) rather than reloaded. Its ring row cannot be one another split reads: a
// ring holds at least window rows.
// The inverse frequencies come from the host (AttnRopeArgs::inv_freq, the expression rope.cu
// evaluates on the device), which leaves one double sincos per pair on the block's path.
__device__ __forceinline__ void rope_pairs_smem(float* s_cs2, int64_t pos, const AttnRopeArgs& r) {
  const int half = static_cast<int>(r.n_rot / 2);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const double theta = static_cast<double>(pos) * r.freq_scale * r.inv_freq[j];
    double sd, cd;
    sincos(theta, &sd, &cd);
    s_cs2[2 * j] = static_cast<float>(cd);
    s_cs2[2 * j + 1] = static_cast<float>(sd);
  }
}

// Adds one partial result (ml = its max and sum; p = its unnormalized output) to a running
// merge (mx, l, o), rescaling by powers of two of the max difference; partials without positions
// (max -inf) add nothing.
__device__ __forceinline__ void merge_partial(float2 ml, float4 p, float& mx, float& l, float4& o) {
  if (ml.x == -INFINITY) return;
  const float mn = fmaxf(mx, ml.x);
  const float c = exp2f(mx - mn);  // mx = -inf at first: 0
  const float w = exp2f(ml.x - mn);
  mx = mn;
  l = fmaf(l, c, ml.y * w);
  o = make_float4(fmaf(o.x, c, p.x * w), fmaf(o.y, c, p.y * w), fmaf(o.z, c, p.z * w),
                  fmaf(o.w, c, p.w * w));
}

// Output elements d..d+3 of head h merged over n partial results in the workspace (ws_o:
// unnormalized, ws_ml: max and sum), the loads of eight issued together: a few partials cost one
// L2 round trip.
template <int kD>
__device__ __forceinline__ float4 merge_splits(const float* ws_o, const float* ws_ml, int n,
                                               int n_head, int h, int d) {
  constexpr int kBatch = 8;
  float mx = -INFINITY, l = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = 0; s0 < n; s0 += kBatch) {
    float2 ml[kBatch];
    float4 p[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int sp = min(s0 + k, n - 1);  // past the end: read again, skipped below
      ml[k] = __ldcg(reinterpret_cast<const float2*>(ws_ml) + sp * n_head + h);
      p[k] = __ldcg(reinterpret_cast<const float4*>(ws_o + (sp * n_head + h) * kD + d));
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (s0 + k < n) merge_partial(ml[k], p[k], mx, l, o);
    }
  }
  const float inv = 1.0f / l;
  return make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
}

// ---- The tensor-core split (kMma: the fused step, bf16 cache, head_dim 64 / 128) ----
//
// The scalar split above spends about 200 warp instructions on each KV row (bf16 unpacking,
// FMAs, shuffle trees, one exp2 per head and row): at long contexts the fused step was bound by
// those instructions whatever came from memory (docs/strategies/kernels.md, "Measured choices"). Here each warp takes
// 16 rows of a 64-row tile that cp.async brings into shared memory (double-buffered; the first
// tile before the PDL wait), and the scores S = Q K^T and the output O += P V are mma.sync tiles
// (m16n8k16, bf16, f32 accumulation), A operand rows = query heads. The group's kG <= 8 heads
// fill rows 0-7 of the A operand and rows 8-15 carry the remainder of each head's bf16 rounding
// (q = hi + lo, both bf16; likewise p), so the rows that would be padding make the products
// exact to about 2^-16 relative instead of bf16's 2^-9; a head's score is the sum of its two
// accumulator rows, which one lane holds (c0 + c2, c1 + c3).
template <int kD>
struct MmaCfg {
  static constexpr int kRows = 64;               // KV rows a tile: 16 a warp
  static constexpr int kStride = kD + 8;         // bf16 a shared-memory row (ldmatrix banks)
  static constexpr int kTile = kRows * kStride;  // elements of one K or V tile
  static constexpr size_t kSmem = 2 * 2 * kTile * sizeof(uint16_t);  // K and V, two buffers
};

// Rows [row0, row0 + 64) of kv head hk into buffer buf (rows at or past j_end zero-filled); one
// commit group.
template <int kD>
__device__ __forceinline__ void mma_load_tile(const DecArgs& a, const void* k, const void* v,
                                              int hk, int row0, int j_end, uint16_t* kv_smem,
                                              int buf) {
  using M = MmaCfg<kD>;
  constexpr int kPieces = kD / 8;  // 16-byte pieces a row
  uint16_t* sk = kv_smem + buf * 2 * M::kTile;
  uint16_t* sv = sk + M::kTile;
  for (int i = threadIdx.x; i < M::kRows * kPieces; i += kThreads) {
    const int r = i / kPieces, c = i % kPieces;
    const bool ok = row0 + r < j_end;
    const uint32_t row = kv_row(a, static_cast<uint32_t>(ok ? row0 + r : row0));
    const size_t src = static_cast<size_t>(row) * static_cast<uint32_t>(a.stride) +
                       static_cast<uint32_t>(hk * kD + c * 8);
    const int dst = r * M::kStride + c * 8;
    cp_async16(smem_u32(sk + dst), static_cast<const uint16_t*>(k) + src, ok);
    cp_async16(smem_u32(sv + dst), static_cast<const uint16_t*>(v) + src, ok);
  }
  cp_async_commit();
}

// x (f32) as a bf16 pair hi (the rounding) and lo (the rounding of the rest), two elements a
// register: x0 + x1 = hi + lo to about 2^-16 relative.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(x0, x1);
  lo = pack_bf16x2(x0 - bf16_lo(hi), x1 - bf16_hi(hi));
}

// The block's rows [j_begin, j_end) against its ng query heads (rotated, in s_q; scaled by qs):
// each warp's running max, sum and unnormalized output per head into s_m[warp], s_l[warp],
// s_acc[warp] (heads < ng). Tile 0 was requested before the call (mma_load_tile, buffer 0).
// owner: the new position pos is this block's last row, its K/V (bf16 values) in s_new, which
// replace the tile's copy (the cache row may not hold them yet when the tile was loaded).
template <int kD, int kG>
__device__ __forceinline__ void mma_attend(const DecArgs& a, const void* k, const void* v, int hk,
                                           int j_begin, int j_end, bool owner, int pos, float qs,
                                           int ng, const float (*s_q)[kD], const float (*s_new)[kD],
                                           uint16_t* kv_smem, float (&s_m)[kWarps][kG],
                                           float (&s_l)[kWarps][kG],
                                           float (&s_acc)[kWarps][kG][kD]) {
  static_assert(kG <= 8, "the heads fill the A operand's rows 0-7");
  using M = MmaCfg<kD>;
  constexpr int S = M::kStride;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, tig = lane % 4, mi = lane / 8;
  const bool head = gid < ng;  // this lane's accumulator rows belong to head gid

  // Q as A fragments: row gid = hi, row gid + 8 = lo, for each 16-element k-step.
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    const int d0 = ks * 16 + tig * 2;
    const int g = head ? gid : 0;
    const float x0 = head ? s_q[g][d0] * qs : 0.0f, x1 = head ? s_q[g][d0 + 1] * qs : 0.0f;
    const float x2 = head ? s_q[g][d0 + 8] * qs : 0.0f, x3 = head ? s_q[g][d0 + 9] * qs : 0.0f;
    split_bf16x2(x0, x1, qf[ks][0], qf[ks][1]);
    split_bf16x2(x2, x3, qf[ks][2], qf[ks][3]);
  }

  float o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  const int n_tiles = (j_end - j_begin + M::kRows - 1) / M::kRows;  // the same in every thread
  for (int t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    const int row0 = j_begin + t * M::kRows;
    if (t + 1 < n_tiles) {
      mma_load_tile<kD>(a, k, v, hk, row0 + M::kRows, j_end, kv_smem, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    uint16_t* sk = kv_smem + buf * 2 * M::kTile;
    uint16_t* sv = sk + M::kTile;
    if (owner && t == n_tiles - 1) {
      const int rr = pos - row0;
      for (int d = threadIdx.x; d < kD; d += kThreads) {
        sk[rr * S + d] = f32_to_bf16_bits(s_new[0][d]);
        sv[rr * S + d] = f32_to_bf16_bits(s_new[1][d]);
      }
      __syncthreads();
    }

    // S = Q K^T for this warp's 16 rows: two 8-row n-tiles.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const int key_b = warp * 16 + (lane % 8) + (mi / 2) * 8;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t b[4];
      ldmatrix_x4(b, smem_u32(sk + key_b * S + ks * 16 + (mi % 2) * 8));
      mma_bf16(s[0], qf[ks], b[0], b[1]);
      mma_bf16(s[1], qf[ks], b[2], b[3]);
    }
    // Head gid's scores (hi row + lo row) of rows tig * 2 + j and 8 + tig * 2 + j; past j_end
    // -inf.
    float sc[2][2];
    float mx = m_run;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = row0 + warp * 16 + nt * 8 + tig * 2 + j;
        sc[nt][j] = key < j_end ? s[nt][j] + s[nt][2 + j] : -INFINITY;
        mx = fmaxf(mx, sc[nt][j]);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == -INFINITY ? 0.0f : mx;
    const float corr = exp2f(m_run - base);  // m_run = -inf at first: 0
    m_run = mx;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        sc[nt][j] = exp2f(sc[nt][j] - base);  // -inf: 0
        sum += sc[nt][j];
      }
    }
    l_run = l_run * corr + sum;  // this lane's share; the quad is added at the end
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) {
      o[i][0] *= corr;
      o[i][1] *= corr;
      o[i][2] *= corr;
      o[i][3] *= corr;
    }
    // O += P V: P as the A fragment (rows gid = hi, gid + 8 = lo; k = the warp's 16 rows), V
    // through ldmatrix.trans.
    uint32_t pa[4];
    split_bf16x2(sc[0][0], sc[0][1], pa[0], pa[1]);
    split_bf16x2(sc[1][0], sc[1][1], pa[2], pa[3]);
    const int key_v = warp * 16 + (lane % 8) + (mi % 2) * 8;
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, smem_u32(sv + key_v * S + dp * 16 + (mi / 2) * 8));
      mma_bf16(o[2 * dp], pa, b[0], b[1]);
      mma_bf16(o[2 * dp + 1], pa, b[2], b[3]);
    }
    __syncthreads();  // the next iteration refills the other buffer, the one after this one
  }

  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (head) {
    if (tig == 0) {
      s_m[warp][gid] = m_run;
      s_l[warp][gid] = l_run;
    }
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      *reinterpret_cast<float2*>(&s_acc[warp][gid][nt * 8 + tig * 2]) =
          make_float2(o[nt][0] + o[nt][2], o[nt][1] + o[nt][3]);
    }
  }
}

// grid: (n_splits, n_head_kv * n_groups); a group is up to kG query heads of one kv head.
// kMma: the tensor-core split (mma_attend; the fused step only), 2 blocks an SM for its 81 KB of
// shared memory (head_dim 128).
template <bool kBf16, int kD, int kG, bool kRope, bool kMma = false>
__global__ void __launch_bounds__(
    kThreads,
    (kMma ? 2 : min_blocks<kG, DecCfg<kBf16, kD>::kEpt, DecCfg<kBf16, kD>::kChunks, kRope, kD>()))
    attn_decode_kernel(DecArgs a, const float* __restrict__ q, const void* __restrict__ k,
                       const void* __restrict__ v, float* out, float* ws_o, float* ws_ml,
                       int n_groups, AttnRopeArgs r) {
  using C = DecCfg<kBf16, kD>;
  constexpr int E = C::kEpt;
  constexpr int SG = C::kSubgroups;
  constexpr int kRowsInFlight = rows_in_flight<kG, kD, kRope>();
  constexpr int kQ = kRope ? kG : 1;  // shared arrays the fused step alone uses
  constexpr int kQD = kRope ? kD : 1;
  static_assert(!kMma || (kRope && kBf16), "the tensor-core split serves the fused bf16 step");
  constexpr int NP = kMma ? kWarps : SG;  // the block's partial results: warps or sub-groups
  extern __shared__ __align__(16) uint16_t kv_smem[];  // kMma: K/V tiles (MmaCfg)
  __shared__ float s_m[NP][kG];
  __shared__ float s_l[NP][kG];
  __shared__ __align__(16) float s_acc[NP][kG][kD];
  __shared__ __align__(16) float s_q[kQ][kQD];  // kRope: the rotated q heads, then the partial
  __shared__ float s_new[2][kQD];               // kRope: the new k and v (bf16 values)
  __shared__ float s_cs[kQD];                   // kRope: cos, sin of each pair
  __shared__ int s_last;
  static_assert(NP >= 2, "the merge keeps each head's max in s_l[1]");

  // kRope: everything up to the raw qkv loads reads only what the host and earlier decode steps
  // wrote (n_kv, the cached K/V rows of older positions) or nothing (the angles), so it runs
  // before the PDL wait, overlapping the QKV matvec's tail where the SM has room (about neutral
  // on the Llama-3-8B shape, whose matvec blocks fill the SMs to the end); the other path waits
  // first.
  if constexpr (kRope) {
    pdl_trigger();
  } else {
    pdl_trigger_then_wait();
  }
  const int hk = static_cast<int>(blockIdx.y) / n_groups;
  const int h0 = hk * a.ratio + (static_cast<int>(blockIdx.y) % n_groups) * kG;
  const int left = hk * a.ratio + a.ratio - h0;  // query heads of this kv head from h0 on
  const int ng = left < kG ? left : kG;
  // kRope: the raw q heads of the group and the k and v heads (loaded after the wait).
  constexpr int kRaw = kRope ? ((kG + 2) * kD + kThreads - 1) / kThreads : 1;
  float raw[kRaw];
  const DecRange range = dec_range(a, static_cast<int>(gridDim.x), kRope);
  const int split = blockIdx.x;
  // Past the real positions: the merge skips the split. kRope: a block of a cluster that holds
  // positions stays (with none of its own) for the cluster's barriers; whole clusters past them
  // leave.
  if (kRope ? split / kCluster * kCluster >= range.n_active : split >= range.n_active) return;
  const bool has_rows = split < range.n_active;

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int sg = warp * C::kRpw + lane / C::kTpr;
  const int li = lane % C::kTpr;  // position in the row
  const int j_begin = range.lo + split * range.chunk;
  const int j_end = has_rows ? min(range.end, j_begin + range.chunk) : j_begin;
  const int pos = range.end - 1;  // the new token (kRope)
  const bool owner = kRope && split == range.n_active - 1;

  // kRope: the first step's K/V rows are requested before the RoPE work (independent of it).
  const auto head_off = static_cast<uint32_t>(hk * kD + li * C::kVec);
  float kr[kRowsInFlight][E], vr[kRowsInFlight][E];
  bool valid[kRowsInFlight];
  if constexpr (kMma) {
    if (has_rows) mma_load_tile<kD>(a, k, v, hk, j_begin, j_end, kv_smem, 0);
  } else if constexpr (kRope) {
    if (has_rows) {
      load_kv_step<kBf16, kD, kRowsInFlight, SG, kRope>(a, k, v, j_begin, j_begin, j_end, sg,
                                                        head_off, kr, vr, valid);
      // The later steps' rows (the new position's row is rewritten by its owner below, which
      // takes it from shared memory, not from these loads).
      prefetch_kv_rows<kBf16, kD>(a, k, v, j_begin + SG * kRowsInFlight, j_end, hk);
    }
  }

  float qr[kG][E];
  const float qs = a.scale * kLog2e;
  if constexpr (kRope) {
    rope_pairs_smem(s_cs, pos, r);
    pdl_wait();
#pragma unroll
    for (int u = 0; u < kRaw; ++u) {
      const int idx = threadIdx.x + u * kThreads;
      const int g = idx / kD, d = idx % kD;
      if (g < ng + 2) {
        const int src = g < ng ? h0 + g : a.n_head + (g - ng) * a.n_head_kv + hk;
        raw[u] = q[src * kD + d];
      }
    }
#pragma unroll
    for (int u = 0; u < kRaw; ++u) {
      const int idx = threadIdx.x + u * kThreads;
      const int g = idx / kD, d = idx % kD;
      if (g < ng) {
        s_q[g][d] = raw[u];
      } else if (g < ng + 2) {
        s_new[g - ng][d] = raw[u];
      }
    }
    __syncthreads();
    const int half = static_cast<int>(r.n_rot / 2);
    const int nr = ng + (owner ? 1 : 0);  // heads to rotate
    for (int idx = threadIdx.x; idx < nr * half; idx += kThreads) {
      const int g = idx / half, j = idx % half;
      float* xh = g < ng ? s_q[g] : s_new[0];
      const int i0 = r.neox ? j : 2 * j, i1 = r.neox ? j + half : 2 * j + 1;
      const float c = s_cs[2 * j], sn = s_cs[2 * j + 1];
      const float x0 = xh[i0], x1 = xh[i1];
      xh[i0] = x0 * c - x1 * sn;
      xh[i1] = x0 * sn + x1 * c;
    }
    __syncthreads();
    if (owner) {
      const uint32_t row = kv_row(a, static_cast<uint32_t>(pos));
      const size_t off = row * static_cast<uint32_t>(a.stride) + static_cast<uint32_t>(hk * kD);
      for (int d = threadIdx.x; d < kD; d += kThreads) {
        if constexpr (kBf16) {
          const uint16_t kb = f32_to_bf16_bits(s_new[0][d]), vb = f32_to_bf16_bits(s_new[1][d]);
          static_cast<uint16_t*>(const_cast<void*>(k))[off + d] = kb;
          static_cast<uint16_t*>(const_cast<void*>(v))[off + d] = vb;
          s_new[0][d] = __uint_as_float(static_cast<uint32_t>(kb) << 16);
          s_new[1][d] = __uint_as_float(static_cast<uint32_t>(vb) << 16);
        } else {  // an f32 cache keeps the values as they are
          static_cast<float*>(const_cast<void*>(k))[off + d] = s_new[0][d];
          static_cast<float*>(const_cast<void*>(v))[off + d] = s_new[1][d];
        }
      }
      __syncthreads();
    }
    if constexpr (!kMma) {
#pragma unroll
      for (int g = 0; g < kG; ++g) {
#pragma unroll
        for (int e = 0; e < E; ++e) qr[g][e] = g < ng ? s_q[g][C::elem(li, e)] * qs : 0.0f;
      }
    }
  } else {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        qr[g][e] = g < ng ? q[(h0 + g) * kD + C::elem(li, e)] * qs : 0.0f;
      }
    }
  }
  if constexpr (kMma) {
    mma_attend<kD, kG>(a, k, v, hk, j_begin, j_end, owner, pos, qs, ng, s_q, s_new, kv_smem, s_m,
                       s_l, s_acc);
  } else {
    float m[kG], l[kG], acc[kG][E];
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
    }

    // The trip count is the same for every thread (the shuffles below need whole warps).
    for (int base = j_begin; base < j_end; base += SG * kRowsInFlight) {
      if (!kRope || base != j_begin) {
        load_kv_step<kBf16, kD, kRowsInFlight, SG, kRope>(a, k, v, base, j_begin, j_end, sg,
                                                          head_off, kr, vr, valid);
      }
      if constexpr (kRope) {
#pragma unroll
        for (int t = 0; t < kRowsInFlight; ++t) {
          if (owner && base + t * SG + sg == pos) {  // the row this block just stored
#pragma unroll
            for (int e = 0; e < E; ++e) {
              kr[t][e] = s_new[0][C::elem(li, e)];
              vr[t][e] = s_new[1][C::elem(li, e)];
            }
          }
        }
      }
      float s[kRowsInFlight][kG];
#pragma unroll
      for (int t = 0; t < kRowsInFlight; ++t) {
#pragma unroll
        for (int g = 0; g < kG; ++g) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e) d = fmaf(qr[g][e], kr[t][e], d);
#pragma unroll
          for (int o = C::kTpr / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          s[t][g] = valid[t] ? d : -INFINITY;
        }
      }
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        float mx = m[g];
#pragma unroll
        for (int t = 0; t < kRowsInFlight; ++t) mx = fmaxf(mx, s[t][g]);
        // No branch (the heads' chains interleave): a sub-group without a valid row yet keeps
        // m = -inf, and every weight below is 2^-inf = 0.
        const float ms = mx == -INFINITY ? 0.0f : mx;
        const float corr = exp2f(m[g] - ms);  // m = -inf at first: 0
        m[g] = mx;
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= corr;
#pragma unroll
        for (int t = 0; t < kRowsInFlight; ++t) {
          const float p = exp2f(s[t][g] - ms);  // invalid rows: 0
          l[g] += p;
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] = fmaf(p, vr[t][e], acc[g][e]);
        }
      }
    }

    // Merge the sub-groups of this block.
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (li == 0) {
        s_m[sg][g] = m[g];
        s_l[sg][g] = l[g];
      }
#pragma unroll
      for (int e = 0; e < E; e += 4) {  // a lane's elements come in runs of kVec (4 or 8)
        *reinterpret_cast<float4*>(&s_acc[sg][g][C::elem(li, e)]) =
            make_float4(acc[g][e], acc[g][e + 1], acc[g][e + 2], acc[g][e + 3]);
      }
    }
  }
  __syncthreads();
  // Per head, once: the sub-groups' weights 2^(m_i - M) (into s_m) and the total l (s_l[0]).
  if (threadIdx.x < ng) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < NP; ++i) mx = fmaxf(mx, s_m[i][g]);
    float lsum = 0.0f;
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      const float w = s_m[i][g] == -INFINITY ? 0.0f : exp2f(s_m[i][g] - mx);
      lsum = fmaf(s_l[i][g], w, lsum);
      s_m[i][g] = w;
    }
    s_l[0][g] = lsum;
    s_l[1][g] = mx;
  }
  __syncthreads();
  // Four elements a thread.
  for (int idx = threadIdx.x; idx < ng * kD / 4; idx += kThreads) {
    const int g = idx * 4 / kD, d = idx * 4 % kD;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      const float4 p = *reinterpret_cast<const float4*>(&s_acc[i][g][d]);
      const float w = s_m[i][g];
      o = make_float4(fmaf(p.x, w, o.x), fmaf(p.y, w, o.y), fmaf(p.z, w, o.z), fmaf(p.w, w, o.w));
    }
    const float lsum = s_l[0][g], mx = s_l[1][g];
    const int h = h0 + g;
    if constexpr (kRope) {
      // Unnormalized: the cluster merges (o, s_l[0] = l, s_l[1] = max).
      *reinterpret_cast<float4*>(&s_q[g][d]) = o;
    } else {  // scalar stores: the caller's buffers need only 4-byte alignment
      const float ov[4] = {o.x, o.y, o.z, o.w};
      for (int j = 0; j < 4; ++j) {
        if (range.n_active == 1) {
          out[h * kD + d + j] = ov[j] / lsum;
        } else {
          ws_o[(split * a.n_head + h) * kD + d + j] = ov[j];
        }
      }
      if (range.n_active > 1 && d == 0) {
        ws_ml[(split * a.n_head + h) * 2] = mx;
        ws_ml[(split * a.n_head + h) * 2 + 1] = lsum;
      }
    }
  }
  if constexpr (kRope) {
    // The cluster's blocks (kCluster consecutive splits) merge through distributed shared memory:
    // rank r takes a slice of the group's output (whole 32-element blocks), reads every block's
    // partial for it and writes it, normalized, with its int16 blocks. With more than one
    // cluster of positions, the cluster's merged slices (unnormalized) go to the workspace and
    // the last cluster to finish a slice merges them (threadfence reduction, one counter a
    // slice; its cost: docs/strategies/kernels.md, "Measured choices").
    namespace cg = cooperative_groups;
    const cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every block's partial is in its shared memory
    const int rank = static_cast<int>(cl.block_rank());
    const int cluster = split / kCluster;
    const int n_clusters = (range.n_active + kCluster - 1) / kCluster;
    const int n4 = ng * kD / 4;  // float4s of the group's output
    const int per = max(8, ((n4 + kCluster - 1) / kCluster + 7) / 8 * 8);
    const int s_begin = rank * per, s_end = min(n4, s_begin + per);
    constexpr int kSlice = ((kG * kD / 4 + kCluster - 1) / kCluster + 7) / 8 * 8;
    __shared__ float4 s_fin[kSlice > 8 ? kSlice : 8];
    // One pass over the slice: lanes of a warp take the same trip count (quantize4's shuffles).
    auto slice = [&](auto&& value) {
      for (int base = s_begin + warp * kWarp; base < s_end; base += kThreads) {
        const int idx = base + lane;
        const bool ok = idx < s_end;
        const int g = ok ? idx * 4 / kD : 0, d = ok ? idx * 4 % kD : 0;
        value(ok, g, d);
      }
    };
    auto emit = [&](bool ok, int g, int d, float4 o) {
      const int i = (h0 + g) * kD + d;
      if (ok) *reinterpret_cast<float4*>(out + i) = o;
      if (r.q16 != nullptr) quantize4(o, i, ok, r.q16, r.q16_scale, r.q16_sum16);
    };
    // Thread t reads output float4 s_begin + t / kCluster of rank t % kCluster (one DSMEM load
    // each), the eight lanes of an output merge by shuffles, and the result reaches the emitting
    // warps through shared memory (s_fin).
    for (int t0 = 0; t0 < per * kCluster; t0 += kThreads) {  // the same trip count for all
      const int t = t0 + static_cast<int>(threadIdx.x);
      const int j = t / kCluster, k = t % kCluster;
      const int idx = s_begin + j;
      const bool ok = idx < s_end;
      const int g = ok ? idx * 4 / kD : 0, d = ok ? idx * 4 % kD : 0;
      float2 ml = make_float2(-INFINITY, 0.0f);
      float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (ok) {
        const float* rl = cl.map_shared_rank(&s_l[0][0], k);
        ml = make_float2(rl[kG + g], rl[g]);  // s_l[1][g] = max, s_l[0][g] = l
        p = *reinterpret_cast<const float4*>(cl.map_shared_rank(&s_q[g][d], k));
      }
      float mx = ml.x;
#pragma unroll
      for (int o = 1; o < kCluster; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      // A cluster's rank 0 holds positions: mx is finite wherever ok.
      const float w = ml.x == -INFINITY ? 0.0f : exp2f(ml.x - mx);
      float l = ml.y * w;
      float4 o = make_float4(p.x * w, p.y * w, p.z * w, p.w * w);
#pragma unroll
      for (int off = 1; off < kCluster; off <<= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, off);
        o.x += __shfl_xor_sync(0xffffffffu, o.x, off);
        o.y += __shfl_xor_sync(0xffffffffu, o.y, off);
        o.z += __shfl_xor_sync(0xffffffffu, o.z, off);
        o.w += __shfl_xor_sync(0xffffffffu, o.w, off);
      }
      if (ok && k == 0) {
        if (n_clusters == 1) {
          const float inv = 1.0f / l;
          s_fin[j] = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
        } else {  // unnormalized, for the cross-cluster merge
          const int h = h0 + g;
          *reinterpret_cast<float4*>(ws_o + (cluster * a.n_head + h) * kD + d) = o;
          *reinterpret_cast<float2*>(ws_ml + (cluster * a.n_head + h) * 2) = make_float2(mx, l);
        }
      }
    }
    cl.barrier_arrive();  // done with the other blocks' shared memory
    if (n_clusters == 1) {
      __syncthreads();  // s_fin
      slice([&](bool ok, int g, int d) {
        emit(ok, g, d, ok ? s_fin[g * kD / 4 + d / 4 - s_begin] : make_float4(0, 0, 0, 0));
      });
    } else if (s_begin < s_end) {
      __threadfence();
      __syncthreads();
      unsigned* counter = &r.counters[blockIdx.y * kCluster + rank];
      if (threadIdx.x == 0)
        s_last = atomicAdd(counter, 1u) == static_cast<unsigned>(n_clusters - 1);
      __syncthreads();
      if (s_last) {
        __threadfence();
        slice([&](bool ok, int g, int d) {
          float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (ok) o = merge_splits<kD>(ws_o, ws_ml, n_clusters, a.n_head, h0 + g, d);
          emit(ok, g, d, o);
        });
        if (threadIdx.x == 0) *counter = 0;  // left zero for the next launch
      }
    }
    cl.barrier_wait();  // the others are done with this block's shared memory
  }
}

// Merges the splits: one block per head, head_dim x n_cg threads (n_cg = 1024 / head_dim, at
// most kCombineGroups). The per-split (m, l) pairs are read in parallel into shared memory;
// thread (g, d) sums output element d over splits g, g + n_cg, ... (a few independent loads each
// instead of a long chain), and the groups are added through shared memory. Only the splits
// that hold positions (dec_range) are read; with one, the decode kernel wrote out itself.
constexpr int kCombineGroups = 8;

__global__ void attn_combine_kernel(DecArgs a, int head_dim, const float* __restrict__ ws_o,
                                    const float* __restrict__ ws_ml, int n_splits, float* out) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_part[1024];
  __shared__ float scratch[32];
  pdl_begin();
  const int n_active = dec_range(a, n_splits).n_active;
  if (n_active <= 1) return;
  const int n_head = a.n_head;
  const int h = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int n_cg = static_cast<int>(blockDim.x) / head_dim;
  const int d = tid % head_dim, g = tid / head_dim;
  float mx = -INFINITY;
  for (int s = tid; s < n_active; s += blockDim.x) mx = fmaxf(mx, ws_ml[(s * n_head + h) * 2]);
  mx = block_max(mx, scratch);
  float lsum = 0.0f;
  for (int s = tid; s < n_active; s += blockDim.x) {
    const float ms = ws_ml[(s * n_head + h) * 2];
    const float w = ms == -INFINITY ? 0.0f : exp2f(ms - mx);
    s_w[s] = w;
    lsum = fmaf(ws_ml[(s * n_head + h) * 2 + 1], w, lsum);
  }
  lsum = block_sum(lsum, scratch);  // its barriers also publish s_w
  float o = 0.0f;
#pragma unroll 4
  for (int s = g; s < n_active; s += n_cg) {
    o = fmaf(ws_o[(s * n_head + h) * head_dim + d], s_w[s], o);
  }
  s_part[g * head_dim + d] = o;
  __syncthreads();
  if (g == 0) {
    for (int i = 1; i < n_cg; ++i) o += s_part[i * head_dim + d];
    out[h * head_dim + d] = o / lsum;
  }
}

int group_heads(const AttnArgs& a) {
  const int64_t ratio = a.n_head / a.n_head_kv;
  return ratio == 1 ? 1 : (ratio <= 4 ? 4 : 8);
}

// Launch arguments shared by both decode paths.
struct DecLaunch {
  const float* q;
  const void* k;
  const void* v;
  float* out;
  float* ws_o;
  float* ws_ml;
  int n_splits, n_groups;
  DecArgs d;
  AttnRopeArgs r;
};

std::atomic<bool>& mma_mode_ref() {
  static std::atomic<bool> on{true};  // strategies.kernels.cuda.attention_mma
  return on;
}

// The fused step takes the tensor-core split (mma_attend) for a bf16 cache of head_dim 64 or 128
// unless switched off.
bool use_mma(const AttnArgs& a) {
  return mma_mode_ref().load(std::memory_order_relaxed) && a.kv_bf16 &&
         (a.head_dim == 64 || a.head_dim == 128);
}

// kRope: clusters of kCluster splits (the grid's splits rounded up to a multiple).
template <bool kBf16, int kD, int kG, bool kRope, bool kMma = false>
cudaError_t launch_t(const AttnArgs& a, const DecLaunch& l, cudaStream_t stream) {
  const int x = kRope ? (l.n_splits + kCluster - 1) / kCluster * kCluster : l.n_splits;
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(a.n_head_kv * l.n_groups));
  size_t smem = 0;
  if constexpr (kMma) {
    smem = MmaCfg<kD>::kSmem;
    static const cudaError_t attr =
        cudaFuncSetAttribute(attn_decode_kernel<kBf16, kD, kG, kRope, kMma>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (attr != cudaSuccess) return attr;
  }
  return launch_pdl_cluster(attn_decode_kernel<kBf16, kD, kG, kRope, kMma>, grid, dim3(kThreads),
                            smem, stream, kRope ? static_cast<unsigned>(kCluster) : 1u, l.d, l.q,
                            l.k, l.v, l.out, l.ws_o, l.ws_ml, l.n_groups, l.r);
}

template <bool kBf16, int kD, bool kRope>
cudaError_t launch_d(const AttnArgs& a, int g, const DecLaunch& l, cudaStream_t stream) {
  if constexpr (kRope && kBf16 && kD <= 128) {
    if (use_mma(a)) {
      switch (g) {
        case 1: return launch_t<kBf16, kD, 1, kRope, true>(a, l, stream);
        case 4: return launch_t<kBf16, kD, 4, kRope, true>(a, l, stream);
        default: return launch_t<kBf16, kD, 8, kRope, true>(a, l, stream);
      }
    }
  }
  switch (g) {
    case 1: return launch_t<kBf16, kD, 1, kRope>(a, l, stream);
    case 4: return launch_t<kBf16, kD, 4, kRope>(a, l, stream);
    default: return launch_t<kBf16, kD, 8, kRope>(a, l, stream);
  }
}

template <bool kBf16, bool kRope>
cudaError_t launch_b(const AttnArgs& a, int g, const DecLaunch& l, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: return launch_d<kBf16, 64, kRope>(a, g, l, stream);
    case 128: return launch_d<kBf16, 128, kRope>(a, g, l, stream);
    case 256: return launch_d<kBf16, 256, kRope>(a, g, l, stream);
    default: return cudaErrorInvalidValue;
  }
}

// Splits for about blocks_per_sm blocks per SM (and at least 64 rows a split).
int decode_splits(const AttnArgs& a, int blocks_per_sm) {
  const int g = group_heads(a);
  const int64_t n_groups = (a.n_head / a.n_head_kv + g - 1) / g;
  const int64_t blocks = a.n_head_kv * n_groups;
  // The most positions a step reads (a.n_kv is the upper bound when n_kv comes from the device).
  const int64_t len = a.window > 0 ? std::min(a.window, a.n_kv) : a.n_kv;
  const int64_t target = std::max<int64_t>(1, (blocks_per_sm * sm_count() + blocks - 1) / blocks);
  const int64_t max_by_len = std::max<int64_t>(1, (len + 63) / 64);
  return static_cast<int>(std::min<int64_t>({target, max_by_len, kMaxSplits}));
}

// Grid shape, workspace split and 32-bit sizes of one decode launch. The sizes fit 32 bits:
// the callers' Status layer checks them first (ops_cuda.cpp: check_decode_sizes).
DecLaunch dec_launch(const AttnArgs& a, int& g, void* workspace, int n_splits) {
  g = group_heads(a);
  DecLaunch l{};
  l.d.n_kv = static_cast<int>(a.n_kv);
  l.d.n_head = static_cast<int>(a.n_head);
  l.d.n_head_kv = static_cast<int>(a.n_head_kv);
  l.d.ratio = static_cast<int>(a.n_head / a.n_head_kv);
  l.d.stride = static_cast<int>(a.kv_row_stride);
  l.d.window = static_cast<int>(std::min(a.window, a.n_kv));  // a wider window sees as much
  l.d.ring = static_cast<int>(a.ring_rows);
  l.d.scale = a.scale;
  l.d.n_kv_dev = a.n_kv_dev;
  l.d.table = a.block_table;
  l.d.block = static_cast<int>(a.block_size);
  l.n_groups = static_cast<int>((a.n_head / a.n_head_kv + g - 1) / g);
  l.n_splits = n_splits;
  l.ws_o = static_cast<float*>(workspace);  // [n_splits, n_head, head_dim]
  l.ws_ml = l.ws_o == nullptr ? nullptr
                              : l.ws_o + static_cast<int64_t>(l.n_splits) * a.n_head *
                                             a.head_dim;  // [n_splits, n_head, 2]
  return l;
}

}  // namespace

// The workspace serves both paths: the fused one (2 or 3 blocks per SM) never has more splits.
int attn_decode_splits(const AttnArgs& a) { return decode_splits(a, 4); }

size_t attn_decode_workspace_bytes(const AttnArgs& a) {
  const int s = attn_decode_splits(a);
  if (s == 1) return 0;
  return static_cast<size_t>(s) * a.n_head * (a.head_dim + 2) * sizeof(float);
}

// One a cluster rank of each head group (the slices of the cross-cluster merge).
int attn_decode_counters(const AttnArgs& a) {
  const int g = group_heads(a);
  return static_cast<int>(a.n_head_kv * ((a.n_head / a.n_head_kv + g - 1) / g) * kCluster);
}

cudaError_t launch_attn_decode(const AttnArgs& a, const float* q, const void* k, const void* v,
                               float* out, void* workspace, cudaStream_t stream) {
  int g = 0;
  DecLaunch l = dec_launch(a, g, workspace, attn_decode_splits(a));
  l.q = q;
  l.k = k;
  l.v = v;
  l.out = out;
  const cudaError_t err =
      a.kv_bf16 ? launch_b<true, false>(a, g, l, stream) : launch_b<false, false>(a, g, l, stream);
  if (err != cudaSuccess || l.n_splits == 1) return err;
  const int64_t n_cg = std::min<int64_t>(kCombineGroups, 1024 / a.head_dim);
  return launch_pdl(attn_combine_kernel, dim3(static_cast<unsigned>(a.n_head)),
                    dim3(static_cast<unsigned>(a.head_dim * n_cg)), 0, stream, l.d,
                    static_cast<int>(a.head_dim), l.ws_o, l.ws_ml, l.n_splits, out);
}

cudaError_t launch_attn_decode_rope(const AttnArgs& a, const AttnRopeArgs& r, const float* qkv,
                                    void* k, void* v, float* out, void* workspace,
                                    cudaStream_t stream) {
  // An f32 cache: head_dim 64 and 128 (the scalar split; fewer instances to build).
  if (r.counters == nullptr || (!a.kv_bf16 && a.head_dim != 64 && a.head_dim != 128)) {
    return cudaErrorInvalidValue;
  }
  int g = 0;
  // Whole clusters of splits, rounded down so that the grid fits the SMs in one wave (3 blocks
  // an SM, 2 with six rows a step): rounded up (Llama-3-8B with 3 an SM: 56 splits, 448 blocks
  // for 396 places), a long context's last blocks ran as a second wave (docs/strategies/kernels.md, "Measured choices").
  const int n_splits = decode_splits(
      a, use_mma(a) || six_row_step(static_cast<int>(a.head_dim), group_heads(a), true) ? 2 : 3);
  DecLaunch l =
      dec_launch(a, g, workspace, n_splits > kCluster ? n_splits / kCluster * kCluster : n_splits);
  l.q = qkv;
  l.k = k;
  l.v = v;
  l.out = out;
  l.r = r;
  if (!a.kv_bf16) {
    return a.head_dim == 64 ? launch_d<false, 64, true>(a, g, l, stream)
                            : launch_d<false, 128, true>(a, g, l, stream);
  }
  return launch_b<true, true>(a, g, l, stream);
}

void set_attn_decode_mma(bool on) { mma_mode_ref().store(on, std::memory_order_relaxed); }

}  // namespace rinfer::cuda::kern
