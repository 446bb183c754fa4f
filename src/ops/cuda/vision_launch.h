// The kernel launchers of the vision ops (internal; vision_ops.h is the API). Each launches
// without checking and returns cudaGetLastError(). Free of the host headers: nvcc includes it.
// Tensors are NHWC bf16 or f16 (uint16_t bits); `act` is an Activation (ops/params) as an int.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rinfer::cuda::kern {

struct DwConvArgs {
  int n, h, w, c;    // input
  int oh, ow;        // output
  int k, stride;     // square kernel
  int pad_t, pad_l;  // the padding before the first row and column
  int act;
  bool f16;  // elements f16, else bf16
};
cudaError_t launch_depthwise_conv(const DwConvArgs& a, const uint16_t* x, const uint16_t* w,
                                  const float* bias, uint16_t* y, cudaStream_t stream);

struct PoolArgs {
  int n, h, w, c, oh, ow, k, stride, pad;
  bool f16;
};
cudaError_t launch_max_pool(const PoolArgs& a, const uint16_t* x, uint16_t* y, cudaStream_t stream);
cudaError_t launch_global_avg_pool(bool f16, int n, int hw, int c, const uint16_t* x, uint16_t* y,
                                   cudaStream_t stream);

// type: 0 f32, 1 bf16, 2 f16.
cudaError_t launch_channel_epilogue(int type, void* y, int64_t rows, int c, const float* scale,
                                    const float* shift, const void* residual, int act,
                                    cudaStream_t stream);

cudaError_t launch_pack_image(bool f16, const float* x, int64_t pixels, int c_out, uint16_t* y,
                              cudaStream_t stream);

}  // namespace rinfer::cuda::kern
