// Rotary position embedding, in place on f32 [n_tokens, n_heads, head_dim] (token rows
// token_stride floats apart, so q and k can be rotated inside a fused qkv buffer), optionally
// with the KV-cache store of the decoder fused in (rope_kv_store: the rotated k heads and the v
// heads that follow them are written into the cache rows of their positions, f32 or bf16).
// One thread per (token, head, pair): the angle pos * freq_scale * base^(-2i/n_rot) and its
// cos/sin are computed in double (long contexts keep full precision); every head has its own
// threads, so a decode step's 40 heads take one short wave instead of a 40-step loop. Normal mode
// rotates (2i, 2i+1); NeoX mode (i, i + n_rot/2). Dims past n_rot pass through (and are copied to
// the cache when storing).
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

// kStore: heads [kv.n_head_q, n_heads) are k heads, stored with the v heads after them.
template <bool kStore>
__global__ void rope_kernel(float* x, const int32_t* __restrict__ positions, RopeArgs a,
                            RopeKvArgs kv) {
  pdl_begin();
  const int64_t half = a.n_rot / 2;
  // Threads per head: the rotated pairs, then (storing) one per dim past n_rot.
  const int64_t per_head = kStore ? half + (a.head_dim - a.n_rot) : half;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.n_tokens * a.n_heads * per_head) return;
  const int64_t t = idx / (a.n_heads * per_head);
  const int64_t h = (idx / per_head) % a.n_heads;
  const int64_t j = idx % per_head;
  const int32_t pos = positions[t];
  float* xh = x + t * a.token_stride + h * a.head_dim;  // [head_dim]
  int64_t i0, i1 = -1;
  float y0, y1 = 0.0f;
  if (j < half) {
    const double inv_freq =
        pow(a.freq_base, -2.0 * static_cast<double>(j) / static_cast<double>(a.n_rot));
    const double theta = static_cast<double>(pos) * a.freq_scale * inv_freq;
    double sd, cd;
    sincos(theta, &sd, &cd);
    const float s = static_cast<float>(sd), c = static_cast<float>(cd);
    i0 = a.neox ? j : 2 * j;
    i1 = a.neox ? j + half : 2 * j + 1;
    const float x0 = xh[i0], x1 = xh[i1];
    y0 = x0 * c - x1 * s;
    y1 = x0 * s + x1 * c;
    xh[i0] = y0;
    xh[i1] = y1;
  } else {
    i0 = a.n_rot + (j - half);  // pass-through dim (storing only)
    y0 = xh[i0];
  }
  if constexpr (kStore) {
    const int64_t hk = h - kv.n_head_q;
    if (hk < 0) return;
    int64_t row = pos;
    if (kv.ring_rows > 0) row %= kv.ring_rows;
    const int64_t base = row * kv.kv_row_stride + hk * a.head_dim;
    store_act(kv.k_cache, base + i0, y0, kv.cache_bf16);
    if (i1 >= 0) store_act(kv.k_cache, base + i1, y1, kv.cache_bf16);
    // v of this kv head follows the k heads in the token row.
    const float* vh = x + t * a.token_stride + (a.n_heads + hk) * a.head_dim;
    for (int64_t e = j; e < a.head_dim; e += per_head) {
      store_act(kv.v_cache, base + e, vh[e], kv.cache_bf16);
    }
  }
}

}  // namespace

cudaError_t launch_rope(float* x, const int32_t* positions, const RopeArgs& a,
                        cudaStream_t stream) {
  const int64_t n = a.n_tokens * a.n_heads * (a.n_rot / 2);
  const int threads = 128;
  if (n > 0) {
    return launch_pdl(rope_kernel<false>, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                      dim3(threads), 0, stream, x, positions, a, RopeKvArgs{});
  }
  return cudaGetLastError();
}

cudaError_t launch_rope_kv_store(float* x, const int32_t* positions, const RopeArgs& a,
                                 const RopeKvArgs& kv, cudaStream_t stream) {
  const int64_t n = a.n_tokens * a.n_heads * (a.n_rot / 2 + (a.head_dim - a.n_rot));
  const int threads = 128;
  if (n > 0) {
    return launch_pdl(rope_kernel<true>, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                      dim3(threads), 0, stream, x, positions, a, kv);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
