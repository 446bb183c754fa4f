// Device-side sampling from a row of f32 logits, one block of 1024 threads (no host round trip,
// so a decode step can stay on the device and inside a CUDA graph).
//
// argmax: lowest id on ties; NaN never wins.
// top-k (+ top-p, min-p, temperature), the chain of the CPU Sampler after its penalties:
//   1. the k-th largest logit by radix select on order-preserving 32-bit keys (4 passes of 8
//      bits, shared-memory histograms with warp-aggregated atomics);
//   2. the k candidates gathered (ties at the threshold taken lowest id first), bitonic-sorted
//      by (logit desc, id asc);
//   3. p_i = exp((l_i - l_max) / T), inclusive prefix sums; top-p keeps the first i with
//      cum_i >= top_p * cum_k; min-p keeps p_i >= min_p * p_max; at least one token stays;
//   4. the first candidate with u * mass < cum_i, u read from device memory (a uniform [0, 1)
//      draw the host or a device RNG wrote there).
// Both also tell when the row holds NaN or +inf, or no finite value (a model whose numbers
// broke): then sample_rows_kernel writes id -1 for that row.
#include <cfloat>
#include <climits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarp;

__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// The argmax of x[n] over the block (kThreads threads), returned to every thread; *non_finite
// (every thread) whether x holds NaN or +inf or nothing but -inf.
__device__ int block_argmax(const float* __restrict__ x, int64_t n, bool* non_finite) {
  __shared__ float s_v[kWarps];
  __shared__ int s_i[kWarps];
  __shared__ int s_best;
  float bv = -INFINITY;
  int bi = INT_MAX;
  bool bad = false;  // NaN or +inf seen by this thread
  // Each thread visits its ids in increasing order (so `>` keeps the first of equal values):
  // float4s, eight loads in flight, then the scalar tail.
  const int tid = threadIdx.x;
  const int64_t n4 = (reinterpret_cast<uintptr_t>(x) & 15u) == 0 ? n / 4 : 0;
  const auto* x4 = reinterpret_cast<const float4*>(x);
  constexpr int kU = 8;
  for (int64_t b = 0; b < n4; b += kThreads * kU) {
    float4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = b + u * kThreads + tid;
      v[u] = i < n4 ? x4[i] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = static_cast<int>(4 * (b + u * kThreads + tid));
      bad |=
          !(v[u].x < INFINITY) | !(v[u].y < INFINITY) | !(v[u].z < INFINITY) | !(v[u].w < INFINITY);
      if (v[u].x > bv) bv = v[u].x, bi = i;
      if (v[u].y > bv) bv = v[u].y, bi = i + 1;
      if (v[u].z > bv) bv = v[u].z, bi = i + 2;
      if (v[u].w > bv) bv = v[u].w, bi = i + 3;
    }
  }
  for (int64_t i = 4 * n4 + tid; i < n; i += kThreads) {
    const float v = x[i];
    bad |= !(v < INFINITY);
    if (v > bv) {
      bv = v;
      bi = static_cast<int>(i);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    s_v[warp] = bv;
    s_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = s_v[lane];
    bi = s_i[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) s_best = bi == INT_MAX ? -1 : bi;  // every logit -inf or NaN
  }
  bad = __syncthreads_or(bad) != 0;  // also makes s_best visible
  *non_finite = bad || s_best < 0;
  return s_best < 0 ? 0 : s_best;
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* out) {
  bool non_finite;
  const int id = block_argmax(x, n, &non_finite);
  if (threadIdx.x == 0) *out = id;
}

// Larger floats get larger keys; NaN gets 0 (below -inf).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0u;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The top-k chain's draw with the uniform u, returned to every thread of the block; *non_finite
// as block_argmax's (NaN and +inf found in the first radix pass).
__device__ int block_sample(const float* __restrict__ x, const SampleArgs& a, float u,
                            bool* non_finite) {
  __shared__ uint32_t hist[256];
  __shared__ float cand_v[kMaxTopK];
  __shared__ int cand_i[kMaxTopK];
  __shared__ float cum[kMaxTopK];
  __shared__ float warp_sums[kWarps];
  __shared__ uint32_t warp_ties[kWarps];
  __shared__ uint32_t s_prefix, s_krem, s_ncand;
  __shared__ int s_np, s_nm, s_choice;

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int64_t n = a.n_vocab;
  const int k = a.top_k;

  // 1. Radix select: the key of the k-th largest logit.
  uint32_t prefix = 0, mask = 0, k_rem = static_cast<uint32_t>(k);
  bool bad = false;  // NaN or +inf seen by this thread
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (tid < 256) hist[tid] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += kThreads) {  // same trip count for every thread
      const int64_t i = base + tid;
      bool take = false;
      uint32_t digit = 0;
      if (i < n) {
        const float v = x[i];
        if (shift == 24) bad |= !(v < INFINITY);
        const uint32_t key = order_key(v);
        take = (key & mask) == prefix;
        digit = (key >> shift) & 0xffu;
      }
      const uint32_t tag = take ? digit : 0x100u + lane;
      const uint32_t peers = __match_any_sync(0xffffffffu, tag);
      if (take && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l owns bins [8l, 8l + 8); walk from the top bin down.
      uint32_t mine = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine += hist[lane * 8 + j];
      uint32_t above = 0;  // count in the lanes above this one (31 shuffles)
      for (int src = 31; src > 0; --src) {
        const uint32_t t = __shfl_sync(0xffffffffu, mine, src);
        if (src > lane) above += t;
      }
      if (above < k_rem && k_rem <= above + mine) {
        uint32_t c = above;
        for (int j = 7; j >= 0; --j) {
          const uint32_t hj = hist[lane * 8 + j];
          if (k_rem <= c + hj) {
            s_prefix = prefix | (static_cast<uint32_t>(lane * 8 + j) << shift);
            s_krem = k_rem - c;
            break;
          }
          c += hj;
        }
      }
    }
    __syncthreads();
    prefix = s_prefix;
    k_rem = s_krem;
    mask |= 0xffu << shift;
  }
  const uint32_t thr = prefix;  // k-th largest key; k_rem ties at thr are taken
  bad = __syncthreads_or(bad) != 0;

  // 2. Gather: keys above thr, and the first k_rem ties by id. Warp w scans ids
  //    [w * per, (w + 1) * per) in order.
  const int64_t per = ((n + kWarps - 1) / kWarps + kWarp - 1) / kWarp * kWarp;
  const int64_t w0 = warp * per, w1 = min(n, w0 + per);
  uint32_t ties = 0;
  for (int64_t b = w0; b < w1; b += kWarp) {
    const int64_t i = b + lane;
    const bool tie = i < w1 && order_key(x[i]) == thr;
    ties += __popc(__ballot_sync(0xffffffffu, tie));
  }
  if (lane == 0) warp_ties[warp] = ties;
  if (tid == 0) s_ncand = 0;
  __syncthreads();
  uint32_t tie_rank = 0;
  for (int wi = 0; wi < warp; ++wi) tie_rank += warp_ties[wi];
  for (int64_t b = w0; b < w1; b += kWarp) {
    const int64_t i = b + lane;
    uint32_t key = 0;
    float v = 0.0f;
    if (i < w1) {
      v = x[i];
      key = order_key(v);
    }
    const bool tie = i < w1 && key == thr;
    const uint32_t tie_mask = __ballot_sync(0xffffffffu, tie);
    const uint32_t my_rank = tie_rank + __popc(tie_mask & ((1u << lane) - 1u));
    const bool take = i < w1 && (key > thr || (tie && my_rank < k_rem));
    if (take) {
      const uint32_t slot = atomicAdd(&s_ncand, 1u);
      if (slot < kMaxTopK) {
        cand_v[slot] = v != v ? -INFINITY : v;
        cand_i[slot] = static_cast<int>(i);
      }
    }
    tie_rank += __popc(tie_mask);
  }
  __syncthreads();
  const int n_cand = static_cast<int>(s_ncand < kMaxTopK ? s_ncand : kMaxTopK);  // == k
  if (tid >= n_cand) {
    cand_v[tid] = -INFINITY;
    cand_i[tid] = INT_MAX;
  }
  __syncthreads();

  // 3. Bitonic sort of kMaxTopK (= kThreads) entries, best first.
  for (int size = 2; size <= kMaxTopK; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      const int partner = tid ^ stride;
      if (partner > tid) {
        const bool up = (tid & size) == 0;
        const bool a_better = better(cand_v[tid], cand_i[tid], cand_v[partner], cand_i[partner]);
        if (up != a_better) {
          const float tv = cand_v[tid];
          cand_v[tid] = cand_v[partner];
          cand_v[partner] = tv;
          const int ti = cand_i[tid];
          cand_i[tid] = cand_i[partner];
          cand_i[partner] = ti;
        }
      }
      __syncthreads();
    }
  }

  // Probabilities relative to the best, and their inclusive prefix sums.
  const float vmax = cand_v[0];
  *non_finite = bad || vmax == -INFINITY;
  const float p =
      tid < n_cand && cand_v[tid] != -INFINITY ? expf((cand_v[tid] - vmax) / a.temperature) : 0.0f;
  float incl = p;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const float t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == kWarp - 1) warp_sums[warp] = incl;
  __syncthreads();
  float off = 0.0f;
  for (int wi = 0; wi < warp; ++wi) off += warp_sums[wi];
  cum[tid] = incl + off;
  if (tid == 0) {
    s_np = n_cand;
    s_nm = n_cand;
  }
  __syncthreads();
  const float total = cum[n_cand - 1];
  if (a.top_p < 1.0f && tid < n_cand) {
    const float target = a.top_p * total;
    if (cum[tid] >= target && (tid == 0 || cum[tid - 1] < target)) s_np = tid + 1;
  }
  if (a.min_p > 0.0f && tid < n_cand) {
    const bool keep = p >= a.min_p;  // p_max == 1
    const bool next_keep =
        tid + 1 < n_cand &&
        (cand_v[tid + 1] != -INFINITY && expf((cand_v[tid + 1] - vmax) / a.temperature) >= a.min_p);
    if (keep && !next_keep) s_nm = tid + 1;
  }
  __syncthreads();
  const int n_keep = max(1, min(s_np, s_nm));
  if (tid == 0) s_choice = n_keep - 1;  // u rounded up to the mass: the last kept
  __syncthreads();
  const float target = u * cum[n_keep - 1];
  if (tid < n_keep && cum[tid] > target && (tid == 0 || cum[tid - 1] <= target)) {
    atomicMin(&s_choice, tid);
  }
  __syncthreads();
  return cand_i[s_choice];
}

__global__ void __launch_bounds__(kThreads)
    sample_top_k_kernel(const float* __restrict__ x, SampleArgs a,
                        const float* __restrict__ uniform, int32_t* out) {
  bool non_finite;
  const int id = block_sample(x, a, uniform[0], &non_finite);
  if (threadIdx.x == 0) *out = id;
}

// Row blockIdx.x of a batch: the penalties over its history window (each distinct id once, in
// the logits, in place; -inf stays masked, NaN and +inf are reported), then argmax or the top-k
// draw with its uniform.
__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(float* __restrict__ logits, int64_t n_vocab,
                       const RowSampleArgs* __restrict__ args, const int32_t* __restrict__ hist,
                       int32_t* __restrict__ out) {
  __shared__ int s_win[kMaxDecodeHistory];
  pdl_begin();
  const RowSampleArgs a = args[blockIdx.x];
  float* x = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  const int tid = threadIdx.x;
  const bool pen = a.hist_len > 0 && (a.repeat_penalty != 1.0f || a.presence_penalty != 0.0f);
  if (pen) {
    const int w = min(a.hist_len, kMaxDecodeHistory);
    if (tid < w) s_win[tid] = hist[a.hist_off + tid];
    __syncthreads();
    if (tid < w) {
      const int id = s_win[tid];
      bool first = id >= 0 && id < n_vocab;
      for (int j = 0; j < tid && first; ++j) first = s_win[j] != id;
      if (first && isfinite(x[id])) {
        float l = x[id];
        if (a.repeat_penalty != 1.0f) l = l > 0.0f ? l / a.repeat_penalty : l * a.repeat_penalty;
        x[id] = fminf(fmaxf(l - a.presence_penalty, -FLT_MAX), FLT_MAX);
      }
    }
    __syncthreads();
  }
  int id;
  bool non_finite;
  if (a.temperature <= 0.0f) {
    id = block_argmax(x, n_vocab, &non_finite);
  } else {
    const SampleArgs sa{n_vocab, a.top_k, a.temperature, a.top_p, a.min_p};
    id = block_sample(x, sa, a.uniform, &non_finite);
  }
  if (tid == 0) out[blockIdx.x] = non_finite || id < 0 || id >= n_vocab ? -1 : id;
}

}  // namespace

cudaError_t launch_argmax(const float* logits, int64_t n, int32_t* out_id, cudaStream_t stream) {
  argmax_kernel<<<1, kThreads, 0, stream>>>(logits, n, out_id);
  return cudaGetLastError();
}

cudaError_t launch_sample_top_k(const float* logits, const SampleArgs& a, const float* uniform,
                                int32_t* out_id, cudaStream_t stream) {
  sample_top_k_kernel<<<1, kThreads, 0, stream>>>(logits, a, uniform, out_id);
  return cudaGetLastError();
}

cudaError_t launch_sample_rows(float* logits, int64_t n_rows, int64_t n_vocab,
                               const RowSampleArgs* args, const int32_t* hist, int32_t* out,
                               cudaStream_t stream) {
  if (n_rows <= 0) return cudaGetLastError();
  return launch_pdl(sample_rows_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(kThreads), 0,
                    stream, logits, n_vocab, args, hist, out);
}

}  // namespace rinfer::cuda::kern
