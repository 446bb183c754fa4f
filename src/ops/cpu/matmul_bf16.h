// The bf16 matmul on Intel AMX tiles: weights rounded to bf16 once at load and laid out for the
// tile multiply (PackedBf16), activations rounded to bf16 per call, products accumulated in f32
// (TDPBF16PS). The encoders' CPU recipe with `quantization: {activations: bf16}` runs its
// matrices through it; docs/cpu-kernels.md describes the layout and the error bound.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cpu/ops.h"
#include "rinfer/status.h"

namespace rinfer::cpu {

// Whether this CPU has AMX-BF16 and the OS lets the process use the tile registers (asked of
// the kernel once, arch_prctl ARCH_REQ_XCOMP_PERM).
bool amx_bf16_available();

// A weight matrix W [n_out, n_in] rounded to bf16 (round to nearest even) in the AMX layout:
// tiles of 16 output rows x 32 inputs, each stored as 16 rows of input pairs
//   tile(nb, kb)[p][c][j] = W[nb * 16 + c, kb * 32 + 2 p + j]    (p, c < 16; j < 2)
// tile(nb, kb) at element (nb * kb_count + kb) * 512; n_out and n_in zero-padded to 32.
class PackedBf16 {
 public:
  PackedBf16() = default;
  // Any dtype (each row through dequantize_row), a 2-D CPU tensor with contiguous rows.
  static Result<PackedBf16> pack(const Tensor& w);

  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  int64_t n_pad() const { return n_pad_; }
  int64_t k_pad() const { return k_pad_; }
  bool defined() const { return data_.defined(); }
  const uint16_t* data() const { return data_.data_as<uint16_t>(); }
  // The bf16 value of W[o, i] as an f32 (0 <= o < n_out, 0 <= i < n_in).
  float at(int64_t o, int64_t i) const;

 private:
  int64_t n_out_ = 0, n_in_ = 0, n_pad_ = 0, k_pad_ = 0;
  Tensor data_;  // bf16 [n_pad * k_pad] in the tile layout
};

// y[n_tokens, n_out] = bf16(x[n_tokens, n_in]) * W^T (+ bias[n_out], f32, when not null),
// products of bf16 values accumulated in f32. Reference (ctx.impl kReference): the same bf16
// values, accumulated in double. Fast: AMX tiles, the output's 32-column blocks split over
// ctx.pool; an error on a CPU without AMX-BF16 (amx_bf16_available). The relative L2 error against
// the f32 matmul is that of rounding both operands to bf16 (~3e-3 on random data); fast against
// reference ~1e-6. x and y must not overlap.
Status matmul_bf16(const OpContext& ctx, const PackedBf16& w, const float* x, int64_t n_tokens,
                   float* y, const float* bias = nullptr);

}  // namespace rinfer::cpu
