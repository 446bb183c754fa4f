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
#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr float kLog2e = 1.4426950408889634f;

template <bool kBf16, int kD>
struct DecCfg {
  static constexpr int kEpt = kBf16 ? 8 : 4;  // elements per 16-byte load
  static constexpr int kTpr = kD / kEpt;      // lanes per KV row
  static constexpr int kRpw = kWarp / kTpr;   // rows a warp holds at once
  static constexpr int kSubgroups = kWarps * kRpw;
};

// KV rows per sub-group per step, all loaded before the first use (more rows: more bytes in
// flight; the wide GQA groups keep fewer for registers).
template <int kG>
__host__ __device__ constexpr int rows_in_flight() {
  return kG <= 4 ? 4 : 2;
}

template <bool kBf16, int kEpt>
__device__ __forceinline__ void load_row(const void* base, int64_t elem, float (&out)[kEpt]) {
  const uint4 v = ld_stream16(static_cast<const uint8_t*>(base) + elem * (kBf16 ? 2 : 4));
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (kBf16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = bf16_lo(w[i]);
      out[2 * i + 1] = bf16_hi(w[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(w[i]);
  }
}

// grid: (n_splits, n_head_kv * n_groups); a group is up to kG query heads of one kv head.
template <bool kBf16, int kD, int kG>
__global__ void __launch_bounds__(kThreads)
    attn_decode_kernel(AttnArgs a, const float* __restrict__ q, const void* __restrict__ k,
                       const void* __restrict__ v, float* out, float* ws_o, float* ws_ml,
                       int64_t chunk, int n_groups) {
  using C = DecCfg<kBf16, kD>;
  constexpr int E = C::kEpt;
  constexpr int SG = C::kSubgroups;
  constexpr int kRowsInFlight = rows_in_flight<kG>();
  __shared__ float s_m[SG][kG];
  __shared__ float s_l[SG][kG];
  __shared__ float s_acc[SG][kG][kD];

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int sg = warp * C::kRpw + lane / C::kTpr;
  const int li = lane % C::kTpr;  // position in the row
  const int split = blockIdx.x;
  const int hk = blockIdx.y / n_groups;
  const int64_t ratio = a.n_head / a.n_head_kv;
  const int64_t h0 = hk * ratio + static_cast<int64_t>(blockIdx.y % n_groups) * kG;
  const int64_t left = hk * ratio + ratio - h0;  // query heads of this kv head from h0 on
  const int ng = static_cast<int>(left < kG ? left : kG);
  const int64_t j_begin = split * chunk;
  const int64_t j_end = min(a.n_kv, j_begin + chunk);

  float qr[kG][E];
  const float qs = a.scale * kLog2e;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qr[g][e] = g < ng ? q[(h0 + g) * kD + li * E + e] * qs : 0.0f;
    }
  }
  float m[kG], l[kG], acc[kG][E];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }

  const int64_t head_off = static_cast<int64_t>(hk) * kD + li * E;
  // The trip count is the same for every thread (the shuffles below need whole warps).
  for (int64_t base = j_begin; base < j_end; base += SG * kRowsInFlight) {
    float kr[kRowsInFlight][E], vr[kRowsInFlight][E];
    bool valid[kRowsInFlight];
#pragma unroll
    for (int t = 0; t < kRowsInFlight; ++t) {
      const int64_t j = base + t * SG + sg;
      valid[t] = j < j_end;
      const int64_t off = (valid[t] ? j : j_begin) * a.kv_row_stride + head_off;
      load_row<kBf16, E>(k, off, kr[t]);
      load_row<kBf16, E>(v, off, vr[t]);
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
      if (mx == -INFINITY) continue;        // no valid row yet for this sub-group
      const float corr = exp2f(m[g] - mx);  // m = -inf at first: 0
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int t = 0; t < kRowsInFlight; ++t) {
        const float p = exp2f(s[t][g] - mx);  // invalid rows: 0
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
    for (int e = 0; e < E; ++e) s_acc[sg][g][li * E + e] = acc[g][e];
  }
  __syncthreads();
  const int n_splits = gridDim.x;
  for (int idx = threadIdx.x; idx < ng * kD; idx += kThreads) {
    const int g = idx / kD, d = idx % kD;
    float mx = -INFINITY;
    for (int i = 0; i < SG; ++i) mx = fmaxf(mx, s_m[i][g]);
    float lsum = 0.0f, o = 0.0f;
    for (int i = 0; i < SG; ++i) {
      const float w = s_m[i][g] == -INFINITY ? 0.0f : exp2f(s_m[i][g] - mx);
      lsum = fmaf(s_l[i][g], w, lsum);
      o = fmaf(s_acc[i][g][d], w, o);
    }
    const int64_t h = h0 + g;
    if (n_splits == 1) {
      out[h * kD + d] = o / lsum;
    } else {
      ws_o[(static_cast<int64_t>(split) * a.n_head + h) * kD + d] = o;
      if (d == 0) {
        ws_ml[(static_cast<int64_t>(split) * a.n_head + h) * 2] = mx;
        ws_ml[(static_cast<int64_t>(split) * a.n_head + h) * 2 + 1] = lsum;
      }
    }
  }
}

// Merges the splits: one block per head, head_dim x kCombineGroups threads. The per-split
// (m, l) pairs are read in parallel into shared memory; thread (g, d) sums output element d over
// splits g, g + kCombineGroups, ... (a few independent loads each instead of a long chain), and
// the groups are added through shared memory.
constexpr int kMaxSplits = 256;
constexpr int kCombineGroups = 8;

__global__ void attn_combine_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                                    int n_splits, int64_t n_head, int64_t head_dim, float* out) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_part[kCombineGroups][128];
  __shared__ float scratch[32];
  const int64_t h = blockIdx.x;
  const int tid = threadIdx.x;
  const int d = tid % static_cast<int>(head_dim), g = tid / static_cast<int>(head_dim);
  float mx = -INFINITY;
  for (int s = tid; s < n_splits; s += blockDim.x) mx = fmaxf(mx, ws_ml[(s * n_head + h) * 2]);
  mx = block_max(mx, scratch);
  float lsum = 0.0f;
  for (int s = tid; s < n_splits; s += blockDim.x) {
    const float ms = ws_ml[(s * n_head + h) * 2];
    const float w = ms == -INFINITY ? 0.0f : exp2f(ms - mx);
    s_w[s] = w;
    lsum = fmaf(ws_ml[(s * n_head + h) * 2 + 1], w, lsum);
  }
  lsum = block_sum(lsum, scratch);  // its barriers also publish s_w
  float o = 0.0f;
#pragma unroll 4
  for (int s = g; s < n_splits; s += kCombineGroups) {
    o = fmaf(ws_o[(s * n_head + h) * head_dim + d], s_w[s], o);
  }
  s_part[g][d] = o;
  __syncthreads();
  if (g == 0) {
    for (int i = 1; i < kCombineGroups; ++i) o += s_part[i][d];
    out[h * head_dim + d] = o / lsum;
  }
}

int group_heads(const AttnArgs& a) {
  const int64_t ratio = a.n_head / a.n_head_kv;
  return ratio == 1 ? 1 : (ratio <= 4 ? 4 : 8);
}

int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      n = 132;
    }
    cached[dev] = n;
  }
  return cached[dev];
}

template <bool kBf16, int kD, int kG>
cudaError_t launch_t(const AttnArgs& a, const float* q, const void* k, const void* v, float* out,
                     float* ws_o, float* ws_ml, int n_splits, int64_t chunk, int n_groups,
                     cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>(a.n_head_kv * n_groups));
  attn_decode_kernel<kBf16, kD, kG>
      <<<grid, kThreads, 0, stream>>>(a, q, k, v, out, ws_o, ws_ml, chunk, n_groups);
  return cudaGetLastError();
}

template <bool kBf16, int kD>
cudaError_t launch_d(const AttnArgs& a, int g, const float* q, const void* k, const void* v,
                     float* out, float* ws_o, float* ws_ml, int n_splits, int64_t chunk,
                     int n_groups, cudaStream_t stream) {
  switch (g) {
    case 1:
      return launch_t<kBf16, kD, 1>(a, q, k, v, out, ws_o, ws_ml, n_splits, chunk, n_groups,
                                    stream);
    case 4:
      return launch_t<kBf16, kD, 4>(a, q, k, v, out, ws_o, ws_ml, n_splits, chunk, n_groups,
                                    stream);
    default:
      return launch_t<kBf16, kD, 8>(a, q, k, v, out, ws_o, ws_ml, n_splits, chunk, n_groups,
                                    stream);
  }
}

}  // namespace

int attn_decode_splits(const AttnArgs& a) {
  const int g = group_heads(a);
  const int64_t n_groups = (a.n_head / a.n_head_kv + g - 1) / g;
  const int64_t blocks = a.n_head_kv * n_groups;
  // About 4 blocks per SM, and at least 64 rows per split.
  const int64_t target = std::max<int64_t>(1, (4 * sm_count() + blocks - 1) / blocks);
  const int64_t max_by_len = std::max<int64_t>(1, (a.n_kv + 63) / 64);
  return static_cast<int>(std::min<int64_t>({target, max_by_len, kMaxSplits}));
}

size_t attn_decode_workspace_bytes(const AttnArgs& a) {
  const int s = attn_decode_splits(a);
  if (s == 1) return 0;
  return static_cast<size_t>(s) * a.n_head * (a.head_dim + 2) * sizeof(float);
}

cudaError_t launch_attn_decode(const AttnArgs& a, const float* q, const void* k, const void* v,
                               float* out, void* workspace, cudaStream_t stream) {
  const int g = group_heads(a);
  const int n_groups = static_cast<int>((a.n_head / a.n_head_kv + g - 1) / g);
  int n_splits = attn_decode_splits(a);
  const int64_t chunk = (a.n_kv + n_splits - 1) / n_splits;
  n_splits = static_cast<int>((a.n_kv + chunk - 1) / chunk);
  auto* ws_o = static_cast<float*>(workspace);  // [n_splits, n_head, head_dim]
  float* ws_ml = ws_o == nullptr ? nullptr
                                 : ws_o + static_cast<int64_t>(n_splits) * a.n_head *
                                              a.head_dim;  // [n_splits, n_head, 2]
  cudaError_t err = cudaErrorInvalidValue;
  if (a.kv_bf16) {
    err = a.head_dim == 64 ? launch_d<true, 64>(a, g, q, k, v, out, ws_o, ws_ml, n_splits, chunk,
                                                n_groups, stream)
                           : launch_d<true, 128>(a, g, q, k, v, out, ws_o, ws_ml, n_splits, chunk,
                                                 n_groups, stream);
  } else {
    err = a.head_dim == 64 ? launch_d<false, 64>(a, g, q, k, v, out, ws_o, ws_ml, n_splits, chunk,
                                                 n_groups, stream)
                           : launch_d<false, 128>(a, g, q, k, v, out, ws_o, ws_ml, n_splits, chunk,
                                                  n_groups, stream);
  }
  if (err != cudaSuccess || n_splits == 1) return err;
  attn_combine_kernel<<<static_cast<unsigned>(a.n_head),
                        static_cast<unsigned>(a.head_dim * kCombineGroups), 0, stream>>>(
      ws_o, ws_ml, n_splits, a.n_head, a.head_dim, out);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
