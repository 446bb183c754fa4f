// Rotary position embedding, in place on f32 [n_tokens, n_heads, head_dim] (token rows
// token_stride floats apart, so q and k can be rotated inside a fused qkv buffer).
// One thread per (token, pair): the angle pos * freq_scale * base^(-2i/n_rot) and its cos/sin
// are computed in double (long contexts keep full precision), then applied to every head.
// Normal mode rotates (2i, 2i+1); NeoX mode (i, i + n_rot/2). Dims past n_rot pass through.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__global__ void rope_kernel(float* x, const int32_t* __restrict__ positions, RopeArgs a) {
  const int64_t half = a.n_rot / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.n_tokens * half) return;
  const int64_t t = idx / half, i = idx % half;
  const double inv_freq =
      pow(a.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(a.n_rot));
  const double theta = static_cast<double>(positions[t]) * a.freq_scale * inv_freq;
  double sd, cd;
  sincos(theta, &sd, &cd);
  const float s = static_cast<float>(sd), c = static_cast<float>(cd);
  const int64_t i0 = a.neox ? i : 2 * i;
  const int64_t i1 = a.neox ? i + half : 2 * i + 1;
  float* xt = x + t * a.token_stride;  // [n_heads, head_dim]
  for (int64_t h = 0; h < a.n_heads; ++h) {
    float* xh = xt + h * a.head_dim;
    const float x0 = xh[i0], x1 = xh[i1];
    xh[i0] = x0 * c - x1 * s;
    xh[i1] = x0 * s + x1 * c;
  }
}

}  // namespace

cudaError_t launch_rope(float* x, const int32_t* positions, const RopeArgs& a,
                        cudaStream_t stream) {
  const int64_t n = a.n_tokens * (a.n_rot / 2);
  const int threads = 128;
  if (n > 0) {
    rope_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
        x, positions, a);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
