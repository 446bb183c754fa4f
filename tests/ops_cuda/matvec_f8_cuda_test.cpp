// FP8 E4M3 (W8A8) on the device: per-row quantization against the host's (core/quantize_8bit.h,
// itself checked against PyTorch's float8_e4m3fn) bit for bit, the weight upload, and the
// tensor-core matvec against a scalar reference over the same codes, for 1 to 8 rows, odd row
// counts and every split of the rows' spans.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/cuda/cublas_lt.h"
#include "core/quantize_8bit.h"
#include "cuda_test_util.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/model_ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

class CudaF8 : public test::CudaTest {
 protected:
  // The codes and scales of an f8_e4m3 device weight.
  void download_f8(const cuda::DeviceWeight& w, std::vector<uint8_t>& q, std::vector<float>& s) {
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    q.resize(static_cast<size_t>(w.n_out * w.n_in));
    s.resize(static_cast<size_t>(w.n_out));
    ASSERT_EQ(cudaMemcpy(q.data(), w.data, q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(s.data(), w.scales, s.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

// Rows of mixed magnitudes: values in [-a, a) with a from 1e-3 to 1e3 by row, so the codes span
// the normal and subnormal ranges.
std::vector<float> spread_rows(int64_t rows, int64_t n, uint64_t seed) {
  std::vector<float> v = test::random_floats(static_cast<size_t>(rows * n), seed);
  for (int64_t r = 0; r < rows; ++r) {
    const float a = std::pow(10.0f, -3.0f + 6.0f * static_cast<float>(r % 7) / 6.0f);
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(r * n + i)] *= a;
  }
  return v;
}

TEST_F(CudaF8, QuantizedRowsMatchTheHostBitForBit) {
  struct Case {
    int64_t rows, n, ld;
    bool bf16;
  };
  uint64_t seed = 10;
  for (const Case& c :
       {Case{1, 1, 1, false}, Case{7, 37, 41, false}, Case{9, 4096, 4096, false},
        Case{3, 14336, 14336, true}, Case{5, 1000, 1003, true}, Case{2, 20000, 20001, false}}) {
    SCOPED_TRACE(testing::Message()
                 << c.rows << " x " << c.n << " ld " << c.ld << (c.bf16 ? " bf16" : " f32"));
    std::vector<float> x = spread_rows(c.rows, c.ld, ++seed);
    // Row 1 (where there is one) is all zeros: scale 1, every code 0.
    if (c.rows > 1) std::fill_n(x.begin() + c.ld, c.ld, 0.0f);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i] = f32_to_bf16(x[i]);
      if (c.bf16) x[i] = bf16_to_f32(xb[i]);  // the host quantizes what the device reads
    }
    std::vector<float> dense(static_cast<size_t>(c.rows * c.n));
    for (int64_t r = 0; r < c.rows; ++r) {
      std::memcpy(dense.data() + r * c.n, x.data() + r * c.ld, static_cast<size_t>(c.n) * 4);
    }
    std::vector<uint8_t> q_ref(dense.size());
    std::vector<float> s_ref(static_cast<size_t>(c.rows));
    quantize_rows_f8e4m3(dense.data(), c.rows, c.n, q_ref.data(), s_ref.data());

    cuda::DeviceBuffer dx = c.bf16 ? upload(xb) : upload(x);
    cuda::DeviceBuffer dq = poisoned<uint8_t>(q_ref.size());
    cuda::DeviceBuffer ds = poisoned<float>(s_ref.size());
    CU_ASSERT_OK(cuda::quantize_rows_f8(dx.data(), c.bf16 ? DType::kBF16 : DType::kF32, c.rows, c.n,
                                        c.ld, dq.as<uint8_t>(), ds.as<float>(), stream()));
    const std::vector<uint8_t> q = download<uint8_t>(dq, q_ref.size());
    const std::vector<float> s = download<float>(ds, s_ref.size());
    for (int64_t r = 0; r < c.rows; ++r) {
      EXPECT_EQ(std::bit_cast<uint32_t>(s[static_cast<size_t>(r)]),
                std::bit_cast<uint32_t>(s_ref[static_cast<size_t>(r)]))
          << "row " << r << ": " << s[static_cast<size_t>(r)] << " vs "
          << s_ref[static_cast<size_t>(r)];
    }
    size_t diff = 0;
    for (size_t i = 0; i < q.size(); ++i) diff += q[i] != q_ref[i] ? 1 : 0;
    EXPECT_EQ(diff, 0u) << "codes differ";
    if (c.rows > 1) EXPECT_EQ(s[1], 1.0f);
  }
}

// The decode norm that also writes its row's e4m3 codes: the same out as rms_norm_row, and the
// codes and scale quantize_rows_f8 makes from that out, bit for bit (with and without the residual
// add; n up to the f8 norm's 16384).
TEST_F(CudaF8, TheNormsCodesAreTheQuantizersOfItsOutput) {
  uint64_t seed = 30;
  for (int64_t n : {32, 576, 4096, 14336, 16384}) {
    for (bool with_residual : {false, true}) {
      SCOPED_TRACE(testing::Message() << n << (with_residual ? " +residual" : ""));
      const auto x = test::random_floats(static_cast<size_t>(n), ++seed);
      const auto res = spread_rows(1, n, ++seed);
      const auto w = test::random_floats(static_cast<size_t>(n), ++seed, 0.5f, 1.5f);
      cuda::DeviceBuffer dx = upload(x), dw = upload(w);
      cuda::DeviceBuffer r1 = upload(res), r2 = upload(res);
      cuda::DeviceBuffer out1 = poisoned<float>(static_cast<size_t>(n));
      cuda::DeviceBuffer out2 = poisoned<float>(static_cast<size_t>(n));
      cuda::DeviceBuffer q1 = poisoned<uint8_t>(static_cast<size_t>(n)), s1 = poisoned<float>(1);
      cuda::DeviceBuffer q2 = poisoned<uint8_t>(static_cast<size_t>(n)), s2 = poisoned<float>(1);
      CU_ASSERT_OK(cuda::rms_norm_row_f8(dx.as<float>(), with_residual ? r1.as<float>() : nullptr,
                                         dw.as<float>(), n, 1e-5f, out1.as<float>(),
                                         q1.as<uint8_t>(), s1.as<float>(), stream()));
      CU_ASSERT_OK(cuda::rms_norm_row(dx.as<float>(), with_residual ? r2.as<float>() : nullptr,
                                      dw.as<float>(), n, 1e-5f, out2.as<float>(), stream()));
      CU_ASSERT_OK(cuda::quantize_rows_f8(out2.data(), DType::kF32, 1, n, n, q2.as<uint8_t>(),
                                          s2.as<float>(), stream()));
      const auto n_ = static_cast<size_t>(n);
      EXPECT_EQ(download<float>(out1, n_), download<float>(out2, n_));
      EXPECT_EQ(download<float>(r1, n_), download<float>(r2, n_));
      EXPECT_EQ(download<uint8_t>(q1, n_), download<uint8_t>(q2, n_));
      EXPECT_EQ(download<float>(s1, 1), download<float>(s2, 1));
    }
  }
}

TEST_F(CudaF8, UploadQuantizesEachRowAsTheHost) {
  uint64_t seed = 40;
  for (DType t : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n_out = 37, n_in = 192;
    const Tensor w = test::random_weight(t, n_out, n_in, ++seed);
    CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight_f8(w, 0, stream()));
    EXPECT_EQ(dw.dtype, DType::kF8E4M3);
    EXPECT_EQ(dw.source_dtype, t);
    EXPECT_EQ(dw.bytes, static_cast<uint64_t>(n_out * n_in + 4 * n_out));
    std::vector<float> dense(static_cast<size_t>(n_out * n_in));
    for (int64_t r = 0; r < n_out; ++r) {
      const DTypeTraits& tr = dtype_traits(t);
      const int64_t row_bytes = w.strides()[0] / tr.block_size * tr.block_bytes;
      ASSERT_TRUE(dequantize_row(t, static_cast<const uint8_t*>(w.data()) + r * row_bytes,
                                 dense.data() + r * n_in, n_in)
                      .ok());
    }
    std::vector<uint8_t> q_ref(dense.size());
    std::vector<float> s_ref(static_cast<size_t>(n_out));
    quantize_rows_f8e4m3(dense.data(), n_out, n_in, q_ref.data(), s_ref.data());
    std::vector<uint8_t> q;
    std::vector<float> s;
    download_f8(dw, q, s);
    EXPECT_EQ(q, q_ref);
    EXPECT_EQ(s, s_ref);
  }
  // Rows that are not whole spans of 64 are refused by name.
  const Tensor odd = test::random_weight(DType::kF32, 4, 100, 1);
  auto r = cuda::upload_weight_f8(odd, 0, stream());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multiple of 64"), std::string::npos) << r.status().message();
}

// y[r][o] = sum_k w[o][k] x[r][k] over the codes (double), times both scales, plus add.
std::vector<float> f8_reference(const std::vector<uint8_t>& wq, const std::vector<float>& ws,
                                const std::vector<uint8_t>& xq, const std::vector<float>& xs,
                                int64_t n_rows, int64_t n_out, int64_t n_in,
                                const std::vector<float>* add, std::vector<double>* mag) {
  std::vector<float> y(static_cast<size_t>(n_rows * n_out));
  mag->assign(y.size(), 0.0);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0.0, m = 0.0;
      for (int64_t k = 0; k < n_in; ++k) {
        const double p = static_cast<double>(f8e4m3_to_f32(wq[static_cast<size_t>(o * n_in + k)])) *
                         f8e4m3_to_f32(xq[static_cast<size_t>(r * n_in + k)]);
        s += p;
        m += std::fabs(p);
      }
      const double k = static_cast<double>(ws[static_cast<size_t>(o)]) * xs[static_cast<size_t>(r)];
      const auto i = static_cast<size_t>(r * n_out + o);
      y[i] = static_cast<float>(s * k + (add != nullptr ? (*add)[i] : 0.0f));
      (*mag)[i] = m * k;
    }
  }
  return y;
}

TEST_F(CudaF8, MatvecMatchesTheScalarReference) {
  struct Shape {
    int64_t n_out, n_in;
  };
  // Splits of 1 to 8 warps a row (matvec_f8_split), partial tiles of 16 rows, one row.
  const Shape shapes[] = {{1, 64},     {37, 128},  {16, 576},   {130, 4096},
                          {1001, 576}, {3, 14336}, {4096, 512}, {333, 1152}};
  uint64_t seed = 70;
  for (const Shape& sh : shapes) {
    for (int64_t n_rows : {1, 3, 8}) {
      for (bool with_add : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "[" << sh.n_out << ", " << sh.n_in << "] rows " << n_rows << " split "
                     << cuda::kern::matvec_f8_split(sh.n_out, sh.n_in)
                     << (with_add ? " +add" : ""));
        const Tensor w = test::random_weight(DType::kF32, sh.n_out, sh.n_in, ++seed);
        CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight_f8(w, 0, stream()));
        std::vector<uint8_t> wq;
        std::vector<float> ws;
        download_f8(dw, wq, ws);
        const std::vector<float> x = spread_rows(n_rows, sh.n_in, ++seed);
        std::vector<uint8_t> xq(x.size());
        std::vector<float> xs(static_cast<size_t>(n_rows));
        quantize_rows_f8e4m3(x.data(), n_rows, sh.n_in, xq.data(), xs.data());
        const std::vector<float> add =
            test::random_floats(static_cast<size_t>(n_rows * sh.n_out), ++seed);
        std::vector<double> mag;
        const std::vector<float> ref = f8_reference(wq, ws, xq, xs, n_rows, sh.n_out, sh.n_in,
                                                    with_add ? &add : nullptr, &mag);
        cuda::DeviceBuffer dxq = upload(xq), dxs = upload(xs);
        // y holds 8 rows: those past n_rows must stay untouched (poisoned).
        std::vector<float> y0(static_cast<size_t>(8 * sh.n_out), NAN);
        if (with_add) std::copy(add.begin(), add.end(), y0.begin());
        cuda::DeviceBuffer dy = upload(y0);
        CU_ASSERT_OK(cuda::matvec_f8(dw, dxq.as<uint8_t>(), dxs.as<float>(), n_rows,
                                     with_add ? dy.as<float>() : nullptr, dy.as<float>(),
                                     stream()));
        const std::vector<float> y = download<float>(dy, static_cast<size_t>(8 * sh.n_out));
        double worst = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
          // Products of e4m3 codes are exact in f32; the tensor core's sums of 32 and the f32
          // sums over the row round: well under 1e-4 of the terms' magnitudes.
          const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
          worst = std::max(worst, err / (mag[i] + 1e-30));
          ASSERT_LE(err, 1e-4 * mag[i] + 1e-6)
              << "element " << i << ": " << y[i] << " vs " << ref[i];
        }
        for (size_t i = ref.size(); i < y.size(); ++i) {
          ASSERT_TRUE(std::isnan(y[i])) << "element " << i << " past the rows was written";
        }
        RecordProperty("worst_rel_" + std::to_string(sh.n_out) + "x" + std::to_string(sh.n_in) +
                           "_" + std::to_string(n_rows),
                       std::to_string(worst));
      }
    }
  }
}

// cuBLASLt's FP8 GEMM with outer-vector scales (prefill), directly and through cuda::gemm from
// bf16 activations, against the double reference over the same codes.
TEST_F(CudaF8, GemmMatchesTheScalarReference) {
  CU_ASSIGN_OR_FAIL(cuda::CublasLt lt, cuda::CublasLt::create(0));
  CU_ASSIGN_OR_FAIL(const bool supported, cuda::gemm_f8_supported(lt));
  std::printf("cuBLASLt FP8 GEMM with outer-vector scales: %s\n",
              supported ? "supported" : "not supported (prefill dequantizes)");
  uint64_t seed = 90;
  struct Shape {
    int64_t n_tokens, n_out, n_in;
  };
  for (const Shape& sh :
       {Shape{16, 64, 128}, Shape{100, 576, 576}, Shape{37, 1000, 1536}, Shape{512, 2048, 4096}}) {
    SCOPED_TRACE(testing::Message() << sh.n_tokens << " x " << sh.n_out << " x " << sh.n_in);
    const Tensor w = test::random_weight(DType::kF32, sh.n_out, sh.n_in, ++seed);
    CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight_f8(w, 0, stream()));
    std::vector<uint8_t> wq;
    std::vector<float> ws;
    download_f8(dw, wq, ws);
    // bf16 activations (what cuda::gemm takes), quantized per row on the host as on the device.
    std::vector<float> x = spread_rows(sh.n_tokens, sh.n_in, ++seed);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i] = f32_to_bf16(x[i]);
      x[i] = bf16_to_f32(xb[i]);
    }
    std::vector<uint8_t> xq(x.size());
    std::vector<float> xs(static_cast<size_t>(sh.n_tokens));
    quantize_rows_f8e4m3(x.data(), sh.n_tokens, sh.n_in, xq.data(), xs.data());
    std::vector<double> mag;
    const std::vector<float> ref =
        f8_reference(wq, ws, xq, xs, sh.n_tokens, sh.n_out, sh.n_in, nullptr, &mag);
    const size_t ny = static_cast<size_t>(sh.n_tokens * sh.n_out);
    auto check = [&](const std::vector<float>& y) {
      for (size_t i = 0; i < ny; ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref[i]), 1e-3 * mag[i] + 1e-6)
            << "element " << i << ": " << y[i] << " vs " << ref[i];
      }
    };
    if (supported) {
      cuda::DeviceBuffer dxq = upload(xq), dxs = upload(xs), dy = poisoned<float>(ny);
      CU_ASSERT_OK(cuda::gemm_f8(lt, dw, dxq.as<uint8_t>(), dxs.as<float>(), sh.n_tokens,
                                 DType::kF32, dy.data(), stream()));
      check(download<float>(dy, ny));
    }
    // Through cuda::gemm (FP8 where supported, else the dequantized weights: then only the
    // activations' rounding differs, so the bound is the e4m3 step).
    cuda::DeviceBuffer dx = upload(xb), dy = poisoned<float>(ny);
    CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer wsb,
                      cuda::DeviceBuffer::create(cuda::gemm_workspace_bytes(dw), 0, stream()));
    CU_ASSERT_OK(cuda::gemm(lt, dw, dx.as<uint16_t>(), sh.n_tokens, DType::kF32, dy.data(), 0.0f,
                            wsb.data(), wsb.bytes(), stream()));
    const std::vector<float> y = download<float>(dy, ny);
    if (supported) {
      check(y);
    } else {
      for (size_t i = 0; i < ny; ++i) ASSERT_LE(std::fabs(y[i] - ref[i]), 0.07 * mag[i] + 1e-6);
    }
  }
}

// The prefill fallback where cuBLASLt has no FP8 GEMM: the weight as bf16, each element its code
// times its row's scale rounded once, into rows of ld_out.
TEST_F(CudaF8, DequantizedWeightsAreTheCodesTimesTheirScales) {
  const int64_t n_out = 37, n_in = 320, ld = 328;
  const Tensor w = test::random_weight(DType::kF32, n_out, n_in, 3);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight_f8(w, 0, stream()));
  std::vector<uint8_t> wq;
  std::vector<float> ws;
  download_f8(dw, wq, ws);
  cuda::DeviceBuffer out = poisoned<uint16_t>(static_cast<size_t>(n_out * ld));
  CU_ASSERT_OK(cuda::dequantize_to_bf16(dw, out.as<uint16_t>(), ld, stream()));
  const std::vector<uint16_t> b = download<uint16_t>(out, static_cast<size_t>(n_out * ld));
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t c = 0; c < n_in; ++c) {
      const float want =
          f8e4m3_to_f32(wq[static_cast<size_t>(r * n_in + c)]) * ws[static_cast<size_t>(r)];
      ASSERT_EQ(b[static_cast<size_t>(r * ld + c)], f32_to_bf16(want)) << r << ", " << c;
    }
  }
}

TEST_F(CudaF8, RandomWeightsHoldNoNanAndMultiplyAsUploadedOnes) {
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw,
                    cuda::random_device_weight(DType::kF8E4M3, 257, 1024, 5, 0, stream()));
  std::vector<uint8_t> wq;
  std::vector<float> ws;
  download_f8(dw, wq, ws);
  size_t nan = 0, zero = 0;
  for (uint8_t b : wq) {
    nan += (b & 0x7f) == 0x7f ? 1 : 0;
    zero += (b & 0x7f) == 0 ? 1 : 0;
  }
  EXPECT_EQ(nan, 0u);
  EXPECT_EQ(zero, 0u);
  for (float s : ws) EXPECT_TRUE(s >= 5e-5f && s < 1.5e-4f) << s;
  const std::vector<float> x = spread_rows(2, 1024, 6);
  std::vector<uint8_t> xq(x.size());
  std::vector<float> xs(2);
  quantize_rows_f8e4m3(x.data(), 2, 1024, xq.data(), xs.data());
  std::vector<double> mag;
  const std::vector<float> ref = f8_reference(wq, ws, xq, xs, 2, 257, 1024, nullptr, &mag);
  cuda::DeviceBuffer dxq = upload(xq), dxs = upload(xs), dy = poisoned<float>(2 * 257);
  CU_ASSERT_OK(cuda::matvec_f8(dw, dxq.as<uint8_t>(), dxs.as<float>(), 2, nullptr, dy.as<float>(),
                               stream()));
  const std::vector<float> y = download<float>(dy, 2 * 257);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i] - ref[i]), 1e-4 * mag[i] + 1e-6);
}

TEST_F(CudaF8, BadArgumentsAreRefusedByName) {
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight f8,
                    cuda::random_device_weight(DType::kF8E4M3, 32, 128, 5, 0, stream()));
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight bf,
                    cuda::random_device_weight(DType::kBF16, 32, 128, 5, 0, stream()));
  cuda::DeviceBuffer xq = poisoned<uint8_t>(9 * 128), xs = poisoned<float>(9),
                     y = poisoned<float>(9 * 32);
  auto expect = [](const Status& st, const char* what) {
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  expect(cuda::matvec_f8(f8, xq.as<uint8_t>(), xs.as<float>(), 0, nullptr, y.as<float>(), stream()),
         "0 rows");
  expect(cuda::matvec_f8(f8, xq.as<uint8_t>(), xs.as<float>(), 9, nullptr, y.as<float>(), stream()),
         "9 rows");
  expect(cuda::matvec_f8(bf, xq.as<uint8_t>(), xs.as<float>(), 1, nullptr, y.as<float>(), stream()),
         "bf16");
  expect(cuda::matvec_f8(f8, xq.as<uint8_t>() + 1, xs.as<float>(), 1, nullptr, y.as<float>(),
                         stream()),
         "aligned");
  expect(cuda::quantize_rows_f8(xs.data(), DType::kF16, 1, 8, 8, xq.as<uint8_t>(), xs.as<float>(),
                                stream()),
         "f16");
  auto r = cuda::random_device_weight(DType::kF8E4M3, 4, 100, 1, 0, stream());
  ASSERT_FALSE(r.ok());
  // f8 weights go through the matvecs only (matvec_f8, and matvec / matvec_rms_norm as weights
  // only): the other ops name the layout.
  expect(cuda::matvec_batch(f8, reinterpret_cast<const uint16_t*>(xs.data()), 1, y.as<float>(),
                            stream()),
         "f8_e4m3");
  expect(cuda::get_rows(f8, reinterpret_cast<const int32_t*>(xs.data()), 1, DType::kF32,
                        y.as<float>(), stream()),
         "f8_e4m3");
}

}  // namespace
}  // namespace rinfer
