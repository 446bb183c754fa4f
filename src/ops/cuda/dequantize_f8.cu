// An f8_e4m3 weight to bf16 for the cuBLASLt GEMMs of prefill: out[r][c] = bf16(e4m3(code) *
// scale[r]) (the product in f32, rounded once), 16 codes a thread.
#include <cuda_fp8.h>

#include "ops/cuda/common.cuh"

namespace rinfer::cuda::kern {
namespace {

__global__ void dequantize_f8_kernel(const uint8_t* __restrict__ w, const float* __restrict__ scale,
                                     int64_t n_out, int64_t n_in, uint16_t* __restrict__ out,
                                     int64_t ld_out) {
  const int64_t chunks = n_in / 16;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n_out * chunks; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = (i % chunks) * 16;
    const uint4 q = *reinterpret_cast<const uint4*>(w + r * n_in + c);
    const float s = scale[r];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    uint32_t o[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float f[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        __nv_fp8_e4m3 e;
        e.__x = static_cast<__nv_fp8_storage_t>((words[k] >> (8 * j)) & 0xffu);
        f[j] = static_cast<float>(e) * s;
      }
      o[2 * k] = pack_bf16x2(f[0], f[1]);
      o[2 * k + 1] = pack_bf16x2(f[2], f[3]);
    }
    uint4* dst = reinterpret_cast<uint4*>(out + r * ld_out + c);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

}  // namespace

cudaError_t launch_dequantize_f8_bf16(const uint8_t* w, const float* scale, int64_t n_out,
                                      int64_t n_in, uint16_t* out, int64_t ld_out,
                                      cudaStream_t stream) {
  const int64_t n = n_out * (n_in / 16);
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
  dequantize_f8_kernel<<<static_cast<unsigned>(blocks > 0 ? blocks : 1), 256, 0, stream>>>(
      w, scale, n_out, n_in, out, ld_out);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
