#include "core/quantize_8bit.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace rinfer {

namespace {

constexpr float kF8Max = 448.0f;
constexpr float kInt8Max = 127.0f;

// The row's scale for a format whose largest code is `top`: max|x| / top, 1 for an all-zero
// row, NaN when the row holds a non-finite value.
float row_scale(const float* x, int64_t cols, float top) {
  float m = 0.0f;
  for (int64_t i = 0; i < cols; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a)) return NAN;
    m = std::max(m, a);
  }
  return m > 0.0f ? m / top : 1.0f;
}

}  // namespace

uint8_t f32_to_f8e4m3(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t a = bits & 0x7FFFFFFFu;
  // NaN, infinities and everything that rounds past 448 (above 464 = 0x43E80000).
  if (a > 0x43E80000u) return sign | 0x7Fu;
  if (a < 0x3C800000u) {
    // Below 2^-6: subnormal steps of 2^-9, m = x * 2^9 rounded to nearest even (exact scaling;
    // std::nearbyint rounds ties to even in the default mode). m == 8 is 2^-6, code 8.
    const float m = std::nearbyint(std::bit_cast<float>(a) * 512.0f);
    return sign | static_cast<uint8_t>(m);
  }
  // Normal: biased exponent e + 7 and the mantissa's top 3 bits, rounded to nearest even on the
  // 20 bits below them (a carry moves into the exponent, as it should).
  const uint32_t exp = (a >> 23) - 127u + 7u;
  uint32_t code = (exp << 3) | ((a >> 20) & 7u);
  const uint32_t rest = a & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u) != 0)) ++code;
  return sign | static_cast<uint8_t>(code);
}

void quantize_rows_f8e4m3(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float s = scale[r] = row_scale(xr, cols, kF8Max);
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < cols; ++i) q[r * cols + i] = f32_to_f8e4m3(xr[i] * inv);
  }
}

void quantize_rows_int8(const float* x, int64_t rows, int64_t cols, int8_t* q, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float s = scale[r] = row_scale(xr, cols, kInt8Max);
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < cols; ++i) {
      const float v = std::nearbyint(xr[i] * inv);
      q[r * cols + i] =
          static_cast<int8_t>(std::isfinite(v) ? std::clamp(v, -kInt8Max, kInt8Max) : 0.0f);
    }
  }
}

}  // namespace rinfer
