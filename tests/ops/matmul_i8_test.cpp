// W8A8 matmul on the CPU (int8 codes with a scale per row, activations quantized per token):
// the VNNI kernel against the scalar integer kernel bit for bit, both against an independent
// formula over the same quantized activations, and the whole op against the exact reference;
// odd shapes, 1 to 37 tokens, several matrices sharing x, and bad scales refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/matmul_internal.h"
#include "ops/cpu/ops.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

struct I8Matrix {
  Tensor codes;   // [n_out, n_in] int8
  Tensor panels;  // pack_w8a8(codes)
  Tensor scale;   // [n_out] f32
};

I8Matrix random_i8(int64_t n_out, int64_t n_in, uint64_t seed) {
  I8Matrix m;
  m.codes = Tensor::empty({n_out, n_in}, DType::kI8).value();
  m.scale = Tensor::empty({n_out}, DType::kF32).value();
  const std::vector<uint8_t> b = test::random_bytes(static_cast<size_t>(n_out * n_in), seed);
  auto* q = m.codes.mutable_data_as<int8_t>();
  for (size_t i = 0; i < b.size(); ++i) {
    // Codes in [-127, 127] with the extremes present (a symmetric quantizer's range).
    q[i] = static_cast<int8_t>(static_cast<int>(b[i] % 255) - 127);
  }
  const std::vector<float> s =
      test::random_floats(static_cast<size_t>(n_out), seed + 1, 1e-4f, 1e-2f);
  std::memcpy(m.scale.mutable_data_as<float>(), s.data(), s.size() * 4);
  auto packed = pack_w8a8(m.codes);
  EXPECT_TRUE(packed.ok()) << packed.status().to_string();
  if (packed.ok()) m.panels = *packed;
  return m;
}

// Independent formula: quantize each token's groups of 64 columns as documented, sum each group
// in int64, and add the groups up in double.
// mag: the sum of the group terms' magnitudes (the scale of the f32 rounding).
std::vector<double> formula(const I8Matrix& m, const std::vector<float>& x, int64_t n_tokens,
                            std::vector<double>& mag) {
  const int64_t n_out = m.codes.dim(0), k = m.codes.dim(1);
  std::vector<double> y(static_cast<size_t>(n_tokens * n_out));
  mag.assign(y.size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<int64_t> q(static_cast<size_t>(k));
    std::vector<float> gs;
    for (int64_t g0 = 0; g0 < k; g0 += 64) {
      const int64_t g1 = std::min(k, g0 + 64);
      float amax = 0.0f;
      for (int64_t i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(x[t * k + i]));
      for (int64_t i = g0; i < g1; ++i) {
        q[i] =
            amax > 0.0f ? static_cast<int64_t>(std::nearbyint(x[t * k + i] * (127.0f / amax))) : 0;
      }
      gs.push_back(amax / 127.0f);
    }
    for (int64_t o = 0; o < n_out; ++o) {
      double total = 0.0, abs_total = 0.0;
      for (int64_t g0 = 0; g0 < k; g0 += 64) {
        int64_t acc = 0;
        for (int64_t i = g0; i < std::min(k, g0 + 64); ++i) {
          acc += q[i] * m.codes.data_as<int8_t>()[o * k + i];
        }
        total += static_cast<double>(acc) * gs[static_cast<size_t>(g0 / 64)];
        abs_total += std::fabs(static_cast<double>(acc) * gs[static_cast<size_t>(g0 / 64)]);
      }
      y[t * n_out + o] = total * m.scale.data_as<float>()[o];
      mag[t * n_out + o] = abs_total * m.scale.data_as<float>()[o];
    }
  }
  return y;
}

TEST(MatmulI8, FastMatchesTheFormulaAndTheReference) {
  ThreadPool pool(2);
  struct Case {
    int64_t n_out, n_in, n_tokens;
  };
  uint64_t seed = 3;
  for (const Case& c :
       {Case{1, 4, 1}, Case{3, 36, 1}, Case{5, 64, 2}, Case{130, 576, 1}, Case{131, 580, 5},
        Case{64, 1536, 37}, Case{7, 1000, 53}, Case{576, 576, 9}, Case{17, 68, 100}}) {
    SCOPED_TRACE(testing::Message() << "[" << c.n_out << ", " << c.n_in << "] x " << c.n_tokens);
    const I8Matrix m = random_i8(c.n_out, c.n_in, ++seed);
    const std::vector<float> x =
        test::random_floats(static_cast<size_t>(c.n_tokens * c.n_in), ++seed);
    const auto n = static_cast<size_t>(c.n_tokens * c.n_out);
    std::vector<float> fast(n, NAN), scalar(n, NAN), ref(n, NAN);
    OpContext ctx;
    ctx.pool = &pool;
    ASSERT_TRUE(matmul(ctx, m.panels, x.data(), c.n_tokens, fast.data(), &m.scale).ok());
    OpContext ref_ctx;
    ref_ctx.impl = Impl::kReference;
    ASSERT_TRUE(matmul(ref_ctx, m.panels, x.data(), c.n_tokens, ref.data(), &m.scale).ok());
    // The scalar integer kernel over the same quantized activations.
    internal::I8Acts a;
    a.kp = internal::round_up(c.n_in, 64);
    a.k = c.n_in;
    std::vector<int8_t> q(static_cast<size_t>(c.n_tokens * a.kp) + 64);
    std::vector<float> xs(static_cast<size_t>(c.n_tokens * a.groups()));
    std::vector<int32_t> sums(static_cast<size_t>(c.n_tokens * a.groups()));
    a.q = q.data();
    a.scale = xs.data();
    a.sum = sums.data();
    internal::quantize_tokens_i8(x.data(), c.n_tokens, c.n_in, a, /*scalar=*/true);
    internal::w8a8_panels(m.panels.data_as<uint8_t>(), c.n_out, c.n_in, m.scale.data_as<float>(), 0,
                          m.panels.dim(0), a, c.n_tokens, scalar.data(), c.n_out,
                          /*scalar=*/true);
    std::vector<double> mag;
    const std::vector<double> f = formula(m, x, c.n_tokens, mag);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(fast[i]), std::bit_cast<uint32_t>(scalar[i]))
          << "element " << i << ": " << fast[i] << " vs " << scalar[i];
      // f32 sums of a few group terms: a few ulps of the terms' magnitude.
      ASSERT_LE(std::fabs(fast[i] - f[i]), 1e-6 * mag[i] + 1e-12)
          << "element " << i << ": " << fast[i] << " vs " << f[i];
    }
    // Against the exact product: only the activations' rounding (half a step of a group's
    // max|x| / 127 per element).
    if (c.n_in >= 64) EXPECT_LT(test::rel_l2(fast, ref), 2e-2);
    EXPECT_GT(test::rel_l2(fast, ref), 0.0);
  }
  RecordProperty("vnni", internal::has_i8_vnni() ? "yes" : "no");
}

TEST(MatmulI8, SharedInputMatchesOneCallEach) {
  ThreadPool pool(2);
  const I8Matrix a = random_i8(67, 192, 11), b = random_i8(3, 192, 12), c = random_i8(130, 192, 13);
  for (int64_t nt : {1, 6}) {
    const std::vector<float> x = test::random_floats(static_cast<size_t>(nt * 192), 14);
    std::vector<float> ya(nt * 67), yb(nt * 3), yc(nt * 130);
    const Tensor* ws[] = {&a.panels, &b.panels, &c.panels};
    const Tensor* ss[] = {&a.scale, &b.scale, &c.scale};
    float* ys[] = {ya.data(), yb.data(), yc.data()};
    OpContext ctx;
    ctx.pool = &pool;
    ASSERT_TRUE(matmul_multi(ctx, ws, x.data(), nt, ys, ss).ok());
    for (int i = 0; i < 3; ++i) {
      std::vector<float> one(static_cast<size_t>(nt * ss[i]->numel()));
      ASSERT_TRUE(matmul(ctx, *ws[i], x.data(), nt, one.data(), ss[i]).ok());
      EXPECT_EQ(0, std::memcmp(one.data(), ys[i], one.size() * 4)) << "matrix " << i;
    }
  }
}

TEST(MatmulI8, BadScalesAreRefusedByName) {
  const I8Matrix m = random_i8(5, 64, 21);
  const std::vector<float> x = test::random_floats(64, 22);
  std::vector<float> y(5);
  OpContext ctx;
  const Tensor long_scale = Tensor::empty({17}, DType::kF32).value();
  auto st = matmul(ctx, m.panels, x.data(), 1, y.data(), &long_scale);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("one per row of its 1 panels of 16"), std::string::npos)
      << st.message();
  const Tensor f32w = Tensor::empty({5, 64}, DType::kF32).value();
  st = matmul(ctx, f32w, x.data(), 1, y.data(), &m.scale);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("row scales go with W8A8 weights"), std::string::npos)
      << st.message();
  const Tensor odd = Tensor::empty({5, 66}, DType::kI8).value();
  auto packed = pack_w8a8(odd);
  ASSERT_FALSE(packed.ok());
  EXPECT_NE(packed.status().message().find("multiple of 4"), std::string::npos)
      << packed.status().message();
  const Tensor* ws[] = {&m.panels};
  const Tensor* ss[] = {&m.scale, &m.scale};
  float* ys[] = {y.data()};
  st = matmul_multi(ctx, ws, x.data(), 1, ys, ss);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1 weights but 2 row scales"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace rinfer::cpu
