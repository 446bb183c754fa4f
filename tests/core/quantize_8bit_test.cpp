// The 8-bit per-row formats (core/quantize_8bit.h): the FP8 E4M3 encoder against a table-driven
// reference (the nearest of the 126 finite magnitudes, ties to the even code) over every code, the
// rounding midpoints, a dense sweep and random floats, with PyTorch's edge cases (NaN above 464,
// no infinities, subnormals); bit for bit against PyTorch's float8_e4m3fn cast on 12,000 floats
// (tests/data/fp8/e4m3_torch.json, tests/tools/gen_fp8_goldens.py on the GPU machine); then
// per-row FP8 and INT8 quantization against their error bounds.
#include "core/quantize_8bit.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "test_util.h"

namespace rinfer {
namespace {

// The magnitudes of codes 0x00 .. 0x7E, ascending (decoded by the independent decoder).
const std::vector<double>& magnitudes() {
  static const std::vector<double> m = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7E; ++c) v.push_back(f8e4m3_to_f32(static_cast<uint8_t>(c)));
    return v;
  }();
  return m;
}

// The reference encoder: nearest finite magnitude, a tie to the even code; NaN above 464.
uint8_t reference_encode(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f) || a > 464.0) return sign | 0x7F;
  const auto& m = magnitudes();
  const auto hi = std::lower_bound(m.begin(), m.end(), a);
  if (hi == m.begin()) return sign;       // a == 0
  if (hi == m.end()) return sign | 0x7E;  // (448, 464]: rounds down to 448 (464: the tie, even)
  const auto lo = hi - 1;
  const int c_lo = static_cast<int>(lo - m.begin()), c_hi = c_lo + 1;
  const double d_lo = a - *lo, d_hi = *hi - a;
  if (d_lo < d_hi) return sign | static_cast<uint8_t>(c_lo);
  if (d_hi < d_lo) return sign | static_cast<uint8_t>(c_hi);
  return sign | static_cast<uint8_t>(c_lo % 2 == 0 ? c_lo : c_hi);
}

TEST(Fp8E4M3, EveryCodeRoundTripsAndTheEdgesAreTorchs) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_f8e4m3(f), c) << std::hex << c << " " << f;
  }
  EXPECT_EQ(f32_to_f8e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_f8e4m3(464.0f), 0x7E);  // the tie between 448 and the NaN code: even
  EXPECT_EQ(f32_to_f8e4m3(std::nextafter(464.0f, 1e9f)), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3(480.0f), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3(-1e30f), 0xFF);
  EXPECT_EQ(f32_to_f8e4m3(std::numeric_limits<float>::infinity()), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3(-std::numeric_limits<float>::infinity()), 0xFF);
  EXPECT_EQ(f32_to_f8e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3(-std::nanf("")), 0xFF);
  EXPECT_EQ(f32_to_f8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest step: even 0
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 steps: even 2
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.01f, -10)), 0x01);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5 steps: 8 = 2^-6, normal
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);                 // 1 + 1/16: the tie to even 1.0
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3A);                 // 1 + 3/16: the tie to even 1.25
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.9375f, 3)), 0x58);  // carries into the exponent: 16
}

TEST(Fp8E4M3, MatchesTheReferenceEverywhere) {
  int64_t checked = 0;
  const auto check = [&](float f) {
    ASSERT_EQ(f32_to_f8e4m3(f), reference_encode(f))
        << f << " (bits " << std::hex << std::bit_cast<uint32_t>(f) << ")";
    ++checked;
  };
  // Every midpoint between neighbouring magnitudes, and the floats on either side of it.
  const auto& m = magnitudes();
  for (size_t i = 0; i + 1 < m.size(); ++i) {
    const auto mid = static_cast<float>((m[i] + m[i + 1]) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      check(f);
      check(-f);
    }
  }
  // Every float from 2^-12 to 512 with a stride of 97 ulps, and random bit patterns.
  for (uint32_t b = std::bit_cast<uint32_t>(std::ldexp(1.0f, -12));
       b < std::bit_cast<uint32_t>(512.0f); b += 97) {
    check(std::bit_cast<float>(b));
  }
  std::mt19937 rng(8);
  for (int i = 0; i < 1 << 20; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  EXPECT_GT(checked, 2800000);
}

TEST(Quantize8Bit, RowsKeepTheirErrorBounds) {
  constexpr int64_t kRows = 7, kCols = 93;  // odd sizes
  std::vector<float> x = test::random_floats(kRows * kCols, 41, -3.0f, 3.0f);
  for (int64_t i = 0; i < kCols; ++i) x[2 * kCols + i] *= 1e-3f;  // a row of small values
  for (int64_t i = 0; i < kCols; ++i) x[4 * kCols + i] = 0.0f;    // an all-zero row
  std::vector<uint8_t> q8(x.size());
  std::vector<int8_t> qi(x.size());
  std::vector<float> s8(kRows), si(kRows);
  quantize_rows_f8e4m3(x.data(), kRows, kCols, q8.data(), s8.data());
  quantize_rows_int8(x.data(), kRows, kCols, qi.data(), si.data());
  for (int64_t r = 0; r < kRows; ++r) {
    float amax = 0;
    for (int64_t i = 0; i < kCols; ++i) amax = std::max(amax, std::fabs(x[r * kCols + i]));
    if (amax == 0) {
      EXPECT_EQ(s8[r], 1.0f);
      EXPECT_EQ(si[r], 1.0f);
    } else {
      EXPECT_FLOAT_EQ(s8[r], amax / 448.0f) << r;
      EXPECT_FLOAT_EQ(si[r], amax / 127.0f) << r;
    }
    for (int64_t i = 0; i < kCols; ++i) {
      const float v = x[r * kCols + i];
      const float d8 = f8e4m3_to_f32(q8[r * kCols + i]) * s8[r];
      const float di = static_cast<float>(qi[r * kCols + i]) * si[r];
      // FP8: half a step of 3 mantissa bits (relative 2^-4), or half the subnormal step.
      EXPECT_LE(std::fabs(d8 - v), std::max(std::fabs(v) / 16.0f, std::ldexp(s8[r], -10)) * 1.0001f)
          << r << "," << i;
      // INT8: half a step of the row's scale.
      EXPECT_LE(std::fabs(di - v), si[r] / 2 * 1.0001f) << r << "," << i;
      EXPECT_LE(std::abs(int{qi[r * kCols + i]}), 127);
      if (std::fabs(v) == amax && amax > 0) {
        EXPECT_EQ(q8[r * kCols + i] & 0x7F, 0x7E) << "the row's largest value is 448";
        EXPECT_EQ(std::abs(int{qi[r * kCols + i]}), 127);
      }
    }
  }
  // A non-finite value: its row's scale is NaN, which the caller refuses.
  x[3] = std::nanf("");
  quantize_rows_int8(x.data(), 1, kCols, qi.data(), si.data());
  quantize_rows_f8e4m3(x.data(), 1, kCols, q8.data(), s8.data());
  EXPECT_TRUE(std::isnan(si[0]));
  EXPECT_TRUE(std::isnan(s8[0]));
}

TEST(Fp8E4M3, BitExactAgainstPyTorch) {
  std::ifstream f(test::test_data_path("fp8/e4m3_torch.json"));
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  const std::vector<uint32_t> bits = j["bits"];
  const std::vector<int> codes = j["codes"];
  ASSERT_EQ(bits.size(), codes.size());
  ASSERT_GE(bits.size(), 12000u);
  int wrong = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    const float x = std::bit_cast<float>(bits[i]);
    const int got = f32_to_f8e4m3(x);
    // NaN inputs: PyTorch gives 0x7F or 0xFF by the sign bit; both are E4M3's NaN.
    if (got != codes[i] && wrong++ < 10) {
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << bits[i] << "): got 0x" << got
                    << ", torch 0x" << codes[i];
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << bits.size() << " (torch " << j["torch"] << ")";
}

}  // namespace
}  // namespace rinfer
