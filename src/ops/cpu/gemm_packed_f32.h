// The f32 GEMM of the convolutions: weights packed once at load into panels of 32 output
// channels (each k-step of a panel one contiguous run of 32 floats), multiplied in the
// outer-product form (a block of tokens x 32 outputs of f32 accumulators, each weight vector
// loaded once per k-step and each activation broadcast), with the convolution's epilogue (bias,
// residual, activation) applied to the accumulators before they are stored.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/cpu/vision_ops.h"
#include "rinfer/status.h"

namespace rinfer::cpu {

class PackedF32 {
 public:
  static constexpr int64_t kPanel = 32;
  PackedF32() = default;
  // w: [n_out, k] row-major (a convolution's OHWI weight is [c_out, kh * kw * c_in]).
  static PackedF32 pack(const float* w, int64_t n_out, int64_t k);

  int64_t n_out() const { return n_out_; }
  int64_t k() const { return k_; }
  bool defined() const { return n_out_ > 0; }
  // Panel p, k-step i: the 32 floats of outputs p*32 .. p*32+31 (zero past n_out).
  const float* panel(int64_t p) const { return data_.data() + p * k_ * kPanel; }
  // W[o, i] as packed.
  float at(int64_t o, int64_t i) const { return panel(o / kPanel)[i * kPanel + o % kPanel]; }

 private:
  int64_t n_out_ = 0, k_ = 0;
  std::vector<float> data_;
};

// y[t, o] = act(sum_i x[t * ldx + i] * W[o, i] + bias[o] + res[t * n_out + o]) for t < n_tokens,
// y with rows of n_out (ldy == n_out). Reference (ctx.impl kReference): double sums over the
// packed values. Fast: the SIMD kernel over blocks of tokens and outputs on ctx.pool. x, res and
// y must not overlap y.
Status gemm_packed_f32(const OpContext& ctx, const PackedF32& w, const float* x, int64_t ldx,
                       int64_t n_tokens, const ConvEpilogue& ep, float* y);

}  // namespace rinfer::cpu
