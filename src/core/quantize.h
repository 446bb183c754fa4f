// Host quantizers: f32 rows -> F16, BF16, Q8_0, Q4_0, Q4_1 (the formats `rinfer quantize` and
// strategies.quantization.weights write). Each is ggml's reference algorithm
// (quantize_row_*_ref, also gguf-py's numpy quantize), so the bytes match what llama.cpp's
// tools and gguf-py produce for the same input:
//
//   f16 / bf16  round to nearest even (bf16: NaN forced quiet, as ggml_compute_fp32_to_bf16)
//   q8_0        d = max|x| / 127,               q = round(x / d)             (half away from 0)
//   q4_0        d = (signed x of max |x|) / -8,  q = min(15, trunc(x / d + 8.5))
//   q4_1        d = (max - min) / 15, m = min,   q = min(15, trunc((x - m) / d + 0.5))
// ("x / d" is x * (1 / d) in f32; d is stored as f16 after the quants are computed from the
// f32 d, as ggml does.) Block layouts: core/quant_blocks.h. dequantize_row() inverts them.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "rinfer/status.h"

namespace rinfer {

class ThreadPool;

// True for the formats quantize_row / quantize_rows can write.
bool can_quantize_to(DType t);

// Quantizes one row of `n` f32 values into `dst` (dtype_row_bytes(t, n) bytes). `n` must be a
// multiple of t's block size. Errors name the dtype and the row length.
Status quantize_row(DType t, const float* src, void* dst, int64_t n);

// `rows` rows of `n_per_row` values, row r at src + r * n_per_row, written back to back. Spread
// over `pool` when given (rows are independent).
Status quantize_rows(DType t, const float* src, void* dst, int64_t rows, int64_t n_per_row,
                     ThreadPool* pool = nullptr);

// A weight in another format: dequantizes (or converts) `w` to f32 and quantizes each row
// (innermost dim) to `to`. Used by the model loader for strategies.quantization.weights and by
// `rinfer quantize`. Returns a new contiguous CPU tensor of the same shape; `w` unchanged.
// Errors: an innermost dim that is not a multiple of the block size, a dtype that cannot be
// written, a non-CPU tensor.
Result<Tensor> convert_weight(const Tensor& w, DType to, ThreadPool* pool = nullptr);

}  // namespace rinfer
