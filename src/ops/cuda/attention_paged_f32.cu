// Paged attention over an f32 KV arena (strategies.kv_cache.dtype f32: the keys and values kept
// unrounded, the precision baseline of the engine core on CUDA). Scalar f32 arithmetic on the CUDA
// cores: the tensor-core kernel of attention_paged.cu reads bf16 tiles, which would round the
// very values this cache keeps.
//
// A block takes one work item (a sequence and its tokens [t0, t0 + T), as paged_attention_work
// lays them out); each of its warps takes (token, query head) rows of the item in turn. A lane
// holds head_dim / 32 elements of q and of the output accumulator; per visible position the warp
// reduces q . k, updates the running max and sum (online softmax) and accumulates p v. Position p
// of sequence s is row table[s][p / block_size] * block_size + p % block_size of the arena.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {

namespace {

constexpr int kWarps = 4;

template <int kPer>  // elements of a head per lane: head_dim / 32
__global__ void __launch_bounds__(kWarps * 32)
    attn_paged_f32_kernel(PagedAttnArgs a, int tokens_per_item, const float* __restrict__ q,
                          const float* __restrict__ k, const float* __restrict__ v,
                          uint16_t* __restrict__ out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int2 item = a.work[blockIdx.x];
  const int s = item.x;
  if (s < 0) return;
  const int q0 = a.query_start[s];
  const int nq = a.query_start[s + 1] - q0;
  const int len = a.kv_len[s];
  const int n_tok = min(tokens_per_item, nq - item.y);
  const int group = static_cast<int>(a.n_head / a.n_head_kv);
  const int* table = a.tables + static_cast<int64_t>(s) * a.table_stride;
  for (int r = warp; r < n_tok * a.n_head; r += kWarps) {
    const int ti = item.y + r / static_cast<int>(a.n_head);  // the token within the sequence
    const int h = r % static_cast<int>(a.n_head);
    const int64_t t = q0 + ti;
    const int pos = len - nq + ti;
    int first = 0, last = len - 1;
    if (a.causal) {
      last = pos;
      if (a.window > 0) first = max(0, pos - a.window + 1);
    }
    const int64_t head_off = static_cast<int64_t>(h / group) * a.head_dim;
    const float* qr = q + t * a.q_stride + static_cast<int64_t>(h) * a.head_dim;
    float qv[kPer], acc[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      qv[i] = qr[lane + 32 * i] * a.scale;
      acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int p = first; p <= last; ++p) {
      const int64_t row =
          static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size;
      const float* kr = k + row * a.kv_row_stride + head_off;
      const float* vr = v + row * a.kv_row_stride + head_off;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) dot = fmaf(qv[i], kr[lane + 32 * i], dot);
      dot = warp_sum(dot);
      const float m_new = fmaxf(m, dot);
      const float c = expf(m - m_new);  // 0 at the first position (m = -inf)
      const float w = expf(dot - m_new);
      l = l * c + w;
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc[i] = fmaf(w, vr[lane + 32 * i], acc[i] * c);
      m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    uint16_t* o = out + t * a.out_stride + static_cast<int64_t>(h) * a.head_dim;
#pragma unroll
    for (int i = 0; i < kPer; ++i) o[lane + 32 * i] = f32_to_bf16_bits(acc[i] * inv);
  }
}

template <int kPer>
cudaError_t launch_per(const PagedAttnArgs& a, int tokens_per_item, const float* q, const float* k,
                       const float* v, uint16_t* out, cudaStream_t stream) {
  attn_paged_f32_kernel<kPer><<<static_cast<unsigned>(a.n_work), kWarps * 32, 0, stream>>>(
      a, tokens_per_item, q, k, v, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attn_paged_f32(const PagedAttnArgs& a, int tokens_per_item, const float* q,
                                  const float* k, const float* v, uint16_t* out,
                                  cudaStream_t stream) {
  if (a.n_work <= 0 || a.n_tokens <= 0) return cudaSuccess;
  if (a.head_dim == 64) return launch_per<2>(a, tokens_per_item, q, k, v, out, stream);
  if (a.head_dim == 128) return launch_per<4>(a, tokens_per_item, q, k, v, out, stream);
  if (a.head_dim == 256) return launch_per<8>(a, tokens_per_item, q, k, v, out, stream);
  return cudaErrorInvalidValue;
}

}  // namespace rinfer::cuda::kern
