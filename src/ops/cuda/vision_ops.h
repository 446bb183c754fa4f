// The CUDA operators of the image classifiers (CUDA builds only), with the conventions of
// ops_cuda.h: device pointers and a stream, arguments checked before anything is queued
// (kInvalidArgument), stream-ordered and allocation-free. Activations are NHWC bf16 or f16
// (`dt`; uint16_t bits), weights of the same type, biases and scales f32, sums f32. Ground truth:
// the CPU references of ops/cpu/vision_ops.h (tests/ops_cuda/vision_cuda_test.cpp compares each
// kernel with them). The ungrouped convolutions go through cuDNN (conv_cudnn.h); these are the
// kernels beside it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/params/op_params.h"  // Conv2dShape, Activation
#include "rinfer/status.h"

namespace rinfer::cuda {

// Depthwise convolution (s.depthwise(), square kernel, any padding): y = act(conv(x) + bias).
// x [n, h, w, c], w [kh, kw, c] (tap-major: cpu's [c, kh, kw, 1] transposed), bias [c] or null,
// y [n, out_h, out_w, c]. 16-byte aligned pointers when c % 8 == 0.
Status depthwise_conv2d(DType dt, const Conv2dShape& s, const uint16_t* x, const uint16_t* w,
                        const float* bias, Activation act, uint16_t* y, cudaStream_t stream);

// Max pooling of k x k windows, stride, symmetric padding (as cpu::max_pool2d).
Status max_pool2d(DType dt, const uint16_t* x, int64_t n, int64_t h, int64_t w, int64_t c,
                  int64_t k, int64_t stride, int64_t pad, uint16_t* y, cudaStream_t stream);

// out[b, c] = the mean of x[b, :, :, c] over its hw pixels (f32 sum); out [n, c].
Status global_avg_pool(DType dt, const uint16_t* x, int64_t n, int64_t hw, int64_t c, uint16_t* out,
                       cudaStream_t stream);

// In place over rows of c: y = act(y * scale[ch] + shift[ch] + residual), y f32, bf16 or f16
// (`dt`; the residual in y's type, not aliasing y); scale, shift and residual may each be null.
Status channel_epilogue(DType dt, void* y, int64_t rows, int64_t c, const float* scale,
                        const float* shift, const void* residual, Activation act,
                        cudaStream_t stream);

// f32 pixels [pixels, 3] -> bf16 or f16 [pixels, c_out] (c_out >= 3; channels 3.. zero).
Status pack_image(DType dt, const float* x, int64_t pixels, int64_t c_out, uint16_t* y,
                  cudaStream_t stream);

}  // namespace rinfer::cuda
