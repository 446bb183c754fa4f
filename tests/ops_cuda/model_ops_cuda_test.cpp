// The small model-level CUDA ops of ops/cuda/model_ops.h against scalar CPU references on random
// data (rms_norm_q16 is tested in elementwise_cuda_test.cpp).
#include <cmath>
#include <vector>

#include "ops/cpu/ops.h"
#include "ops/cuda/model_ops.h"
#include "ops_cuda/cuda_test_util.h"

namespace rinfer {
namespace {

class CudaModelOps : public test::CudaTest {
 protected:
  cpu::OpContext ref() const {
    cpu::OpContext c;
    c.impl = cpu::Impl::kReference;
    return c;
  }
};

TEST_F(CudaModelOps, AddAndScale) {
  for (int64_t n : {1, 31, 1000, 4097}) {
    const auto a = test::random_floats(static_cast<size_t>(n), 1);
    const auto b = test::random_floats(static_cast<size_t>(n), 2);
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
    cuda::DeviceBuffer da = upload(a), db = upload(b);
    cuda::DeviceBuffer out = poisoned<float>(a.size());
    CU_ASSERT_OK(cuda::add(da.as<float>(), db.as<float>(), n, out.as<float>(), stream()));
    EXPECT_EQ(download<float>(out, a.size()), want);
    // In place (out aliases a), then scaled.
    CU_ASSERT_OK(cuda::add(da.as<float>(), db.as<float>(), n, da.as<float>(), stream()));
    CU_ASSERT_OK(cuda::scale(da.as<float>(), n, 0.375f, stream()));
    for (float& v : want) v *= 0.375f;
    EXPECT_EQ(download<float>(da, a.size()), want);
  }
  EXPECT_FALSE(cuda::add(nullptr, nullptr, 4, nullptr, stream()).ok());
}

TEST_F(CudaModelOps, AddBiasRowsHonoursTheStride) {
  const int64_t rows = 7, n = 37, stride = 50;
  const auto x = test::random_floats(static_cast<size_t>(rows * stride), 3);
  const auto bias = test::random_floats(static_cast<size_t>(n), 4);
  std::vector<float> want = x;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(r * stride + i)] += bias[i];
  }
  cuda::DeviceBuffer dx = upload(x), db = upload(bias);
  CU_ASSERT_OK(cuda::add_bias_rows(dx.as<float>(), db.as<float>(), rows, n, stride, stream()));
  EXPECT_EQ(download<float>(dx, x.size()), want);  // the pad columns are untouched
  EXPECT_FALSE(cuda::add_bias_rows(dx.as<float>(), db.as<float>(), rows, n, n - 1, stream()).ok());
}

TEST_F(CudaModelOps, RmsNormHeadsInsideFusedRows) {
  // Q heads of a [tokens, q | k | v] buffer: only the first n_heads * head_dim of each row.
  for (int64_t hd : {64, 128, 256}) {
    const int64_t tokens = 5, heads = 3, stride = heads * hd + 2 * hd + 8;
    const auto x = test::random_floats(static_cast<size_t>(tokens * stride), 5, -4.0f, 4.0f);
    const auto w = test::random_floats(static_cast<size_t>(hd), 6, 0.5f, 1.5f);
    std::vector<float> want = x;
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = want.data() + t * stride;
      cpu::rms_norm(ref(), row, w.data(), heads, hd, 1e-6f, row);
    }
    cuda::DeviceBuffer dx = upload(x), dw = upload(w);
    CU_ASSERT_OK(cuda::rms_norm_heads(dx.as<float>(), dw.as<float>(), tokens, heads, hd, stride,
                                      1e-6f, stream()));
    const auto got = download<float>(dx, x.size());
    EXPECT_LT(test::rel_l2(got, want), 1e-6) << "head_dim " << hd;
    for (int64_t t = 0; t < tokens; ++t) {  // k, v and the pad are untouched
      for (int64_t i = heads * hd; i < stride; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(t * stride + i)], x[static_cast<size_t>(t * stride + i)]);
      }
    }
  }
}

TEST_F(CudaModelOps, GatherRows) {
  const int64_t src_rows = 20, n = 33, stride = 40;
  const auto src = test::random_floats(static_cast<size_t>(src_rows * stride), 7);
  const std::vector<int32_t> rows{19, 0, 7, 7, 3};
  std::vector<float> want;
  for (int32_t r : rows) {
    want.insert(want.end(), src.begin() + r * stride, src.begin() + r * stride + n);
  }
  cuda::DeviceBuffer ds = upload(src), dr = upload(rows);
  cuda::DeviceBuffer out = poisoned<float>(want.size());
  CU_ASSERT_OK(cuda::gather_rows(ds.as<float>(), stride, dr.as<int32_t>(),
                                 static_cast<int64_t>(rows.size()), n, out.as<float>(), stream()));
  EXPECT_EQ(download<float>(out, want.size()), want);
}

TEST_F(CudaModelOps, GluQ16MatchesTheActivationThenQuantize) {
  for (bool gelu : {false, true}) {
    for (int64_t n : {32, 1536, 14336}) {
      SCOPED_TRACE(std::to_string(n) + (gelu ? " gelu" : " silu"));
      const auto g = test::random_floats(static_cast<size_t>(n), 10, -6.0f, 6.0f);
      const auto u = test::random_floats(static_cast<size_t>(n), 11, -2.0f, 2.0f);
      std::vector<float> want(g.size());
      if (gelu) {
        cpu::geglu_tanh(ref(), g.data(), u.data(), n, want.data());
      } else {
        cpu::swiglu(ref(), g.data(), u.data(), n, want.data());
      }
      cuda::DeviceBuffer dg = upload(g), du = upload(u);
      cuda::DeviceBuffer out = poisoned<float>(g.size());
      const size_t qb = cuda::quantized_activation_bytes(n);
      cuda::DeviceBuffer ws1 = poisoned<uint8_t>(qb), ws2 = poisoned<uint8_t>(qb);
      auto qa1 = cuda::quantized_activation_in(ws1.data(), qb, n);
      auto qa2 = cuda::quantized_activation_in(ws2.data(), qb, n);
      ASSERT_TRUE(qa1.ok() && qa2.ok());
      CU_ASSERT_OK(
          cuda::glu_q16(dg.as<float>(), du.as<float>(), n, gelu, out.as<float>(), *qa1, stream()));
      const auto y = download<float>(out, g.size());
      EXPECT_EQ(test::count_non_finite(y), 0u);
      EXPECT_LT(test::rel_l2(y, want), 1e-6);
      // The int16 form is exactly quantize_activation of the f32 output.
      CU_ASSERT_OK(cuda::quantize_activation(out.as<float>(), *qa2, stream()));
      EXPECT_EQ(download<uint8_t>(ws1, qb), download<uint8_t>(ws2, qb));
    }
  }
  const size_t qb = cuda::quantized_activation_bytes(64);
  cuda::DeviceBuffer ws = poisoned<uint8_t>(qb);
  auto qa = cuda::quantized_activation_in(ws.data(), qb, 64);
  ASSERT_TRUE(qa.ok());
  float* p = reinterpret_cast<float*>(ws.data());
  EXPECT_FALSE(cuda::glu_q16(p, p, 48, false, p, *qa, stream()).ok());  // n != qa.n
}

}  // namespace
}  // namespace rinfer
