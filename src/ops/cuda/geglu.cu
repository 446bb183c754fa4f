// GeGLU with the tanh GELU (Gemma): out[r, i] = gelu_tanh(gate[r, i]) * up[r, i],
// gelu_tanh(g) = 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), computed as
// g / (1 + exp(-2u)) (the same value without the cancellation of 1 + tanh(u) for g << 0; exp
// overflows to inf for very negative g, giving -0 as it should). f32 in (rows in_stride floats
// apart, so gate and up may be the halves of one fused projection), out [n_rows, n] f32 or bf16.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void geglu_tanh_kernel(const float* gate, const float* up, int64_t n_rows, int64_t n,
                                  int64_t in_stride, bool out_bf16, void* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n) return;
  const int64_t r = idx / n, i = idx % n;
  const float g = gate[r * in_stride + i];
  const float u = up[r * in_stride + i];
  constexpr float kA = 0.79788456080286535588f;  // sqrt(2 / pi)
  constexpr float kC = 0.044715f;
  const float t = kA * fmaf(kC * g * g, g, g);
  store_act(out, idx, g / (1.0f + expf(-2.0f * t)) * u, out_bf16);
}

}  // namespace

cudaError_t launch_geglu_tanh(const float* gate, const float* up, int64_t n_rows, int64_t n,
                              int64_t in_stride, bool out_bf16, void* out, cudaStream_t stream) {
  const int64_t total = n_rows * n;
  const int threads = 256;
  if (total > 0) {
    geglu_tanh_kernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0,
                        stream>>>(gate, up, n_rows, n, in_stride, out_bf16, out);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
