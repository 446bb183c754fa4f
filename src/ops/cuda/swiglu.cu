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

// Four elements a thread with 32-bit index math (n % 4 == 0, in_stride % 4 == 0, 16-byte aligned
// rows, n_rows * n < 2^31): the 64-bit division per element held the scalar kernel near half the
// memory bandwidth (docs/strategies/kernels.md, "Measured choices").
__global__ void swiglu_v4_kernel(const float* gate, const float* up, uint32_t n_rows, uint32_t n4,
                                 uint32_t stride4, bool out_bf16, void* out) {
  pdl_begin();
  const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n4) return;
  const uint32_t r = idx / n4, i = idx % n4;
  const float4 g = ld_f4(gate + 4 * (static_cast<int64_t>(r) * stride4 + i));
  const float4 u = ld_f4(up + 4 * (static_cast<int64_t>(r) * stride4 + i));
  const float4 o = make_float4(g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y,
                               g.z / (1.0f + expf(-g.z)) * u.z, g.w / (1.0f + expf(-g.w)) * u.w);
  store_act4(out, idx, o, out_bf16);
}

}  // namespace

cudaError_t launch_swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n,
                          int64_t in_stride, bool out_bf16, void* out, cudaStream_t stream) {
  const int64_t total = n_rows * n;
  const int threads = 256;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (total > 0 && total < (int64_t{1} << 31) && n % 4 == 0 && in_stride % 4 == 0 &&
      aligned(gate) && aligned(up) && aligned(out)) {
    const auto n4 = static_cast<uint32_t>(n / 4);
    const int64_t t4 = total / 4;
    return launch_pdl(swiglu_v4_kernel, dim3(static_cast<unsigned>((t4 + threads - 1) / threads)),
                      dim3(threads), 0, stream, gate, up, static_cast<uint32_t>(n_rows), n4,
                      static_cast<uint32_t>(in_stride / 4), out_bf16, out);
  }
  if (total > 0) {
    return launch_pdl(swiglu_kernel, dim3(static_cast<unsigned>((total + threads - 1) / threads)),
                      dim3(threads), 0, stream, gate, up, n_rows, n, in_stride, out_bf16, out);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
