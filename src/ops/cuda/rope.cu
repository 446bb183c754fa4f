// Rotary position embedding, in place on f32 [n_tokens, n_heads, head_dim] (token rows
// token_stride floats apart, so q and k can be rotated inside a fused qkv buffer), optionally
// with the KV-cache store of the decoder fused in (rope_kv_store: the rotated k heads and the v
// heads that follow them are written into the cache rows of their positions, f32 or bf16).
// One thread per (token, pair, group of 8 heads): the angle pos * freq_scale * inv_freq[i] (the
// inverse frequencies base^(-2i/n_rot) come from the host) and its cos/sin are computed in double
// (long contexts keep full precision) once for the group's heads: a 2048-token prefill of 40
// heads did 5.2 M double sincos with one thread per head (103 us a layer on the H200). Normal mode
// rotates (2i, 2i+1); NeoX mode (i, i + n_rot/2). Dims past n_rot pass through (and are copied to
// the cache when storing).
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

// Heads one thread rotates with one cos/sin (the double sincos is the costly part).
constexpr int kHeadsPerThread = 8;

// kStore: heads [kv.n_head_q, n_heads) are k heads, stored with the v heads after them. Thread
// (token, head group, j): pair j < n_rot/2 (or, storing, pass-through dim n_rot + j - n_rot/2)
// of up to kHeadsPerThread heads; j varies fastest, so a warp reads adjacent pairs.
template <bool kStore>
__global__ void rope_kernel(float* x, const int32_t* __restrict__ positions, RopeArgs a,
                            RopeKvArgs kv) {
  pdl_begin();
  const int64_t half = a.n_rot / 2;
  // Threads per head: the rotated pairs, then (storing) one per dim past n_rot.
  const int64_t per_head = kStore ? half + (a.head_dim - a.n_rot) : half;
  const int64_t n_groups = (a.n_heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.n_tokens * n_groups * per_head) return;
  const int64_t j = idx % per_head;
  const int64_t hg = (idx / per_head) % n_groups;
  const int64_t t = idx / (per_head * n_groups);
  const int32_t pos = positions[t];
  int64_t i0, i1 = -1;
  float c = 1.0f, sn = 0.0f;
  if (j < half) {
    const double theta = static_cast<double>(pos) * a.freq_scale * a.inv_freq[j];
    double sd, cd;
    sincos(theta, &sd, &cd);
    sn = static_cast<float>(sd);
    c = static_cast<float>(cd);
    i0 = a.neox ? j : 2 * j;
    i1 = a.neox ? j + half : 2 * j + 1;
  } else {
    i0 = a.n_rot + (j - half);  // pass-through dim (storing only)
  }
  float* xt = x + t * a.token_stride;
  const int64_t h_end = min(a.n_heads, (hg + 1) * kHeadsPerThread);
  for (int64_t h = hg * kHeadsPerThread; h < h_end; ++h) {
    float* xh = xt + h * a.head_dim;  // [head_dim]
    float y0 = xh[i0], y1 = 0.0f;
    if (i1 >= 0) {
      const float x0 = y0, x1 = xh[i1];
      y0 = x0 * c - x1 * sn;
      y1 = x0 * sn + x1 * c;
      xh[i0] = y0;
      xh[i1] = y1;
    }
    if constexpr (kStore) {
      const int64_t hk = h - kv.n_head_q;
      if (hk < 0) continue;
      int64_t row = pos;
      if (kv.ring_rows > 0) row %= kv.ring_rows;
      const int64_t base = row * kv.kv_row_stride + hk * a.head_dim;
      store_act(kv.k_cache, base + i0, y0, kv.cache_bf16);
      if (i1 >= 0) store_act(kv.k_cache, base + i1, y1, kv.cache_bf16);
      // v of this kv head follows the k heads in the token row.
      const float* vh = xt + (a.n_heads + hk) * a.head_dim;
      for (int64_t e = j; e < a.head_dim; e += per_head) {
        store_act(kv.v_cache, base + e, vh[e], kv.cache_bf16);
      }
    }
  }
}

int64_t head_groups(const RopeArgs& a) {
  return (a.n_heads + kHeadsPerThread - 1) / kHeadsPerThread;
}

}  // namespace

cudaError_t launch_rope(float* x, const int32_t* positions, const RopeArgs& a,
                        cudaStream_t stream) {
  const int64_t n = a.n_tokens * head_groups(a) * (a.n_rot / 2);
  const int threads = 128;
  if (n > 0) {
    return launch_pdl(rope_kernel<false>, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                      dim3(threads), 0, stream, x, positions, a, RopeKvArgs{});
  }
  return cudaGetLastError();
}

cudaError_t launch_rope_kv_store(float* x, const int32_t* positions, const RopeArgs& a,
                                 const RopeKvArgs& kv, cudaStream_t stream) {
  const int64_t n = a.n_tokens * head_groups(a) * (a.n_rot / 2 + (a.head_dim - a.n_rot));
  const int threads = 128;
  if (n > 0) {
    return launch_pdl(rope_kernel<true>, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                      dim3(threads), 0, stream, x, positions, a, kv);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
