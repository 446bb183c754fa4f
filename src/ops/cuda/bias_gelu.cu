// The FFN activation of BERT after its first GEMM: out = gelu(x + bias), the exact GELU
// 0.5 z erfc(-z / sqrt(2)), on pairs of elements (bf16 pairs are one 32-bit word). Grid-stride.
#include "ops/cuda/common.cuh"
#include "ops/cuda/encoder_launch.h"

namespace rinfer::cuda::kern {
namespace {

__device__ __forceinline__ float gelu_erf(float z) {
  return 0.5f * z * erfcf(-z * 0.70710678118654752f);
}

__global__ void bias_gelu_kernel(const void* x, bool x_bf16, const float* __restrict__ bias,
                                 int64_t n_pairs, int64_t n, uint16_t* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < n_pairs;
       p += stride) {
    float a, b;
    if (x_bf16) {
      const uint32_t w = static_cast<const uint32_t*>(x)[p];
      a = bf16_lo(w);
      b = bf16_hi(w);
    } else {
      const float2 f = static_cast<const float2*>(x)[p];
      a = f.x;
      b = f.y;
    }
    if (bias != nullptr) {
      const int64_t col = (2 * p) % n;
      a += bias[col];
      b += bias[col + 1];
    }
    reinterpret_cast<uint32_t*>(out)[p] = pack_bf16x2(gelu_erf(a), gelu_erf(b));
  }
}

}  // namespace

cudaError_t launch_bias_gelu_erf(const void* x, bool x_bf16, const float* bias, int64_t n_rows,
                                 int64_t n, uint16_t* out, cudaStream_t stream) {
  const int64_t n_pairs = n_rows * n / 2;
  constexpr int kThreads = 256;
  const int64_t want = (n_pairs + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(want < 65536 ? want : 65536);
  bias_gelu_kernel<<<blocks, kThreads, 0, stream>>>(x, x_bf16, bias, n_pairs, n, out);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
