// Host quantizers (core/quantize.h): bit-exact against gguf-py (ggml's reference algorithms,
// fixtures from tests/tools/gen_quant_fixtures.py) and against blocks computed by hand; round
// trips through the bit-exact dequantizer within per-format error bounds; threading changes
// no byte; errors name the format and the row length.
#include "core/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/quant_blocks.h"
#include "core/thread_pool.h"
#include "test_util.h"

namespace rinfer {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_f32(const std::string& path) {
  const auto b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x, int64_t rows, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * dtype_row_bytes(t, n).value());
  EXPECT_TRUE(quantize_rows(t, x.data(), out.data(), rows, n).ok());
  return out;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, int64_t rows, int64_t n) {
  std::vector<float> out(static_cast<size_t>(rows * n));
  const uint64_t rb = dtype_row_bytes(t, n).value();
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(dequantize_row(t, q.data() + r * rb, out.data() + r * n, n).ok());
  }
  return out;
}

TEST(Quantize, MatchesGgufPyBitForBit) {
  const auto x = read_f32(test::test_data_path("quant/input.f32"));
  ASSERT_EQ(x.size(), 4u * 64u);
  for (const char* name : {"f16", "bf16", "q8_0", "q4_0", "q4_1"}) {
    SCOPED_TRACE(name);
    const DType t = *dtype_from_name(name);
    const auto want = read_bytes(test::test_data_path(std::string("quant/") + name + ".bin"));
    const auto got = quantize(t, x, 4, 64);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "byte " << i;
    }
  }
}

TEST(Quantize, Q8_0BlockByHand) {
  // x_j = (j - 16) / 4: amax 4 (at j = 0), d = 4/127 = 0.031496 -> f16 0x2808 (2^-5 * 1032/1024),
  // q_j = round(x_j * 31.75).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j - 16) * 0.25f;
  BlockQ8_0 b{};
  ASSERT_TRUE(quantize_row(DType::kQ8_0, x.data(), &b, 32).ok());
  EXPECT_EQ(b.d, 0x2808);
  EXPECT_EQ(b.qs[0], -127);  // -4 * 31.75
  EXPECT_EQ(b.qs[1], -119);  // -3.75 * 31.75 = -119.06
  EXPECT_EQ(b.qs[2], -111);  // -3.5 * 31.75 = -111.125
  EXPECT_EQ(b.qs[14], -16);  // -0.5 * 31.75 = -15.875
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[18], 16);   // 0.5 * 31.75 = 15.875
  EXPECT_EQ(b.qs[31], 119);  // 3.75 * 31.75
}

TEST(Quantize, Q4_0AndQ4_1BlocksByHand) {
  // x_j = j - 16: the signed extreme is -16, d = -16 / -8 = 2 (f16 0x4000), q = trunc(x/2 + 8.5)
  // clamped to 15: q_0 = 0, q_1 = 1, q_15 = 8, q_16 = 8, q_17 = 9, q_31 = 15 (16 clamped).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j - 16);
  BlockQ4_0 b0{};
  ASSERT_TRUE(quantize_row(DType::kQ4_0, x.data(), &b0, 32).ok());
  EXPECT_EQ(b0.d, 0x4000);
  EXPECT_EQ(b0.qs[0], 0x80);   // q_0 = 0 | q_16 = 8 << 4
  EXPECT_EQ(b0.qs[1], 0x91);   // q_1 = trunc(-7.5 + 8.5) = 1 | q_17 = trunc(0.5 + 8.5) = 9 << 4
  EXPECT_EQ(b0.qs[15], 0xF8);  // q_15 = trunc(-0.5 + 8.5) = 8 | q_31 = 15 << 4
  // Q4_1: min -16, max 15, d = 31 / 15 = 2.0667 (f16 0x4022), m = -16 (f16 0xCC00);
  // q_j = trunc((x_j + 16) * (1/d) + 0.5): q_0 = 0, q_16 = trunc(16 * 0.48387 + 0.5) = 8,
  // q_31 = 15.
  BlockQ4_1 b1{};
  ASSERT_TRUE(quantize_row(DType::kQ4_1, x.data(), &b1, 32).ok());
  EXPECT_EQ(b1.d, 0x4022);
  EXPECT_EQ(b1.m, 0xCC00);
  EXPECT_EQ(b1.qs[0], 0x80);
  EXPECT_EQ(b1.qs[15] >> 4, 15);
}

TEST(Quantize, RoundTripErrorBounds) {
  const int64_t rows = 7;
  const int64_t n = 96;  // 3 blocks per row, odd row count
  const auto x = test::random_floats(static_cast<size_t>(rows * n), 42, -1.0f, 1.0f);
  struct Case {
    DType t;
    double max_rel_l2;
  };
  // Uniform data: the rms error of a uniform quantizer is step / sqrt(12), step = range / levels.
  for (const Case c : {Case{DType::kF16, 3e-4}, Case{DType::kBF16, 3e-3}, Case{DType::kQ8_0, 8e-3},
                       Case{DType::kQ4_0, 0.12}, Case{DType::kQ4_1, 0.08}}) {
    SCOPED_TRACE(std::string(dtype_name(c.t)));
    const auto q = quantize(c.t, x, rows, n);
    EXPECT_EQ(q.size(), rows * dtype_row_bytes(c.t, n).value());
    const auto y = dequantize(c.t, q, rows, n);
    const double err = test::rel_l2(y, x);
    EXPECT_LT(err, c.max_rel_l2);
    EXPECT_GT(err, 0.0);  // lossy formats: a zero error would mean nothing was quantized
    // Every element within one quantization step of its block (plus the f16 scale rounding).
    const int64_t bs = dtype_traits(c.t).block_size;
    for (int64_t b0 = 0; b0 < rows * n; b0 += std::max<int64_t>(bs, 32)) {
      float lo = x[static_cast<size_t>(b0)], hi = lo;
      for (int64_t j = b0; j < b0 + 32; ++j) {
        lo = std::min(lo, x[static_cast<size_t>(j)]);
        hi = std::max(hi, x[static_cast<size_t>(j)]);
      }
      const double amax = std::max(std::fabs(lo), std::fabs(hi));
      const double step = c.t == DType::kQ8_0   ? amax / 127
                          : c.t == DType::kQ4_0 ? amax / 8
                          : c.t == DType::kQ4_1 ? (hi - lo) / 15
                                                : amax / 128;  // f16 / bf16: far below
      for (int64_t j = b0; j < b0 + 32; ++j) {
        ASSERT_LE(std::fabs(y[static_cast<size_t>(j)] - x[static_cast<size_t>(j)]),
                  step * 1.01 + amax * 2e-3)
            << "element " << j;
      }
    }
  }
}

TEST(Quantize, ThreadedRowsAreIdentical) {
  const int64_t rows = 33;
  const int64_t n = 64;
  const auto x = test::random_floats(static_cast<size_t>(rows * n), 7, -3.0f, 2.0f);
  ThreadPool pool(3);
  for (DType t : {DType::kQ4_1, DType::kQ8_0, DType::kBF16}) {
    const auto one = quantize(t, x, rows, n);
    std::vector<uint8_t> many(one.size());
    ASSERT_TRUE(quantize_rows(t, x.data(), many.data(), rows, n, &pool).ok());
    EXPECT_EQ(one, many) << dtype_name(t);
  }
}

TEST(Quantize, ConvertWeightKeepsShapeAndValues) {
  const auto x = test::random_floats(4 * 64, 3, -0.5f, 0.5f);
  auto w = Tensor::from_f32({4, 64}, x);
  ASSERT_TRUE(w.ok());
  auto f16 = convert_weight(*w, DType::kF16);
  ASSERT_TRUE(f16.ok()) << f16.status().message();
  auto q8 = convert_weight(*f16, DType::kQ8_0);  // f16 -> f32 -> q8_0
  ASSERT_TRUE(q8.ok()) << q8.status().message();
  EXPECT_EQ(q8->dtype(), DType::kQ8_0);
  EXPECT_EQ(q8->shape(), (Dims{4, 64}));
  EXPECT_EQ(q8->nbytes(), 4u * 2u * 34u);
  auto back = q8->to_f32();
  ASSERT_TRUE(back.ok());
  std::vector<float> y(back->data_as<float>(), back->data_as<float>() + 4 * 64);
  EXPECT_LT(test::rel_l2(y, x), 8e-3);
}

TEST(Quantize, ErrorsNameFormatAndRow) {
  std::vector<float> x(48, 0.5f);
  std::vector<uint8_t> out(256);
  Status s = quantize_row(DType::kQ8_0, x.data(), out.data(), 48);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("q8_0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("48"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("32"), std::string::npos) << s.message();
  s = quantize_row(DType::kQ4_K, x.data(), out.data(), 48);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("q4_k"), std::string::npos) << s.message();
  EXPECT_FALSE(can_quantize_to(DType::kQ6_K));
  EXPECT_TRUE(can_quantize_to(DType::kQ4_1));
  auto w = Tensor::from_f32({2, 48}, std::vector<float>(96, 0.25f));
  ASSERT_TRUE(w.ok());
  auto r = convert_weight(*w, DType::kQ4_0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[2, 48]"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace rinfer
