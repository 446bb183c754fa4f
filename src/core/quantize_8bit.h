// 8-bit formats with per-row scales, the host side of W8A8 and FP8 inference:
//
//   f32_to_f8e4m3   FP8 E4M3 ("fn": no infinities; S.1111.111 is NaN; largest finite 448) as
//                   PyTorch's float8_e4m3fn cast rounds: to nearest, ties to even; |x| above 464
//                   (half way from 448 to the next step) and NaN become NaN, the sign kept;
//                   below 2^-6 the subnormal steps of 2^-9. f8e4m3_to_f32 (core/dtype.h) inverts.
//   quantize_rows_f8e4m3  per row: scale = max|x| / 448 (1 for an all-zero row),
//                   q = f32_to_f8e4m3(x / scale)
//   quantize_rows_int8    per row: scale = max|x| / 127 (1 for an all-zero row),
//                   q = round-half-even(x / scale), in [-127, 127]
// A row is one output channel of a weight [n_out, n_in]: x = q * scale[row].
#pragma once

#include <cstdint>

namespace rinfer {

uint8_t f32_to_f8e4m3(float f);

// `rows` rows of `cols` values, row r at x + r * cols; q and scale written the same way.
// Non-finite inputs make their row's scale NaN (the caller's checks then refuse the weight).
void quantize_rows_f8e4m3(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scale);
void quantize_rows_int8(const float* x, int64_t rows, int64_t cols, int8_t* q, float* scale);

}  // namespace rinfer
