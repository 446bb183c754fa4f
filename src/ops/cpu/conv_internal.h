// Shared by the convolution kernels: the epilogue over rows of a convolution's output.
#pragma once

#include <cstdint>

#include "ops/cpu/vision_ops.h"

namespace rinfer::cpu {

// y[r, i] = act(y[r, i] + bias[i] + res[r * n + i]), bias and res optional; f32 SIMD, one thread.
void conv_epilogue_rows(float* y, const float* bias, const float* res, int64_t n_rows, int64_t n,
                        Activation act);

// The reference epilogue of one value, in double.
double activation_ref(double z, Activation act);

}  // namespace rinfer::cpu

namespace rinfer::cpu {

// The fast depthwise convolution (s.depthwise()), epilogue included, over ctx.pool.
void depthwise_conv2d_fast(const OpContext& ctx, const Conv2dShape& s, const float* x,
                           const float* w, const ConvEpilogue& ep, float* y);

}  // namespace rinfer::cpu
