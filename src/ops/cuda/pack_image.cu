// The network's input on the device: f32 pixels [pixels, 3] (NHWC, normalized) to bf16 or
// f16 [pixels, c_out], channels 3.. zero (the stem convolution's input is padded to 8 channels, the
// width cuDNN's tensor-core kernels take).
#include "ops/cuda/vision_common.cuh"
#include "ops/cuda/vision_launch.h"

namespace rinfer::cuda::kern {
namespace {

template <bool kF16>
__global__ void pack_image_kernel(const float* __restrict__ x, int64_t pixels, int c_out,
                                  uint16_t* __restrict__ y) {
  const int64_t total = pixels * c_out;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const int c = static_cast<int>(i % c_out);
    y[i] = c < 3 ? bits1<kF16>(x[(i / c_out) * 3 + c]) : uint16_t{0};
  }
}

}  // namespace

cudaError_t launch_pack_image(bool f16, const float* x, int64_t pixels, int c_out, uint16_t* y,
                              cudaStream_t stream) {
  constexpr int kThreads = 256;
  const unsigned g = grid_for(pixels * c_out, kThreads);
  if (f16) {
    pack_image_kernel<true><<<g, kThreads, 0, stream>>>(x, pixels, c_out, y);
  } else {
    pack_image_kernel<false><<<g, kThreads, 0, stream>>>(x, pixels, c_out, y);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
