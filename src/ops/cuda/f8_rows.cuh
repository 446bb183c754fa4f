// FP8 E4M3 rows, shared by the kernels that write them (quantize_f8.cu, and the decode norm in
// model_ops_kernels.cu); included by those only, to keep cuda_fp8.h out of the other kernels.
#pragma once

#include <cuda_fp8.h>

#include <cfloat>

#include "ops/cuda/common.cuh"

namespace rinfer::cuda::kern {

// The scale of a row from each thread's max |x| and non-finite flag (every thread of the block
// calls it; scratch: 32 floats of shared memory): max / 448 (1 for an all-zero row, NaN for a
// non-finite one). A code is e4m3(x * (1 / scale)), rounded to nearest even, saturated. IEEE
// division, reciprocal and product, so every kernel that quantizes a row agrees with
// core/quantize_8bit.h bit for bit.
__device__ __forceinline__ float f8_row_scale(float m, bool bad, float* scratch) {
  bad = __syncthreads_or(bad) != 0;
  m = block_max(m, scratch);
  return bad ? NAN : (m > 0.0f ? __fdiv_rn(m, 448.0f) : 1.0f);
}
__device__ __forceinline__ uint32_t f8_code(float v, float inv) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE, __NV_E4M3));
}

}  // namespace rinfer::cuda::kern
