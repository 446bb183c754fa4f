// Conversions: f32 -> bf16 (round to nearest even) for GEMM inputs, bf16 -> f32 (exact; the
// paged attention's bf16 output into the decode matvecs' f32 input), and strided f32 rows -> bf16
// (an f32 KV cache into the prefill attention's bf16 workspace).
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, int64_t n, uint16_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = f32_to_bf16_bits(x[i]);
}

__global__ void bf16_to_f32_kernel(const uint16_t* __restrict__ x, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

__global__ void rows_f32_to_bf16_kernel(const float* __restrict__ src, int64_t n_rows,
                                        int64_t width, int64_t stride, uint16_t* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * width) return;
  const int64_t r = i / width, c = i % width;
  dst[i] = f32_to_bf16_bits(src[r * stride + c]);
}

}  // namespace

cudaError_t launch_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  const int threads = 256;
  if (n > 0) {
    f32_to_bf16_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
        x, n, out);
  }
  return cudaGetLastError();
}

cudaError_t launch_bf16_to_f32(const uint16_t* x, int64_t n, float* out, cudaStream_t stream) {
  const int threads = 256;
  if (n > 0) {
    bf16_to_f32_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
        x, n, out);
  }
  return cudaGetLastError();
}

cudaError_t launch_rows_f32_to_bf16(const float* src, int64_t n_rows, int64_t width, int64_t stride,
                                    uint16_t* dst, cudaStream_t stream) {
  const int64_t n = n_rows * width;
  const int threads = 256;
  if (n > 0) {
    rows_f32_to_bf16_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0,
                              stream>>>(src, n_rows, width, stride, dst);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
