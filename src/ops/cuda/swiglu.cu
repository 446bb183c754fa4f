// SwiGLU: out[r, i] = silu(gate[r, i]) * up[r, i], silu(g) = g / (1 + exp(-g)); f32 in (rows
// in_stride floats apart, so gate and up may be the halves of one fused projection), out
// [n_rows, n] f32 or bf16. exp(-g) overflows to inf for g < -88, giving -0 as it should.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n_rows, int64_t n,
                              int64_t in_stride, bool out_bf16, void* out) {
  pdl_begin();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n) return;
  const int64_t r = idx / n, i = idx % n;
  const float g = gate[r * in_stride + i];
  const float u = up[r * in_stride + i];
  store_act(out, idx, g / (1.0f + expf(-g)) * u, out_bf16);
}

}  // namespace

cudaError_t launch_swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n,
                          int64_t in_stride, bool out_bf16, void* out, cudaStream_t stream) {
  const int64_t total = n_rows * n;
  const int threads = 256;
  if (total > 0) {
    return launch_pdl(swiglu_kernel, dim3(static_cast<unsigned>((total + threads - 1) / threads)),
                      dim3(threads), 0, stream, gate, up, n_rows, n, in_stride, out_bf16, out);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
