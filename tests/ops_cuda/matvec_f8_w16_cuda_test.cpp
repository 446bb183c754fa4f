// The decode matvec over f8_e4m3 weights read as weights only (W8A16: code * row scale, x in
// f32), plain and with the RMSNorm of its input formed on the fly, against a scalar reference
// over the uploaded codes: odd row counts, rows of 64 to 14336 codes (every split-K), subnormal
// and normal codes, with and without the added row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

class CudaF8W16 : public test::CudaTest {};

// y[o] = scale[o] * sum_k e4m3(q[o, k]) * x[k] (+ add[o]) in double, and the sum of the terms'
// magnitudes (the scale of the f32 rounding).
void reference(const std::vector<uint8_t>& wq, const std::vector<float>& ws,
               const std::vector<double>& x, int64_t n_out, int64_t n_in, const float* add,
               std::vector<double>& y, std::vector<double>& mag) {
  y.assign(static_cast<size_t>(n_out), 0.0);
  mag.assign(static_cast<size_t>(n_out), 0.0);
  for (int64_t o = 0; o < n_out; ++o) {
    double s = 0.0, m = 0.0;
    for (int64_t k = 0; k < n_in; ++k) {
      const double p =
          static_cast<double>(f8e4m3_to_f32(wq[static_cast<size_t>(o * n_in + k)])) * x[k];
      s += p;
      m += std::fabs(p);
    }
    const double sc = ws[static_cast<size_t>(o)];
    y[static_cast<size_t>(o)] = s * sc + (add != nullptr ? add[o] : 0.0);
    mag[static_cast<size_t>(o)] = m * sc;
  }
}

TEST_F(CudaF8W16, MatvecMatchesTheScalarReference) {
  struct Shape {
    int64_t n_out, n_in;
  };
  const Shape shapes[] = {{1, 64},     {37, 128},  {5, 576},     {130, 4096},
                          {1001, 576}, {3, 14336}, {4099, 2048}, {333, 1152}};
  uint64_t seed = 170;
  for (const Shape& sh : shapes) {
    for (bool with_norm : {false, true}) {
      for (bool with_add : {false, true}) {
        if (with_norm && with_add) continue;  // the normed form adds nothing
        SCOPED_TRACE(testing::Message() << "[" << sh.n_out << ", " << sh.n_in << "]"
                                        << (with_norm ? " norm" : "") << (with_add ? " +add" : ""));
        // Rows of magnitudes 1e-3 to 1e3, and within a row values spread over 6 decades, so
        // that after the row's scale (max|w| / 448) some codes are subnormal (below 2^-6).
        std::vector<float> wv =
            test::random_floats(static_cast<size_t>(sh.n_out * sh.n_in), ++seed);
        for (int64_t r = 0; r < sh.n_out; ++r) {
          const float a = std::pow(10.0f, -3.0f + static_cast<float>(r % 7));
          for (int64_t i = 0; i < sh.n_in; ++i) {
            wv[static_cast<size_t>(r * sh.n_in + i)] *=
                a * std::pow(10.0f, -static_cast<float>(i % 6));
          }
        }
        CU_ASSIGN_OR_FAIL(Tensor w, Tensor::from_f32({sh.n_out, sh.n_in}, wv));
        CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight_f8(w, 0, stream()));
        ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
        std::vector<uint8_t> wq(static_cast<size_t>(sh.n_out * sh.n_in));
        std::vector<float> ws(static_cast<size_t>(sh.n_out));
        ASSERT_EQ(cudaMemcpy(wq.data(), dw.data, wq.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(ws.data(), dw.scales, ws.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        // Some codes must be subnormal (exponent field 0, not zero) for the test to mean it.
        const size_t subnormal = static_cast<size_t>(std::count_if(
            wq.begin(), wq.end(), [](uint8_t c) { return (c & 0x78) == 0 && (c & 7) != 0; }));
        EXPECT_GT(subnormal, 0u);

        const std::vector<float> x = test::random_floats(static_cast<size_t>(sh.n_in), ++seed);
        const std::vector<float> nw =
            test::random_floats(static_cast<size_t>(sh.n_in), ++seed, 0.5f, 1.5f);
        const std::vector<float> add = test::random_floats(static_cast<size_t>(sh.n_out), ++seed);
        const float eps = 1e-5f;
        std::vector<double> xin(x.begin(), x.end());
        if (with_norm) {
          double ss = 0.0;
          for (float v : x) ss += static_cast<double>(v) * v;
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(sh.n_in) + eps);
          for (int64_t k = 0; k < sh.n_in; ++k) xin[k] = x[k] * inv * nw[k];
        }
        std::vector<double> ref, mag;
        reference(wq, ws, xin, sh.n_out, sh.n_in, with_add ? add.data() : nullptr, ref, mag);

        cuda::DeviceBuffer dx = upload(x), dnw = upload(nw);
        std::vector<float> y0(static_cast<size_t>(sh.n_out + 1), NAN);
        if (with_add) std::copy(add.begin(), add.end(), y0.begin());
        cuda::DeviceBuffer dy = upload(y0);
        if (with_norm) {
          CU_ASSERT_OK(cuda::matvec_rms_norm(dw, dx.as<float>(), dnw.as<float>(), eps,
                                             dy.as<float>(), stream()));
        } else {
          CU_ASSERT_OK(cuda::matvec(dw, dx.as<float>(), with_add ? dy.as<float>() : nullptr,
                                    dy.as<float>(), stream()));
        }
        const std::vector<float> y = download<float>(dy, y0.size());
        for (int64_t o = 0; o < sh.n_out; ++o) {
          // Codes and their products with x are exact in f32; only the f32 sums round (and the
          // norm's scale): well under 1e-5 of the terms' magnitudes.
          const auto i = static_cast<size_t>(o);
          const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
          ASSERT_LE(err, 1e-5 * mag[i] + 1e-6 * std::fabs(ref[i]) + 1e-30)
              << "row " << o << ": " << y[i] << " vs " << ref[i];
        }
        EXPECT_TRUE(std::isnan(y[static_cast<size_t>(sh.n_out)])) << "the row past n_out";
      }
    }
  }
}

}  // namespace
}  // namespace rinfer
