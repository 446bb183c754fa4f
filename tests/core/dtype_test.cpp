// Bit-exact tests of the scalar conversions and dequantize_row (src/core/dequantize.cpp).
//
// 1. Hand-built blocks for every GGUF block format: the test chooses logical values (scales,
//    mins, quants), packs them into bytes following ggml's quantize_row_*_ref layout, and
//    computes the expected floats element by element from the format definition.
// 2. Fixtures made by gguf-py (tests/tools/gen_dequant_fixtures.py), an independent
//    implementation, compared bit for bit.
// 3. f16 / bf16 / f8 conversions: exhaustive where the domain is small.
// 4. Error statuses.
//
// All float comparisons are on bit patterns, so the sign of zero counts. Expected values follow
// ggml's operation order (e.g. (d * sc) * q - dmin * m), one rounding per operation.

#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace rinfer {
namespace {

using Bytes = std::vector<uint8_t>;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Independent f16 decoder: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals m * 2^-24. Exact.
float ref_f16(uint16_t h) {
  const int s = h >> 15;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v = 0;
  if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(static_cast<double>(1024 + m), e - 25);
  }
  return static_cast<float>(s != 0 ? -v : v);
}

// Compares bit patterns; reports the first few differing elements.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 8; ++i) {
    if (bits(got[i]) != bits(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " (0x" << std::hex
                    << bits(got[i]) << ") want " << want[i] << " (0x" << bits(want[i]) << ")"
                    << std::dec;
      ++reported;
    }
  }
}

std::vector<float> dequant(DType t, const Bytes& src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  Status s = dequantize_row(t, src.data(), out.data(), n);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

void put_u16(Bytes& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xFF);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}

void put_u32(Bytes& b, size_t off, uint32_t v) {
  for (int k = 0; k < 4; ++k) b[off + k] = static_cast<uint8_t>(v >> (8 * k));
}

// Scale patterns: a negative scale, an f16 subnormal (7 * 2^-24), an odd mantissa, ...
constexpr uint16_t kNegScale = 0xB500;   // -0.3125
constexpr uint16_t kSubnormal = 0x0007;  // 7 * 2^-24
constexpr uint16_t kOddScale = 0x3C01;   // 1 + 2^-10
constexpr uint16_t kNegOddMin = 0xC0A3;  // -2.318359375
constexpr uint16_t kPosOddMin = 0x3555;  // 0.333251953125

// -------------------------------------------------------------------------------------------
// Hand-built blocks: 32-element formats
// -------------------------------------------------------------------------------------------

// 32-element formats: element j in the low nibble of byte j, element j + 16 in the high one.
void pack_nibbles(Bytes& bytes, size_t off, const int* q) {
  for (int j = 0; j < 16; ++j) {
    bytes[off + j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
  }
}

TEST(DequantHandBuilt, Q4_0) {
  const uint16_t d_bits[2] = {kNegScale, kSubnormal};
  Bytes bytes(2 * 18, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int e = 0; e < 32; ++e) q[e] = b == 0 ? e % 16 : 15 - (e * 5) % 16;  // 0..15
    const size_t base = 18 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    pack_nibbles(bytes, base + 2, q);
    const float d = ref_f16(d_bits[b]);
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e] - 8) * d);
  }
  expect_same_bits(dequant(DType::kQ4_0, bytes, 64), want, "q4_0");
}

TEST(DequantHandBuilt, Q4_1) {
  const uint16_t d_bits[2] = {kOddScale, kSubnormal};
  const uint16_t m_bits[2] = {kNegOddMin, kPosOddMin};
  Bytes bytes(2 * 20, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int e = 0; e < 32; ++e) q[e] = b == 0 ? (e * 3) % 16 : 15 - e % 16;
    const size_t base = 20 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    put_u16(bytes, base + 2, m_bits[b]);
    pack_nibbles(bytes, base + 4, q);
    const float d = ref_f16(d_bits[b]);
    const float m = ref_f16(m_bits[b]);
    for (int e = 0; e < 32; ++e) {
      const float dq = static_cast<float>(q[e]) * d;
      want.push_back(dq + m);
    }
  }
  expect_same_bits(dequant(DType::kQ4_1, bytes, 64), want, "q4_1");
}

// Q5_0 / Q5_1 pack: low nibbles as Q4_0, bit 4 of element e in bit e of the uint32 qh.
void pack_q5(Bytes& bytes, size_t qh_off, size_t qs_off, const int* q) {
  uint32_t qh = 0;
  for (int e = 0; e < 32; ++e) qh |= static_cast<uint32_t>((q[e] >> 4) & 1) << e;
  put_u32(bytes, qh_off, qh);
  pack_nibbles(bytes, qs_off, q);
}

TEST(DequantHandBuilt, Q5_0) {
  const uint16_t d_bits[2] = {kNegScale, kSubnormal};
  Bytes bytes(2 * 22, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int e = 0; e < 32; ++e) q[e] = (e * 7 + 3 + 11 * b) % 32;  // a permutation of 0..31
    const size_t base = 22 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    pack_q5(bytes, base + 2, base + 6, q);
    const float d = ref_f16(d_bits[b]);
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e] - 16) * d);
  }
  expect_same_bits(dequant(DType::kQ5_0, bytes, 64), want, "q5_0");
}

TEST(DequantHandBuilt, Q5_1) {
  const uint16_t d_bits[2] = {kSubnormal, kNegScale};
  const uint16_t m_bits[2] = {kPosOddMin, kNegOddMin};
  Bytes bytes(2 * 24, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int e = 0; e < 32; ++e) q[e] = (e * 13 + 5 * b) % 32;
    const size_t base = 24 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    put_u16(bytes, base + 2, m_bits[b]);
    pack_q5(bytes, base + 4, base + 8, q);
    const float d = ref_f16(d_bits[b]);
    const float m = ref_f16(m_bits[b]);
    for (int e = 0; e < 32; ++e) {
      const float dq = static_cast<float>(q[e]) * d;
      want.push_back(dq + m);
    }
  }
  expect_same_bits(dequant(DType::kQ5_1, bytes, 64), want, "q5_1");
}

TEST(DequantHandBuilt, Q8_0) {
  const uint16_t d_bits[2] = {kNegScale, kOddScale};
  Bytes bytes(2 * 34, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int e = 0; e < 32; ++e) q[e] = (e * 37 + 101 * b) % 256 - 128;
    q[0] = -128;
    q[1] = 127;
    q[2] = 0;
    q[3] = -1;
    const size_t base = 34 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    for (int e = 0; e < 32; ++e) bytes[base + 2 + e] = static_cast<uint8_t>(q[e] & 0xFF);
    const float d = ref_f16(d_bits[b]);
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e]) * d);
  }
  expect_same_bits(dequant(DType::kQ8_0, bytes, 64), want, "q8_0");
}

// -------------------------------------------------------------------------------------------
// Hand-built blocks: k-quants (256 elements)
// -------------------------------------------------------------------------------------------

// 2-bit planes of Q2_K / Q3_K: element e lives in byte 32 * (e / 128) + e % 32 of qs, at bit
// 2 * ((e % 128) / 32).
void pack_2bit_planes(Bytes& bytes, size_t qs_off, const int* low2) {
  for (int e = 0; e < 256; ++e) {
    const size_t byte = qs_off + 32 * static_cast<size_t>(e / 128) + static_cast<size_t>(e % 32);
    bytes[byte] = static_cast<uint8_t>(bytes[byte] | ((low2[e] & 3) << (2 * ((e % 128) / 32))));
  }
}

TEST(DequantHandBuilt, Q2_K) {
  const uint16_t d_bits[2] = {kNegScale, kSubnormal};
  const uint16_t dmin_bits[2] = {kOddScale, kNegOddMin};
  Bytes bytes(2 * 84, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int sc[16];
    int mn[16];
    int q[256];
    for (int s = 0; s < 16; ++s) {
      sc[s] = b == 0 ? s : (s * 7) % 16;  // 0..15
      mn[s] = 15 - sc[s];
    }
    for (int e = 0; e < 256; ++e) q[e] = (e * 3 + e / 7 + b) % 4;  // 0..3
    const size_t base = 84 * static_cast<size_t>(b);
    for (int s = 0; s < 16; ++s) bytes[base + s] = static_cast<uint8_t>(sc[s] | (mn[s] << 4));
    pack_2bit_planes(bytes, base + 16, q);
    put_u16(bytes, base + 80, d_bits[b]);
    put_u16(bytes, base + 82, dmin_bits[b]);
    const float d = ref_f16(d_bits[b]);
    const float dmin = ref_f16(dmin_bits[b]);
    for (int e = 0; e < 256; ++e) {
      const float dl = d * static_cast<float>(sc[e / 16]);
      const float ml = dmin * static_cast<float>(mn[e / 16]);
      const float dq = dl * static_cast<float>(q[e]);
      want.push_back(dq - ml);
    }
  }
  expect_same_bits(dequant(DType::kQ2_K, bytes, 512), want, "q2_k");
}

TEST(DequantHandBuilt, Q3_K) {
  const uint16_t d_bits[2] = {kNegScale, kSubnormal};
  // Stored 6-bit scales (the effective scale is stored - 32): extremes 0 and 63 included.
  const int stored[2][16] = {{0, 63, 32, 31, 1, 62, 17, 48, 5, 40, 60, 3, 33, 20, 7, 55},
                             {63, 0, 16, 47, 2, 61, 32, 30, 12, 51, 44, 19, 9, 58, 26, 37}};
  Bytes bytes(2 * 110, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[256];  // -4..3
    for (int e = 0; e < 256; ++e) q[e] = (e * 5 + e / 9 + 3 * b) % 8 - 4;
    const size_t base = 110 * static_cast<size_t>(b);
    // hmask: bit e / 32 of byte e % 32 is set when the quant is >= 0 (no -4 offset).
    int low2[256];
    for (int e = 0; e < 256; ++e) {
      const int biased = q[e] + 4;  // 0..7
      low2[e] = biased & 3;
      if (biased >= 4) {
        bytes[base + e % 32] = static_cast<uint8_t>(bytes[base + e % 32] | (1 << (e / 32)));
      }
    }
    pack_2bit_planes(bytes, base + 32, low2);
    // Scales: low nibble of scale j in byte j (j < 8) or the high nibble of byte j - 8; the top
    // two bits in byte 8 + j % 4 at bit 2 * (j / 4).
    const size_t sc_off = base + 96;
    for (int j = 0; j < 16; ++j) {
      const int l = stored[b][j];
      if (j < 8) {
        bytes[sc_off + j] = static_cast<uint8_t>(bytes[sc_off + j] | (l & 0xF));
      } else {
        bytes[sc_off + j - 8] = static_cast<uint8_t>(bytes[sc_off + j - 8] | ((l & 0xF) << 4));
      }
      bytes[sc_off + 8 + j % 4] =
          static_cast<uint8_t>(bytes[sc_off + 8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
    }
    put_u16(bytes, base + 108, d_bits[b]);
    const float d = ref_f16(d_bits[b]);
    for (int e = 0; e < 256; ++e) {
      const float dl = d * static_cast<float>(stored[b][e / 16] - 32);
      want.push_back(dl * static_cast<float>(q[e]));
    }
  }
  expect_same_bits(dequant(DType::kQ3_K, bytes, 512), want, "q3_k");
}

// Q4_K / Q5_K 12-byte scales: 8 6-bit scales and mins, as quantize_row_q4_K_ref packs them.
void pack_k4_scales(Bytes& bytes, size_t off, const int* sc, const int* mn) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      bytes[off + j] = static_cast<uint8_t>(bytes[off + j] | sc[j]);
      bytes[off + j + 4] = static_cast<uint8_t>(bytes[off + j + 4] | mn[j]);
    } else {
      bytes[off + j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      bytes[off + j - 4] = static_cast<uint8_t>(bytes[off + j - 4] | ((sc[j] >> 4) << 6));
      bytes[off + j] = static_cast<uint8_t>(bytes[off + j] | ((mn[j] >> 4) << 6));
    }
  }
}

constexpr int kK4Scales[2][8] = {{0, 63, 1, 62, 33, 31, 47, 16}, {63, 0, 48, 15, 5, 58, 32, 21}};
constexpr int kK4Mins[2][8] = {{63, 0, 5, 58, 32, 15, 1, 44}, {0, 63, 17, 40, 63, 0, 27, 36}};

// Q4_K / Q5_K values of block b: (d * sc) * q - dmin * m with sub-blocks of 32.
void append_k4_expected(std::vector<float>& want, float d, float dmin, int b, const int* q) {
  for (int e = 0; e < 256; ++e) {
    const float d1 = d * static_cast<float>(kK4Scales[b][e / 32]);
    const float m1 = dmin * static_cast<float>(kK4Mins[b][e / 32]);
    const float dq = d1 * static_cast<float>(q[e]);
    want.push_back(dq - m1);
  }
}

TEST(DequantHandBuilt, Q4_K) {
  const uint16_t d_bits[2] = {kOddScale, kSubnormal};
  const uint16_t dmin_bits[2] = {kNegScale, kPosOddMin};
  Bytes bytes(2 * 144, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[256];  // 0..15
    for (int e = 0; e < 256; ++e) q[e] = (e * 11 + e / 16 + b) % 16;
    const size_t base = 144 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    put_u16(bytes, base + 2, dmin_bits[b]);
    pack_k4_scales(bytes, base + 4, kK4Scales[b], kK4Mins[b]);
    // Each 64 elements: 32 bytes, the first 32 elements in the low nibbles.
    for (int e = 0; e < 256; ++e) {
      const size_t byte = base + 16 + 32 * static_cast<size_t>(e / 64) + e % 32;
      const int shift = (e % 64) < 32 ? 0 : 4;
      bytes[byte] = static_cast<uint8_t>(bytes[byte] | (q[e] << shift));
    }
    append_k4_expected(want, ref_f16(d_bits[b]), ref_f16(dmin_bits[b]), b, q);
  }
  expect_same_bits(dequant(DType::kQ4_K, bytes, 512), want, "q4_k");
}

TEST(DequantHandBuilt, Q5_K) {
  const uint16_t d_bits[2] = {kNegScale, kOddScale};
  const uint16_t dmin_bits[2] = {kSubnormal, kNegOddMin};
  Bytes bytes(2 * 176, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[256];  // 0..31
    for (int e = 0; e < 256; ++e) q[e] = (e * 13 + e / 32 + 7 * b) % 32;
    const size_t base = 176 * static_cast<size_t>(b);
    put_u16(bytes, base, d_bits[b]);
    put_u16(bytes, base + 2, dmin_bits[b]);
    pack_k4_scales(bytes, base + 4, kK4Scales[b], kK4Mins[b]);
    for (int e = 0; e < 256; ++e) {
      // Bit 4: bit e / 32 of qh[e % 32]. Low 4 bits: as Q4_K.
      const size_t hbyte = base + 16 + e % 32;
      bytes[hbyte] = static_cast<uint8_t>(bytes[hbyte] | (((q[e] >> 4) & 1) << (e / 32)));
      const size_t lbyte = base + 48 + 32 * static_cast<size_t>(e / 64) + e % 32;
      const int shift = (e % 64) < 32 ? 0 : 4;
      bytes[lbyte] = static_cast<uint8_t>(bytes[lbyte] | ((q[e] & 0xF) << shift));
    }
    append_k4_expected(want, ref_f16(d_bits[b]), ref_f16(dmin_bits[b]), b, q);
  }
  expect_same_bits(dequant(DType::kQ5_K, bytes, 512), want, "q5_k");
}

TEST(DequantHandBuilt, Q6_K) {
  const uint16_t d_bits[2] = {kNegScale, kSubnormal};
  const int scales[2][16] = {{-128, 127, 0, -1, 1, 64, -64, 100, -100, 3, -3, 77, -77, 50, -5, 9},
                             {127, -128, 2, -2, 31, -31, 0, 1, -1, 90, -90, 11, -11, 66, 6, -6}};
  Bytes bytes(2 * 210, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[256];  // -32..31
    for (int e = 0; e < 256; ++e) q[e] = (e * 19 + e / 64 + 5 * b) % 64 - 32;
    const size_t base = 210 * static_cast<size_t>(b);
    // Per 128 elements (chunk c), with L = q + 32 and l = 0..31:
    //   ql[64c + l]      = L[l] low | L[l + 64] low << 4
    //   ql[64c + l + 32] = L[l + 32] low | L[l + 96] low << 4
    //   qh[32c + l]      = 2-bit highs of L[l], L[l + 32], L[l + 64], L[l + 96] at bits 0,2,4,6
    for (int e = 0; e < 256; ++e) {
      const int biased = q[e] + 32;
      const int c = e / 128;
      const int w = e % 128;
      const int l = w % 32;
      const int quarter = w / 32;  // 0..3
      const size_t lbyte = base + 64 * static_cast<size_t>(c) + l + (quarter % 2 == 1 ? 32 : 0);
      const int lshift = quarter >= 2 ? 4 : 0;
      bytes[lbyte] = static_cast<uint8_t>(bytes[lbyte] | ((biased & 0xF) << lshift));
      const size_t hbyte = base + 128 + 32 * static_cast<size_t>(c) + l;
      bytes[hbyte] = static_cast<uint8_t>(bytes[hbyte] | ((biased >> 4) << (2 * quarter)));
    }
    for (int s = 0; s < 16; ++s) bytes[base + 192 + s] = static_cast<uint8_t>(scales[b][s] & 0xFF);
    put_u16(bytes, base + 208, d_bits[b]);
    const float d = ref_f16(d_bits[b]);
    for (int e = 0; e < 256; ++e) {
      const float ds = d * static_cast<float>(scales[b][e / 16]);
      want.push_back(ds * static_cast<float>(q[e]));
    }
  }
  expect_same_bits(dequant(DType::kQ6_K, bytes, 512), want, "q6_k");
}

TEST(DequantHandBuilt, Q8_K) {
  // f32 scales: a negative one with an odd mantissa, and an f32 subnormal.
  const float d_vals[2] = {-0.0123f, std::bit_cast<float>(uint32_t{0x0000B00F})};
  Bytes bytes(2 * 292, 0);
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    int q[256];
    for (int e = 0; e < 256; ++e) q[e] = (e * 45 + 17 * b) % 256 - 128;
    q[5] = -128;
    q[6] = 127;
    const size_t base = 292 * static_cast<size_t>(b);
    put_u32(bytes, base, bits(d_vals[b]));
    for (int e = 0; e < 256; ++e) bytes[base + 4 + e] = static_cast<uint8_t>(q[e] & 0xFF);
    for (int k = 0; k < 32; ++k) bytes[base + 260 + k] = static_cast<uint8_t>(0xA5 + k);  // bsums
    for (int e = 0; e < 256; ++e) want.push_back(d_vals[b] * static_cast<float>(q[e]));
  }
  expect_same_bits(dequant(DType::kQ8_K, bytes, 512), want, "q8_k");
}

// -------------------------------------------------------------------------------------------
// gguf-py fixtures
// -------------------------------------------------------------------------------------------

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class DequantFixture : public ::testing::TestWithParam<DType> {};

TEST_P(DequantFixture, MatchesGgufPyBitExactly) {
  const DType t = GetParam();
  const std::string name(dtype_name(t));
  const std::string dir = test::test_data_path("dequant/");
  const Bytes blocks = read_file(dir + name + ".bin");
  const Bytes expected_bytes = read_file(dir + name + ".f32");
  ASSERT_FALSE(blocks.empty()) << "missing " << dir << name
                               << ".bin (run tests/tools/gen_dequant_fixtures.py)";
  const DTypeTraits& tr = dtype_traits(t);
  ASSERT_EQ(blocks.size() % static_cast<size_t>(tr.block_bytes), 0u);
  const auto n = static_cast<int64_t>(blocks.size()) / tr.block_bytes * tr.block_size;
  ASSERT_EQ(expected_bytes.size(), static_cast<size_t>(n) * sizeof(float));
  std::vector<float> want(static_cast<size_t>(n));
  std::memcpy(want.data(), expected_bytes.data(), expected_bytes.size());
  expect_same_bits(dequant(t, blocks, n), want, name);

  // The same bytes at an odd address: blocks are read with memcpy, never by a cast.
  Bytes shifted(blocks.size() + 1);
  std::memcpy(shifted.data() + 1, blocks.data(), blocks.size());
  std::vector<float> out(static_cast<size_t>(n));
  ASSERT_TRUE(dequantize_row(t, shifted.data() + 1, out.data(), n).ok());
  expect_same_bits(out, want, name + " (unaligned)");
}

INSTANTIATE_TEST_SUITE_P(AllBlockFormats, DequantFixture,
                         ::testing::Values(DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                                           DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K, DType::kQ8_K),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(DequantFixtureFiles, CoverEveryBlockFormat) {
  int quantized = 0;
  for (int i = 0; i < kDTypeCount; ++i) quantized += is_quantized(static_cast<DType>(i)) ? 1 : 0;
  EXPECT_EQ(quantized, 11) << "a new block format needs a fixture and a hand-built test";
}

// -------------------------------------------------------------------------------------------
// f16
// -------------------------------------------------------------------------------------------

bool f16_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }

TEST(F16, DecodesEveryPatternExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = f16_to_f32(h);
    if (f16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
    } else {
      ASSERT_EQ(bits(f), bits(ref_f16(h))) << std::hex << i;
    }
  }
}

TEST(F16, RoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = f32_to_f16(f16_to_f32(h));
    if (f16_is_nan(h)) {
      ASSERT_TRUE(f16_is_nan(back)) << std::hex << i << " -> " << back;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

// Value used for rounding: 0x7C00 stands for 2^16, the first value past the largest finite.
double f16_rounding_value(uint16_t h) {
  return (h & 0x7FFF) == 0x7C00 ? std::copysign(65536.0, (h & 0x8000) ? -1.0 : 1.0)
                                : static_cast<double>(ref_f16(h));
}

// Every gap between adjacent f16 values (both signs, subnormals, the overflow to inf): the exact
// midpoint ties to the even neighbour, one f32 ulp either side goes to the nearer one.
TEST(F16, RoundsToNearestEvenInEveryGap) {
  for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
    for (uint32_t m = 0; m < 0x7C00; ++m) {
      const auto lo = static_cast<uint16_t>(sign | m);
      const auto hi = static_cast<uint16_t>(sign | (m + 1));
      const auto mid = static_cast<float>((f16_rounding_value(lo) + f16_rounding_value(hi)) / 2);
      ASSERT_EQ((static_cast<double>(mid) * 2), f16_rounding_value(lo) + f16_rounding_value(hi));
      const uint16_t even = (lo & 1) == 0 ? lo : hi;
      ASSERT_EQ(f32_to_f16(mid), even) << std::hex << m;
      const float toward_hi = std::nextafter(mid, sign ? -INFINITY : INFINITY);
      const float toward_lo = std::nextafter(mid, sign ? INFINITY : -INFINITY);
      ASSERT_EQ(f32_to_f16(toward_hi), hi) << std::hex << m;
      ASSERT_EQ(f32_to_f16(toward_lo), lo) << std::hex << m;
    }
  }
}

// Random floats against a brute-force reference: the nearest f16, ties to even.
uint16_t ref_f32_to_f16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  uint32_t lo = 0;  // largest magnitude pattern with value <= a (binary search, values monotonic)
  uint32_t hi = 0x7C00;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (f16_rounding_value(static_cast<uint16_t>(mid)) <= a) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (lo == 0x7C00) return static_cast<uint16_t>(sign | 0x7C00);
  const double below = a - f16_rounding_value(static_cast<uint16_t>(lo));
  const double above = f16_rounding_value(static_cast<uint16_t>(lo + 1)) - a;
  const uint32_t pick = below < above ? lo : above < below ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return static_cast<uint16_t>(sign | pick);
}

TEST(F16, MatchesBruteForceOnRandomFloats) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) {
    // Exponents from well below the subnormal range to past the overflow threshold.
    const auto r1 = static_cast<uint32_t>(rng());
    const auto r2 = static_cast<uint32_t>(rng());
    const uint32_t exp = 127 - 30 + r1 % 50;
    const uint32_t x = (r2 & 0x80000000u) | (exp << 23) | (r2 & 0x7FFFFFu);
    const float f = std::bit_cast<float>(x);
    ASSERT_EQ(f32_to_f16(f), ref_f32_to_f16(f)) << std::hex << x;
  }
}

TEST(F16, SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie between 65504 and 2^16: even is inf
  EXPECT_EQ(f32_to_f16(1e30f), 0x7C00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and 2^-24
  EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);      // tie between 1 and 2 ulps
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);  // 1023.5 * 2^-24: tie, rounds up to normal
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);  // tie, even
  EXPECT_EQ(f32_to_f16(1.0f + 0x3p-11f), 0x3C02);  // tie, even
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  // A signalling NaN whose payload sits only in the low 13 bits must not become inf.
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::bit_cast<float>(uint32_t{0x7F800001}))));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::bit_cast<float>(uint32_t{0xFF800001}))));
}

// -------------------------------------------------------------------------------------------
// bf16
// -------------------------------------------------------------------------------------------

TEST(BF16, DecodesAndRoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(b);
    ASSERT_EQ(bits(f), i << 16);
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(back))) << std::hex << i;
    } else {
      ASSERT_EQ(back, b) << std::hex << i;
    }
  }
}

TEST(BF16, RoundsToNearestEvenInEveryGap) {
  for (uint32_t i = 0; i < 65536; ++i) {
    if ((i & 0x7F80) == 0x7F80) continue;     // inf / NaN: no gap above
    const uint32_t mid = (i << 16) | 0x8000;  // exactly halfway to the next magnitude
    const auto lo = static_cast<uint16_t>(i);
    const auto hi = static_cast<uint16_t>(i + 1);  // 0x7F7F + 1 = inf: RNE overflow
    ASSERT_EQ(f32_to_bf16(std::bit_cast<float>(mid)), (i & 1) ? hi : lo) << std::hex << i;
    ASSERT_EQ(f32_to_bf16(std::bit_cast<float>(mid + 1)), hi) << std::hex << i;
    ASSERT_EQ(f32_to_bf16(std::bit_cast<float>(mid - 1)), lo) << std::hex << i;
  }
}

TEST(BF16, ChosenValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);  // tie: stays on even 1.0
  EXPECT_EQ(f32_to_bf16(1.0f + 0x3p-8f), 0x3F82);  // tie: up to even
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // NaN stays NaN, even when only the low (dropped) mantissa bits are set.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(uint32_t{0x7F800001})))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(uint32_t{0xFFFFFFFF})))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

// -------------------------------------------------------------------------------------------
// fp8
// -------------------------------------------------------------------------------------------

struct F8Case {
  uint8_t v;
  float want;
};

TEST(F8E4M3, ChosenPatterns) {
  const F8Case cases[] = {
      {0x00, 0.0f},  {0x01, 0x1p-9f}, {0x07, 0x7p-9f},  {0x08, 0x1p-6f},
      {0x38, 1.0f},  {0x39, 1.125f},  {0x3F, 1.875f},   {0x40, 2.0f},
      {0x30, 0.5f},  {0x7E, 448.0f},  {0x77, 240.0f},   {0x78, 256.0f},
      {0xB8, -1.0f}, {0xFE, -448.0f}, {0x81, -0x1p-9f}, {0x5A, 20.0f},
  };
  for (const F8Case& c : cases) {
    EXPECT_EQ(bits(f8e4m3_to_f32(c.v)), bits(c.want)) << std::hex << int{c.v};
  }
  EXPECT_EQ(bits(f8e4m3_to_f32(0x80)), bits(-0.0f));
}

TEST(F8E4M3, ClassifiesAllPatterns) {
  float prev = -1.0f;
  for (int v = 0; v < 256; ++v) {
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(v));
    const bool nan = (v & 0x7F) == 0x7F;  // FN variant: only S.1111.111 is NaN, no inf
    EXPECT_EQ(std::isnan(f), nan) << v;
    if (nan) continue;
    EXPECT_TRUE(std::isfinite(f)) << v;
    EXPECT_EQ(std::signbit(f), v >= 0x80) << v;
    EXPECT_LE(std::fabs(f), 448.0f) << v;
    if (v < 0x80) {
      EXPECT_GT(f, prev) << v;  // magnitudes increase with the pattern
      prev = f;
      EXPECT_EQ(bits(f8e4m3_to_f32(static_cast<uint8_t>(v | 0x80))), bits(-f)) << v;
    }
  }
}

TEST(F8E5M2, ChosenPatterns) {
  const F8Case cases[] = {
      {0x00, 0.0f},      {0x01, 0x1p-16f}, {0x03, 0x3p-16f},  {0x04, 0x1p-14f}, {0x3C, 1.0f},
      {0x3D, 1.25f},     {0x3F, 1.75f},    {0x40, 2.0f},      {0x7B, 57344.0f}, {0xBC, -1.0f},
      {0xFB, -57344.0f}, {0x7C, INFINITY}, {0xFC, -INFINITY},
  };
  for (const F8Case& c : cases) {
    EXPECT_EQ(bits(f8e5m2_to_f32(c.v)), bits(c.want)) << std::hex << int{c.v};
  }
  EXPECT_EQ(bits(f8e5m2_to_f32(0x80)), bits(-0.0f));
}

TEST(F8E5M2, ClassifiesAllPatterns) {
  float prev = -1.0f;
  for (int v = 0; v < 256; ++v) {
    const float f = f8e5m2_to_f32(static_cast<uint8_t>(v));
    const bool exp_all_ones = (v & 0x7C) == 0x7C;
    EXPECT_EQ(std::isnan(f), exp_all_ones && (v & 3) != 0) << v;
    EXPECT_EQ(std::isinf(f), exp_all_ones && (v & 3) == 0) << v;
    if (!exp_all_ones && v < 0x80) {
      EXPECT_GT(f, prev) << v;
      prev = f;
    }
  }
}

// -------------------------------------------------------------------------------------------
// Plain element types through dequantize_row
// -------------------------------------------------------------------------------------------

template <typename T>
Bytes to_bytes(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(DequantScalar, F32CopiesBitsIncludingNaNPayloads) {
  const std::vector<uint32_t> in = {0x3F800000u, 0x7FA00001u, 0xFFC12345u,
                                    0x80000000u, 0x00000001u, 0x7F800000u};
  const auto out = dequant(DType::kF32, to_bytes(in), 6);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(bits(out[i]), in[i]) << i;
}

TEST(DequantScalar, F16AndBF16Rows) {
  const std::vector<uint16_t> h = {0x3C00, 0xB500, 0x0001, 0x03FF, 0x7BFF, 0xFC00, 0x8000};
  const auto f16 = dequant(DType::kF16, to_bytes(h), 7);
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(bits(f16[i]), bits(ref_f16(h[i]))) << i;
  const auto bf16 = dequant(DType::kBF16, to_bytes(h), 7);
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(bits(bf16[i]), uint32_t{h[i]} << 16) << i;
}

TEST(DequantScalar, F64Narrows) {
  const std::vector<double> in = {1.0 / 3.0, 1e300, -1e-300, 0.1, -2.5, 16777217.0};
  const auto out = dequant(DType::kF64, to_bytes(in), 6);
  EXPECT_EQ(bits(out[0]), 0x3EAAAAABu);
  EXPECT_EQ(bits(out[1]), bits(INFINITY));
  EXPECT_EQ(bits(out[2]), bits(-0.0f));
  EXPECT_EQ(bits(out[3]), bits(0.1f));
  EXPECT_EQ(out[4], -2.5f);
  EXPECT_EQ(out[5], 16777216.0f);  // tie to even
}

TEST(DequantScalar, Integers) {
  const auto i8 = dequant(DType::kI8, to_bytes(std::vector<int8_t>{-128, 127, 0, -1}), 4);
  EXPECT_EQ(i8, (std::vector<float>{-128.0f, 127.0f, 0.0f, -1.0f}));
  const auto u8 = dequant(DType::kU8, to_bytes(std::vector<uint8_t>{0, 255, 128}), 3);
  EXPECT_EQ(u8, (std::vector<float>{0.0f, 255.0f, 128.0f}));
  const auto i16 = dequant(DType::kI16, to_bytes(std::vector<int16_t>{-32768, 32767, -3}), 3);
  EXPECT_EQ(i16, (std::vector<float>{-32768.0f, 32767.0f, -3.0f}));
  const auto i32 =
      dequant(DType::kI32, to_bytes(std::vector<int32_t>{INT32_MIN, 16777217, 16777219, -7}), 4);
  EXPECT_EQ(i32, (std::vector<float>{-2147483648.0f, 16777216.0f, 16777220.0f, -7.0f}));
  const auto i64 = dequant(DType::kI64, to_bytes(std::vector<int64_t>{INT64_MAX, -5, 1}), 3);
  EXPECT_EQ(i64, (std::vector<float>{0x1p63f, -5.0f, 1.0f}));
  const auto b = dequant(DType::kBool, Bytes{0, 1, 2, 255}, 4);
  EXPECT_EQ(b, (std::vector<float>{0.0f, 1.0f, 1.0f, 1.0f}));
}

TEST(DequantScalar, F8Rows) {
  const Bytes in = {0x38, 0x7F, 0x7E, 0x01};
  const auto e4 = dequant(DType::kF8E4M3, in, 4);
  const auto e5 = dequant(DType::kF8E5M2, in, 4);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(bits(e4[i]), bits(f8e4m3_to_f32(in[i])));
    EXPECT_EQ(bits(e5[i]), bits(f8e5m2_to_f32(in[i])));
  }
  EXPECT_EQ(e4[0], 1.0f);
  EXPECT_TRUE(std::isnan(e4[1]));
  EXPECT_TRUE(std::isnan(e5[1]));
}

// -------------------------------------------------------------------------------------------
// Errors
// -------------------------------------------------------------------------------------------

void expect_invalid(const Status& s, const std::string& dtype) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(dtype), std::string::npos) << s.message();
}

TEST(DequantErrors, RaggedRow) {
  Bytes src(144 * 2);
  std::vector<float> dst(512);
  expect_invalid(dequantize_row(DType::kQ4_K, src.data(), dst.data(), 100), "q4_k");
  expect_invalid(dequantize_row(DType::kQ4_0, src.data(), dst.data(), 33), "q4_0");
  expect_invalid(dequantize_row(DType::kQ8_K, src.data(), dst.data(), 32), "q8_k");
}

TEST(DequantErrors, NegativeCount) {
  Bytes src(64);
  std::vector<float> dst(64);
  expect_invalid(dequantize_row(DType::kF32, src.data(), dst.data(), -1), "f32");
  expect_invalid(dequantize_row(DType::kQ6_K, src.data(), dst.data(), -256), "q6_k");
}

TEST(DequantErrors, NullPointers) {
  Bytes src(34);
  std::vector<float> dst(32);
  expect_invalid(dequantize_row(DType::kQ8_0, nullptr, dst.data(), 32), "q8_0");
  expect_invalid(dequantize_row(DType::kBF16, src.data(), nullptr, 4), "bf16");
  // Nothing to do: null pointers are fine.
  EXPECT_TRUE(dequantize_row(DType::kQ8_0, nullptr, nullptr, 0).ok());
}

TEST(DequantErrors, UnknownDType) {
  std::vector<float> dst(1);
  const uint8_t src[8] = {};
  const Status s = dequantize_row(static_cast<DType>(200), src, dst.data(), 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

}  // namespace
}  // namespace rinfer
