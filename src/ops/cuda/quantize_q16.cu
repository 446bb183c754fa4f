// Activation quantization to int16 for matvec_q16 (quantize4, common.cuh): eight lanes per
// 32-element block.
// scale = absmax / 32767 (0 for an all-zero block), q = round(x / scale); per 16 elements the
// exact f32 sum of x, which the Q4 offsets (q - 8) and mins multiply.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

// Four elements a thread (n % 32 == 0, so 8-lane groups are whole blocks).
__global__ void quantize_q16_kernel(const float* __restrict__ x, int64_t n, int16_t* q,
                                    float* scale, float* sum16) {
  pdl_begin();
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool valid = i4 < n / 4;
  const float4 v = valid ? ld_f4(x + 4 * i4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  quantize4(v, 4 * i4, valid, q, scale, sum16);
}

}  // namespace

cudaError_t launch_quantize_q16(const float* x, int64_t n, int16_t* q, float* scale, float* sum16,
                                cudaStream_t stream) {
  const int threads = 256;
  if (n > 0) {
    const int64_t n4 = n / 4;
    return launch_pdl(quantize_q16_kernel,
                      dim3(static_cast<unsigned>((n4 + threads - 1) / threads)), dim3(threads), 0,
                      stream, x, n, q, scale, sum16);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
