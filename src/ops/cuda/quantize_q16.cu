// Activation quantization to int16 for matvec_q16: one warp per 32-element block.
// scale = absmax / 32767 (0 for an all-zero block), q = round(x / scale); per 16 elements the
// exact f32 sum of x, which the Q4 offsets (q - 8) and mins multiply.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void quantize_q16_kernel(const float* __restrict__ x, int64_t n, int16_t* q,
                                    float* scale, float* sum16) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % kWarp;
  const float v = i < n ? x[i] : 0.0f;
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  float s = v;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);  // per half-warp
  if (i >= n) return;
  const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
  q[i] = static_cast<int16_t>(__float2int_rn(v * inv));
  if (lane == 0) scale[i / 32] = amax / 32767.0f;
  if (lane % 16 == 0) sum16[i / 16] = s;
}

}  // namespace

cudaError_t launch_quantize_q16(const float* x, int64_t n, int16_t* q, float* scale, float* sum16,
                                cudaStream_t stream) {
  const int threads = 256;
  if (n > 0) {
    return launch_pdl(quantize_q16_kernel, dim3(static_cast<unsigned>((n + threads - 1) / threads)),
                      dim3(threads), 0, stream, x, n, q, scale, sum16);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
