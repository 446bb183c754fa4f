// CPU operators of the image classifiers: 2-D convolution (regular, depthwise, pointwise, grouped)
// with a fused epilogue (bias, residual, ReLU / ReLU6 / SiLU), batch normalization (the unfolded
// baseline of the batch-norm folding strategy), activations and pooling.
//
// Layout: activations are f32 NHWC ([n, h, w, c], channels contiguous), so a pointwise
// convolution is a matmul over the n*h*w pixel rows and a depthwise one runs SIMD across the
// channels. Convolution weights are OHWI: [c_out, kh, kw, c_in / groups] (PyTorch's OIHW
// permuted once at load), so a 1x1 weight is the matmul's W [c_out, c_in] and an im2col row
// (kh, kw, ci) matches a weight row. As in ops.h every op has a scalar reference (double
// accumulation) and a fast version (Highway SIMD, the thread pool), chosen by OpContext.
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/cpu/ops.h"
#include "rinfer/status.h"

namespace rinfer::cpu {

// Shared with the CUDA ops (ops/params/op_params.h).
using rinfer::Activation;
using rinfer::activation_name;
using rinfer::check_conv2d;
using rinfer::Conv2dShape;
using rinfer::set_padding;
using rinfer::set_same_padding;

// y = act(conv(x) + bias + residual), each term optional (bias [c_out], residual shaped as y).
struct ConvEpilogue {
  const float* bias = nullptr;
  const float* residual = nullptr;  // may alias nothing but itself; not y
  Activation act = Activation::kNone;
};

// x: [n, h, w, c_in]; w: [c_out, kh, kw, c_in / groups] f32; y: [n, out_h, out_w, c_out].
// Reference: direct loops, sums in double, then the epilogue in double, rounded once.
// Fast: a 1x1 stride-1 unpadded convolution is the matmul over pixel rows; other ungrouped ones
// run im2col over chunks of output rows and the matmul; depthwise ones a SIMD kernel over the
// channels; other grouped ones the reference loops. The epilogue runs on each chunk while it is
// in cache. Relative error vs the reference ~1e-6. x and y must not overlap.
// packed (optional; ungrouped convolutions): w packed for gemm_packed_f32.h's GEMM, which the
// fast path then uses (the epilogue inside it) instead of the matmul.
class PackedF32;
Status conv2d(const OpContext& ctx, const Conv2dShape& s, const float* x, const float* w,
              const ConvEpilogue& ep, float* y, const PackedF32* packed = nullptr);

// In place on rows of n values (any layout): x = act(x + bias[i % n]) (bias may be null).
void bias_activation(const OpContext& ctx, float* x, const float* bias, int64_t n_rows, int64_t n,
                     Activation act);

// Inference batch normalization over NHWC rows of c channels, then the activation:
// x = act((x - mean) / sqrt(var + eps) * gamma + beta), in place.
void batch_norm(const OpContext& ctx, float* x, int64_t n_rows, int64_t c, const float* gamma,
                const float* beta, const float* mean, const float* var, float eps, Activation act);

// out[b, c] = mean over the h * w pixels of x[b, :, :, c]; x: [n, h, w, c], out: [n, c].
void global_avg_pool(const OpContext& ctx, const float* x, int64_t n, int64_t h, int64_t w,
                     int64_t c, float* out);

// Max pooling of k x k windows with a stride and a symmetric padding (padding never wins: the
// maximum is over the window's pixels inside the image), NHWC; out: [n, oh, ow, c] with
// oh = (h + 2 pad - k) / stride + 1. invalid_argument for pad >= k or an empty output.
Status max_pool2d(const OpContext& ctx, const float* x, int64_t n, int64_t h, int64_t w, int64_t c,
                  int64_t k, int64_t stride, int64_t pad, float* out);

}  // namespace rinfer::cpu
