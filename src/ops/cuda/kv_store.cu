// Writes the keys and values of new tokens into the KV cache ([n_ctx, n_head_kv, head_dim] per
// layer, rows kv_row_stride elements apart), converting f32 to the cache dtype (f32 or bf16).
// A ring cache (ring_rows > 0) keeps position p in row p % ring_rows. pos0 may come from device
// memory (pos0_dev), so one captured launch serves every decode step of a CUDA graph.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                int64_t n_tokens, int64_t kv_dim, int64_t src_stride,
                                bool cache_bf16, void* k_cache, void* v_cache, int64_t pos0,
                                const int32_t* __restrict__ pos0_dev, int64_t kv_row_stride,
                                int64_t ring_rows) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens * kv_dim) return;
  const int64_t t = i / kv_dim, e = i % kv_dim;
  if (pos0_dev != nullptr) pos0 = *pos0_dev;
  int64_t row = pos0 + t;
  if (ring_rows > 0) row %= ring_rows;
  const int64_t dst = row * kv_row_stride + e;
  store_act(k_cache, dst, k[t * src_stride + e], cache_bf16);
  store_act(v_cache, dst, v[t * src_stride + e], cache_bf16);
}

}  // namespace

cudaError_t launch_kv_store(const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
                            int64_t src_stride, bool cache_bf16, void* k_cache, void* v_cache,
                            int64_t pos0, int64_t kv_row_stride, cudaStream_t stream,
                            int64_t ring_rows, const int32_t* pos0_dev) {
  const int64_t n = n_tokens * kv_dim;
  const int threads = 256;
  if (n > 0) {
    return launch_pdl(kv_store_kernel, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                      dim3(threads), 0, stream, k, v, n_tokens, kv_dim, src_stride, cache_bf16,
                      k_cache, v_cache, pos0, pos0_dev, kv_row_stride, ring_rows);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern

namespace rinfer::cuda::kern {
namespace {

// Paged: token t's row goes to arena row slots[t]; a negative slot (a padding row) is skipped.
__global__ void kv_store_slots_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                      int64_t n_tokens, int64_t kv_dim, int64_t src_stride,
                                      bool cache_bf16, void* k_cache, void* v_cache,
                                      const int32_t* __restrict__ slots) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens * kv_dim) return;
  const int64_t t = i / kv_dim, e = i % kv_dim;
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t dst = static_cast<int64_t>(slot) * kv_dim + e;
  store_act(k_cache, dst, k[t * src_stride + e], cache_bf16);
  store_act(v_cache, dst, v[t * src_stride + e], cache_bf16);
}

}  // namespace

cudaError_t launch_kv_store_slots(const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
                                  int64_t src_stride, bool cache_bf16, void* k_cache, void* v_cache,
                                  const int32_t* slots, cudaStream_t stream) {
  const int64_t n = n_tokens * kv_dim;
  const int threads = 256;
  if (n <= 0) return cudaGetLastError();
  return launch_pdl(kv_store_slots_kernel, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                    dim3(threads), 0, stream, k, v, n_tokens, kv_dim, src_stride, cache_bf16,
                    k_cache, v_cache, slots);
}

}  // namespace rinfer::cuda::kern
