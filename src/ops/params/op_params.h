// Parameter types that the CPU ops (ops/cpu) and the CUDA ops (ops/cuda) share, so that neither
// backend includes the other's headers: RoPE, pooling, activations and convolution shapes. The
// CPU headers re-export them as cpu::RopeParams, cpu::Conv2dShape, ... (their older names).
#pragma once

#include <cstdint>
#include <string_view>

#include "rinfer/status.h"

namespace rinfer {

enum class RopeMode : uint8_t {
  kNormal,  // rotate pairs (2i, 2i+1)      (llama GGUF: weights are permuted for this)
  kNeox,    // rotate pairs (i, i + n_rot/2) (NeoX, Qwen2, Gemma, HF layout)
};

struct RopeParams {
  int64_t n_rot = 0;           // dims rotated per head (<= head_dim), even; the rest pass through
  float freq_base = 10000.0f;  // theta
  float freq_scale = 1.0f;     // linear position scaling (1 / factor)
  RopeMode mode = RopeMode::kNormal;
};

enum class PoolKind : uint8_t {
  kMean,  // the mean of a sequence's rows (padding excluded)
  kCls,   // its first row (BERT's [CLS])
};

enum class Activation : uint8_t {
  kNone,
  kRelu,   // max(x, 0)
  kRelu6,  // min(max(x, 0), 6)
  kSilu,   // x / (1 + exp(-x))
};
// "none", "relu", "relu6", "silu".
std::string_view activation_name(Activation a);

struct Conv2dShape {
  int64_t n = 1;  // images
  int64_t h = 0, w = 0;
  int64_t c_in = 0, c_out = 0;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  // Zero padding on each side (asymmetric allowed: TensorFlow's "same" pads the bottom/right
  // more).
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t groups = 1;  // c_in and c_out divisible by it; groups == c_in == c_out: depthwise

  int64_t out_h() const { return (h + pad_top + pad_bottom - kh) / stride_h + 1; }
  int64_t out_w() const { return (w + pad_left + pad_right - kw) / stride_w + 1; }
  bool depthwise() const { return groups > 1 && groups == c_in && groups == c_out; }
};

// PyTorch's symmetric padding p on every side.
void set_padding(Conv2dShape& s, int64_t p);
// TensorFlow's "same" padding: out = ceil(in / stride), total padding max((out - 1) * stride + k
// - in, 0) per axis, the smaller half on the top / left.
void set_same_padding(Conv2dShape& s);
// invalid_argument naming the field: sizes < 1, channels not divisible by groups, padding < 0
// or >= the kernel, an output smaller than 1 x 1.
Status check_conv2d(const Conv2dShape& s);

}  // namespace rinfer
