// The per-channel epilogue of a convolution or linear layer as its own pass (the unfused
// baseline, and the fallback where cuDNN has no fused engine): y = act(y * scale[c] + shift[c] +
// residual) in place over rows of c, f32, bf16 or f16 (the residual in y's type; scale, shift and
// residual each optional). Grid-stride over elements.
#include "ops/cuda/vision_common.cuh"
#include "ops/cuda/vision_launch.h"

namespace rinfer::cuda::kern {
namespace {

template <int kType>  // 0: f32, 1: bf16, 2: f16
__global__ void channel_epilogue_kernel(void* y, int64_t total, int c,
                                        const float* __restrict__ scale,
                                        const float* __restrict__ shift, const void* residual,
                                        int act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const int ch = static_cast<int>(i % c);
    float v = kType == 0 ? static_cast<float*>(y)[i]
                         : load1<kType == 2>(static_cast<const uint16_t*>(y) + i);
    if (scale != nullptr) v *= scale[ch];
    if (shift != nullptr) v += shift[ch];
    if (residual != nullptr) {
      v += kType == 0 ? static_cast<const float*>(residual)[i]
                      : load1<kType == 2>(static_cast<const uint16_t*>(residual) + i);
    }
    v = vision_act(v, act);
    if constexpr (kType == 0) {
      static_cast<float*>(y)[i] = v;
    } else {
      static_cast<uint16_t*>(y)[i] = bits1<kType == 2>(v);
    }
  }
}

}  // namespace

cudaError_t launch_channel_epilogue(int type, void* y, int64_t rows, int c, const float* scale,
                                    const float* shift, const void* residual, int act,
                                    cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t total = rows * c;
  const unsigned grid = grid_for(total, kThreads);
  if (type == 1) {
    channel_epilogue_kernel<1>
        <<<grid, kThreads, 0, stream>>>(y, total, c, scale, shift, residual, act);
  } else if (type == 2) {
    channel_epilogue_kernel<2>
        <<<grid, kThreads, 0, stream>>>(y, total, c, scale, shift, residual, act);
  } else {
    channel_epilogue_kernel<0>
        <<<grid, kThreads, 0, stream>>>(y, total, c, scale, shift, residual, act);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
