// Matrix-vector (decode), dequantization and the cuBLASLt GEMM (prefill) against the CPU scalar
// reference cpu::matmul(kReference) on random weights of every device layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "core/cuda/cublas_lt.h"
#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/model_ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

class CudaMatvec : public test::CudaTest {
 protected:
  // y_ref[n_tokens, n_out] = x W^T by the CPU scalar reference.
  std::vector<float> reference(const Tensor& w, const std::vector<float>& x, int64_t n_tokens) {
    cpu::OpContext ctx;
    ctx.impl = cpu::Impl::kReference;
    std::vector<float> y(static_cast<size_t>(n_tokens * w.dim(0)));
    const Status st = cpu::matmul(ctx, w, x.data(), n_tokens, y.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    return y;
  }
};

struct Shape {
  int64_t n_out, n_in;
};

// Rows are split over 1, 2 or 4 warps (split-K: matvec_split for f32 activations, 1 or 2 from
// matvec_split_q16 for int16 ones): the shapes cover each, with a partial last row group and
// (odd group counts at split 2) a block whose second group has no rows.
std::vector<Shape> shapes_for(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      // 2048 and wider: eight rows a warp (matvec.cu's kWide).
      return {{1, 1},      {37, 100},   {5, 33},    {129, 4096},
              {1000, 257}, {4096, 512}, {37, 1000}, {37, 2048}};
    case DType::kQ4_K:
    case DType::kQ6_K: return {{1, 256}, {37, 768}, {130, 4096}, {1001, 512}, {41, 2048}};
    default:
      // The Q8_0 / Q4_0 streaming kernel takes rows of 32 to 256 chunks (a power of two) and a
      // whole number of its stages: 136 x 4096 (Q4_0: stages of 8 rows, Q8_0: 4), 96 x 1024
      // (Q4_0: 32 rows a stage), and 12288 x 4096, where blocks wrap around their ring of
      // copies; 130 and 3 rows, and 14336 columns, keep the register kernel.
      return {{1, 32},    {37, 96},    {130, 4096}, {1001, 544}, {3, 14336},   {37, 1056},
              {41, 2080}, {136, 4096}, {64, 14336}, {96, 1024},  {12288, 4096}};
  }
}

TEST_F(CudaMatvec, EveryLayoutMatchesTheReference) {
  uint64_t seed = 100;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K, DType::kQ5_0, DType::kQ6_K}) {
    for (const Shape& s : shapes_for(t)) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(s.n_out) + ", " +
                   std::to_string(s.n_in) + "]");
      const Tensor w = test::random_weight(t, s.n_out, s.n_in, ++seed);
      CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
      const bool converted = t == DType::kQ5_0 || t == DType::kQ6_K;
      EXPECT_EQ(dw.dtype, converted ? DType::kBF16 : t);
      EXPECT_EQ(dw.source_dtype, t);
      const auto x = test::random_floats(static_cast<size_t>(s.n_in), ++seed);
      const auto add = test::random_floats(static_cast<size_t>(s.n_out), ++seed);
      cuda::DeviceBuffer dx = upload(x), dadd = upload(add);
      cuda::DeviceBuffer dy = poisoned<float>(static_cast<size_t>(s.n_out));
      CU_ASSERT_OK(cuda::matvec(dw, dx.as<float>(), nullptr, dy.as<float>(), stream()));
      std::vector<float> y = download<float>(dy, static_cast<size_t>(s.n_out));
      EXPECT_EQ(test::count_non_finite(y), 0u);
      // The converted layouts hold bf16-rounded weights: compare with those.
      Tensor wref = w;
      if (converted) {
        CU_ASSIGN_OR_FAIL(Tensor wf, w.to_f32());
        std::vector<float> r(wf.data_as<float>(), wf.data_as<float>() + wf.numel());
        CU_ASSIGN_OR_FAIL(wref, Tensor::from_f32(w.shape(), test::round_bf16(r)));
      }
      const std::vector<float> ref = reference(wref, x, 1);
      EXPECT_LT(test::rel_l2(y, ref), 1e-5);
      // Fused residual add, in place on the addend.
      CU_ASSERT_OK(cuda::matvec(dw, dx.as<float>(), dadd.as<float>(), dadd.as<float>(), stream()));
      y = download<float>(dadd, static_cast<size_t>(s.n_out));
      std::vector<float> ref_add(ref.size());
      for (size_t i = 0; i < ref.size(); ++i) ref_add[i] = ref[i] + add[i];
      EXPECT_LT(test::rel_l2(y, ref_add), 1e-5);
    }
  }
}

// The small-batch matvec (decode steps of up to 8 sequences): every layout it takes, 1 to 8 rows
// of bf16 activations (each row bucket, partial ones too), rows whose count is no multiple of a
// block's four, against the scalar reference on the same bf16 activations.
TEST_F(CudaMatvec, SmallBatchMatchesTheReference) {
  uint64_t seed = 700;
  for (DType t : {DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K}) {
    const bool k = t == DType::kQ4_K;
    const Shape shapes[] = {{1, k ? 256 : 32},
                            {37, k ? 768 : 96},
                            {130, 4096},
                            {1001, k ? 512 : 544},
                            {3, k ? 2048 : 1000}};
    for (const Shape& s : shapes) {
      if (s.n_in % 32 != 0 && t != DType::kBF16 && t != DType::kF16) continue;
      const Tensor w = test::random_weight(t, s.n_out, s.n_in, ++seed);
      CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
      ASSERT_TRUE(cuda::matvec_batch_supported(dw));
      for (int64_t rows : {1, 2, 3, 4, 5, 8}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(s.n_out) + ", " +
                     std::to_string(s.n_in) + "] x " + std::to_string(rows));
        const auto x =
            test::round_bf16(test::random_floats(static_cast<size_t>(rows * s.n_in), ++seed));
        std::vector<uint16_t> xb(x.size());
        for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
        cuda::DeviceBuffer dx = upload(xb);
        const size_t n_y = static_cast<size_t>(rows * s.n_out);
        // One row more than asked, poisoned: rows past n_rows stay untouched.
        cuda::DeviceBuffer dy = poisoned<float>(n_y + static_cast<size_t>(s.n_out));
        CU_ASSERT_OK(cuda::matvec_batch(dw, dx.as<uint16_t>(), rows, dy.as<float>(), stream()));
        const std::vector<float> all = download<float>(dy, n_y + static_cast<size_t>(s.n_out));
        const std::vector<float> y(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n_y));
        EXPECT_EQ(test::count_non_finite(y), 0u);
        EXPECT_EQ(test::count_non_finite(std::vector<float>(
                      all.begin() + static_cast<std::ptrdiff_t>(n_y), all.end())),
                  static_cast<size_t>(s.n_out));
        EXPECT_LT(test::rel_l2(y, reference(w, x, rows)), 1e-5);
      }
    }
  }
  // What it refuses.
  const Tensor w = test::random_weight(DType::kBF16, 16, 36, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight odd, cuda::upload_weight(w, 0, stream()));
  EXPECT_FALSE(cuda::matvec_batch_supported(odd));
  const Tensor wf = test::random_weight(DType::kF32, 16, 32, 2);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight f32, cuda::upload_weight(wf, 0, stream()));
  EXPECT_FALSE(cuda::matvec_batch_supported(f32));
  const Tensor wq = test::random_weight(DType::kQ8_0, 16, 64, 3);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight q, cuda::upload_weight(wq, 0, stream()));
  cuda::DeviceBuffer dx = poisoned<uint16_t>(9 * 64 + 8);
  cuda::DeviceBuffer dy = poisoned<float>(9 * 16);
  for (int64_t rows : {0, 9}) {
    EXPECT_EQ(cuda::matvec_batch(q, dx.as<uint16_t>(), rows, dy.as<float>(), stream()).code(),
              StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(cuda::matvec_batch(q, dx.as<uint16_t>() + 1, 2, dy.as<float>(), stream()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::matvec_batch(f32, dx.as<uint16_t>(), 2, dy.as<float>(), stream()).code(),
            StatusCode::kInvalidArgument);
}

// Both Q8_0 / Q4_0 kernels (the streaming one wherever its shape rules allow, and the register
// one) on every shape.
constexpr cuda::MatvecKernel kBothKernels[] = {cuda::MatvecKernel::kAlways,
                                               cuda::MatvecKernel::kNever};

TEST_F(CudaMatvec, Int16ActivationPathMatchesTheReference) {
  uint64_t seed = 300;
  for (const cuda::MatvecKernel mk : kBothKernels) {
    cuda::apply_kernel_config({.matvec_stream = mk});
    SCOPED_TRACE(mk == cuda::MatvecKernel::kAlways ? "streaming kernel" : "register kernel");
    for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K}) {
      if (mk == cuda::MatvecKernel::kNever && t != DType::kQ8_0 && t != DType::kQ4_0) continue;
      EXPECT_TRUE(cuda::matvec_q16_supported(t));
      for (const Shape& s : shapes_for(t)) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(s.n_out) + ", " +
                     std::to_string(s.n_in) + "]");
        const Tensor w = test::random_weight(t, s.n_out, s.n_in, ++seed);
        CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
        // Activations with a spread of magnitudes (an outlier per block, as real ones have).
        auto x = test::random_floats(static_cast<size_t>(s.n_in), ++seed, -2.0f, 2.0f);
        for (size_t i = 0; i < x.size(); i += 37) x[i] *= 8.0f;
        const auto add = test::random_floats(static_cast<size_t>(s.n_out), ++seed);
        cuda::DeviceBuffer dx = upload(x), dadd = upload(add);
        const size_t qb = cuda::quantized_activation_bytes(s.n_in);
        CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer qbuf, cuda::DeviceBuffer::create(qb, 0, stream()));
        ASSERT_EQ(cudaMemsetAsync(qbuf.data(), 0xff, qb, stream()), cudaSuccess);
        CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qa,
                          cuda::quantized_activation_in(qbuf.data(), qb, s.n_in));
        CU_ASSERT_OK(cuda::quantize_activation(dx.as<float>(), qa, stream()));
        const std::vector<float> ref = reference(w, x, 1);
        cuda::DeviceBuffer dy = poisoned<float>(static_cast<size_t>(s.n_out));
        CU_ASSERT_OK(cuda::matvec_q16(dw, qa, nullptr, dy.as<float>(), stream()));
        const std::vector<float> y = download<float>(dy, static_cast<size_t>(s.n_out));
        EXPECT_EQ(test::count_non_finite(y), 0u);
        // The int16 rounding of x moves x_j by at most step_j / 2 (step = its block's absmax /
        // 32767), so |y_i - ref_i| <= sum_j |W_ij| step_j / 2, plus f32 accumulation error.
        CU_ASSIGN_OR_FAIL(Tensor wf, w.to_f32());
        std::vector<double> half_step(x.size());
        for (size_t b = 0; b < x.size(); b += 32) {
          double amax = 0.0;
          for (size_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs(double{x[j]}));
          for (size_t j = b; j < b + 32; ++j) half_step[j] = amax / 32767.0 / 2.0;
        }
        size_t over = 0;
        for (int64_t i = 0; i < s.n_out; ++i) {
          double bound = 0.0, mag = 0.0;
          for (int64_t j = 0; j < s.n_in; ++j) {
            const double wij = std::fabs(double{wf.data_as<float>()[i * s.n_in + j]});
            bound += wij * half_step[static_cast<size_t>(j)];
            mag += wij * std::fabs(double{x[static_cast<size_t>(j)]});
          }
          const size_t ii = static_cast<size_t>(i);
          if (std::fabs(double{y[ii]} - double{ref[ii]}) > 1.01 * bound + 1e-6 * mag) ++over;
        }
        EXPECT_EQ(over, 0u) << "outputs past the int16 rounding bound";
        EXPECT_LT(test::rel_l2(y, ref), 1e-3);
        CU_ASSERT_OK(cuda::matvec_q16(dw, qa, dadd.as<float>(), dadd.as<float>(), stream()));
        const std::vector<float> ya = download<float>(dadd, static_cast<size_t>(s.n_out));
        std::vector<float> ref_add(ref.size());
        for (size_t i = 0; i < ref.size(); ++i) ref_add[i] = ref[i] + add[i];
        EXPECT_LT(test::rel_l2(ya, ref_add), 1e-3);
      }
    }
  }
  cuda::apply_kernel_config({});
  // Layouts without an integer path, and mismatched sizes, are errors.
  const Tensor wb = test::random_weight(DType::kBF16, 4, 64, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight db, cuda::upload_weight(wb, 0, stream()));
  const size_t qb = cuda::quantized_activation_bytes(64);
  CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer qbuf, cuda::DeviceBuffer::create(qb, 0, stream()));
  CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qa,
                    cuda::quantized_activation_in(qbuf.data(), qb, 64));
  cuda::DeviceBuffer y = poisoned<float>(8);
  EXPECT_EQ(cuda::matvec_q16(db, qa, nullptr, y.as<float>(), stream()).code(),
            StatusCode::kInvalidArgument);
  const Tensor wq = test::random_weight(DType::kQ4_0, 4, 96, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dq, cuda::upload_weight(wq, 0, stream()));
  EXPECT_EQ(cuda::matvec_q16(dq, qa, nullptr, y.as<float>(), stream()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(cuda::quantized_activation_in(qbuf.data(), qb, 48).ok());
}

// The split norm (matvec_q16_res_norm, then matvec_q16 with a SplitNorm) against the same
// matrices with the norm kernel between them (matvec_q16, rms_norm_q16, matvec_q16), and both
// against the CPU reference in f32: the producer's 256- and 512-thread blocks (split 1 and 2),
// consumers with a partial last row group, parts padded to a multiple of 4 (e = 96), and the
// Llama-3-8B width (consumer split 2, 128 parts: every lane loads some); and with ffn_down's
// rows (14336) and a consumer of 264 rows (the Q8_0 / Q4_0 streaming kernel).
TEST_F(CudaMatvec, SplitNormMatchesTheNormKernelAndTheReference) {
  uint64_t seed = 700;
  constexpr float kEps = 1e-5f;
  for (const cuda::MatvecKernel mk : kBothKernels) {
    cuda::apply_kernel_config({.matvec_stream = mk});
    SCOPED_TRACE(mk == cuda::MatvecKernel::kAlways ? "streaming kernel" : "register kernel");
    for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K}) {
      if (mk == cuda::MatvecKernel::kNever && t != DType::kQ8_0 && t != DType::kQ4_0) continue;
      for (const auto& [e, n_in, n_c] : {std::tuple<int64_t, int64_t, int64_t>{256, 512, 37},
                                         {512, 4608, 130},
                                         {96, 256, 37},
                                         {4096, 4096, 130},
                                         {4096, 14336, 264}}) {
        if (t == DType::kQ4_K && e % 256 != 0) continue;  // the consumer's rows are super-blocks
        SCOPED_TRACE(std::string(dtype_name(t)) + " e " + std::to_string(e) + " n_in " +
                     std::to_string(n_in));
        const Tensor wp = test::random_weight(t, e, n_in, ++seed);
        const Tensor wc = test::random_weight(t, n_c, e, ++seed);
        CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dp, cuda::upload_weight(wp, 0, stream()));
        CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dc, cuda::upload_weight(wc, 0, stream()));
        const auto x = test::random_floats(static_cast<size_t>(n_in), ++seed, -2.0f, 2.0f);
        const auto res = test::random_floats(static_cast<size_t>(e), ++seed, -3.0f, 3.0f);
        const auto g = test::random_floats(static_cast<size_t>(e), ++seed, 0.5f, 1.5f);
        cuda::DeviceBuffer dx = upload(x), dres = upload(res), dres2 = upload(res), dg = upload(g);
        const size_t qb = cuda::quantized_activation_bytes(std::max(e, n_in));
        CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer qin, cuda::DeviceBuffer::create(qb, 0, stream()));
        CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer qout, cuda::DeviceBuffer::create(qb, 0, stream()));
        ASSERT_EQ(cudaMemsetAsync(qout.data(), 0xff, qb, stream()), cudaSuccess);
        CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qa,
                          cuda::quantized_activation_in(qin.data(), qb, n_in));
        CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qo,
                          cuda::quantized_activation_in(qout.data(), qb, e));
        CU_ASSERT_OK(cuda::quantize_activation(dx.as<float>(), qa, stream()));
        cuda::DeviceBuffer parts = poisoned<float>(static_cast<size_t>(cuda::split_norm_parts(e)));
        cuda::DeviceBuffer y = poisoned<float>(static_cast<size_t>(n_c));
        // The split norm.
        CU_ASSERT_OK(cuda::matvec_q16_res_norm(dp, qa, dres.as<float>(), dg.as<float>(), qo,
                                               parts.as<float>(), stream()));
        const cuda::SplitNorm sn{parts.as<float>(), e, kEps};
        CU_ASSERT_OK(cuda::matvec_q16(dc, qo, nullptr, y.as<float>(), stream(), &sn));
        // The norm kernel between the same matrices.
        cuda::DeviceBuffer o = poisoned<float>(static_cast<size_t>(e));
        cuda::DeviceBuffer h = poisoned<float>(static_cast<size_t>(e));
        cuda::DeviceBuffer y2 = poisoned<float>(static_cast<size_t>(n_c));
        CU_ASSERT_OK(cuda::matvec_q16(dp, qa, nullptr, o.as<float>(), stream()));
        CU_ASSERT_OK(cuda::rms_norm_q16(o.as<float>(), dres2.as<float>(), dg.as<float>(), e, kEps,
                                        h.as<float>(), qo, stream()));
        CU_ASSERT_OK(cuda::matvec_q16(dc, qo, nullptr, y2.as<float>(), stream()));
        const auto r1 = download<float>(dres, static_cast<size_t>(e));
        const auto r2 = download<float>(dres2, static_cast<size_t>(e));
        const auto yv = download<float>(y, static_cast<size_t>(n_c));
        const auto y2v = download<float>(y2, static_cast<size_t>(n_c));
        const auto pv = download<float>(parts, static_cast<size_t>(cuda::split_norm_parts(e)));
        EXPECT_EQ(test::count_non_finite(yv), 0u);
        EXPECT_LT(test::rel_l2(r1, r2), 1e-6);
        // Both carry the int16 rounding (relative ~1.5e-5) of x, scaled differently (residual * w
        // here, times 1 / rms there): a few codes differ by one step.
        EXPECT_LT(test::rel_l2(yv, y2v), 5e-5);
        // Each part is its 32 residual rows' sum of squares.
        for (int64_t b = 0; b < e / 32; ++b) {
          double ss = 0.0;
          for (int64_t i = b * 32; i < b * 32 + 32; ++i) ss += double{r1[i]} * r1[i];
          EXPECT_NEAR(pv[static_cast<size_t>(b)], ss, 1e-5 * ss) << "part " << b;
        }
        for (size_t b = static_cast<size_t>(e / 32); b < pv.size(); ++b) EXPECT_EQ(pv[b], 0.0f);
        // The CPU reference in f32: residual + Wp x, its RMSNorm times g, then Wc.
        const std::vector<float> px = reference(wp, x, 1);
        std::vector<float> rr(static_cast<size_t>(e)), hr(static_cast<size_t>(e));
        double ss = 0.0;
        for (size_t i = 0; i < rr.size(); ++i) {
          rr[i] = res[i] + px[i];
          ss += double{rr[i]} * rr[i];
        }
        const double sc = 1.0 / std::sqrt(ss / static_cast<double>(e) + kEps);
        for (size_t i = 0; i < hr.size(); ++i) hr[i] = static_cast<float>(rr[i] * sc * g[i]);
        EXPECT_LT(test::rel_l2(r1, rr), 1e-3);
        EXPECT_LT(test::rel_l2(yv, reference(wc, hr, 1)), 1e-3);
      }
    }
  }
  cuda::apply_kernel_config({});
  // Bad arguments: rows not a multiple of 32, the output on x's storage, no parts, a norm of
  // the wrong length.
  const Tensor w = test::random_weight(DType::kQ4_0, 48, 64, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
  const size_t qb = cuda::quantized_activation_bytes(64);
  CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer q1, cuda::DeviceBuffer::create(qb, 0, stream()));
  CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qa, cuda::quantized_activation_in(q1.data(), qb, 64));
  cuda::DeviceBuffer r = poisoned<float>(64), parts = poisoned<float>(4);
  // 48 rows: no int16 activation of 48 elements exists; the output gets its own storage.
  CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer q3, cuda::DeviceBuffer::create(qb, 0, stream()));
  CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation q48,
                    cuda::quantized_activation_in(q3.data(), qb, 32));
  EXPECT_EQ(cuda::matvec_q16_res_norm(dw, qa, r.as<float>(), r.as<float>(), q48, parts.as<float>(),
                                      stream())
                .code(),
            StatusCode::kInvalidArgument);
  const Tensor w64 = test::random_weight(DType::kQ4_0, 64, 64, 2);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight d64, cuda::upload_weight(w64, 0, stream()));
  EXPECT_EQ(cuda::matvec_q16_res_norm(d64, qa, r.as<float>(), r.as<float>(), qa, parts.as<float>(),
                                      stream())
                .code(),
            StatusCode::kInvalidArgument);
  CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer q2, cuda::DeviceBuffer::create(qb, 0, stream()));
  CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qo, cuda::quantized_activation_in(q2.data(), qb, 64));
  EXPECT_EQ(cuda::matvec_q16_res_norm(d64, qa, r.as<float>(), r.as<float>(), qo, nullptr, stream())
                .code(),
            StatusCode::kInvalidArgument);
  const cuda::SplitNorm bad{parts.as<float>(), 32, 1e-5f};
  EXPECT_EQ(cuda::matvec_q16(d64, qa, nullptr, r.as<float>(), stream(), &bad).code(),
            StatusCode::kInvalidArgument);
}

// matvec_rms_norm (the 16-bit layouts): W (rms_norm(x) * g) against the CPU reference on the
// normed row, for narrow and wide rows (four and eight rows a warp) and each split-K.
TEST_F(CudaMatvec, RmsNormedInputMatchesTheReference) {
  uint64_t seed = 900;
  constexpr float kEps = 1e-6f;
  for (DType t : {DType::kBF16, DType::kF16}) {
    EXPECT_TRUE(cuda::matvec_rms_norm_supported(t));
    for (const Shape& sh :
         {Shape{37, 576}, Shape{1000, 576}, Shape{130, 4096}, Shape{4096, 512}, Shape{41, 2048}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(sh.n_out) + ", " +
                   std::to_string(sh.n_in) + "]");
      const Tensor w = test::random_weight(t, sh.n_out, sh.n_in, ++seed);
      CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
      const auto x = test::random_floats(static_cast<size_t>(sh.n_in), ++seed, -3.0f, 3.0f);
      const auto g = test::random_floats(static_cast<size_t>(sh.n_in), ++seed, 0.5f, 1.5f);
      cuda::DeviceBuffer dx = upload(x), dg = upload(g);
      cuda::DeviceBuffer dy = poisoned<float>(static_cast<size_t>(sh.n_out));
      CU_ASSERT_OK(cuda::matvec_rms_norm(dw, dx.as<float>(), dg.as<float>(), kEps, dy.as<float>(),
                                         stream()));
      const auto y = download<float>(dy, static_cast<size_t>(sh.n_out));
      double ss = 0.0;
      for (float v : x) ss += double{v} * v;
      const double sc = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + kEps);
      std::vector<float> h(x.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(x[i] * sc * g[i]);
      EXPECT_EQ(test::count_non_finite(y), 0u);
      EXPECT_LT(test::rel_l2(y, reference(w, h, 1)), 1e-5);
    }
  }
  const Tensor wq = test::random_weight(DType::kQ8_0, 4, 64, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dq, cuda::upload_weight(wq, 0, stream()));
  EXPECT_FALSE(cuda::matvec_rms_norm_supported(DType::kQ8_0));
  cuda::DeviceBuffer x = poisoned<float>(64), y = poisoned<float>(4);
  EXPECT_EQ(cuda::matvec_rms_norm(dq, x.as<float>(), x.as<float>(), 1e-6f, y.as<float>(), stream())
                .code(),
            StatusCode::kInvalidArgument);
  const Tensor wb = test::random_weight(DType::kBF16, 64, 64, 2);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight db, cuda::upload_weight(wb, 0, stream()));
  EXPECT_EQ(cuda::matvec_rms_norm(db, x.as<float>(), x.as<float>(), 1e-6f, x.as<float>(), stream())
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CudaMatvec, DequantizeToBf16MatchesTheCpuDequantization) {
  uint64_t seed = 500;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K}) {
    for (const Shape& s : shapes_for(t)) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(s.n_out) + ", " +
                   std::to_string(s.n_in) + "]");
      const Tensor w = test::random_weight(t, s.n_out, s.n_in, ++seed);
      CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
      const int64_t ld = (s.n_in + 7) / 8 * 8 + 8;  // a padded leading dim
      const size_t n = static_cast<size_t>(s.n_out * ld);
      cuda::DeviceBuffer out = poisoned<uint16_t>(n);
      CU_ASSERT_OK(cuda::dequantize_to_bf16(dw, out.as<uint16_t>(), ld, stream()));
      const std::vector<float> got = test::bf16_to_f32(download<uint16_t>(out, n));
      CU_ASSIGN_OR_FAIL(Tensor wf, w.to_f32());
      std::vector<float> g, r;
      for (int64_t i = 0; i < s.n_out; ++i) {
        for (int64_t j = 0; j < s.n_in; ++j) {
          g.push_back(got[static_cast<size_t>(i * ld + j)]);
          r.push_back(wf.data_as<float>()[i * s.n_in + j]);
        }
      }
      EXPECT_EQ(test::count_non_finite(g), 0u);
      EXPECT_LT(test::rel_l2(g, r), 4e-3);  // bf16 rounding: <= 2^-9 per element
    }
  }
}

TEST_F(CudaMatvec, RejectsBadArguments) {
  const Tensor w = test::random_weight(DType::kQ4_0, 4, 64, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
  cuda::DeviceBuffer x = poisoned<float>(80);
  EXPECT_EQ(cuda::matvec(dw, nullptr, nullptr, x.as<float>(), stream()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::matvec(dw, x.as<float>() + 1, nullptr, x.as<float>() + 70, stream()).code(),
            StatusCode::kInvalidArgument);  // unaligned x
  EXPECT_EQ(cuda::matvec(cuda::DeviceWeight{}, x.as<float>(), nullptr, x.as<float>() + 64, stream())
                .code(),
            StatusCode::kInvalidArgument);
  CU_ASSIGN_OR_FAIL(Tensor ints, Tensor::empty({2, 8}, DType::kI32));
  EXPECT_EQ(cuda::upload_weight(ints, 0, stream()).status().code(), StatusCode::kUnsupported);
  CU_ASSIGN_OR_FAIL(Tensor v1, Tensor::empty({8}, DType::kF32));
  EXPECT_EQ(cuda::upload_weight(v1, 0, stream()).status().code(), StatusCode::kInvalidArgument);
}

class CudaGemm : public CudaMatvec {
 protected:
  void SetUp() override {
    CudaMatvec::SetUp();
    if (IsSkipped()) return;
    auto lt = cuda::CublasLt::create(0);
    ASSERT_TRUE(lt.ok()) << lt.status().to_string();
    lt_ = std::move(lt).value();
  }
  cuda::CublasLt lt_;
};

TEST_F(CudaGemm, Bf16AndQuantizedWeightsMatchTheReference) {
  uint64_t seed = 900;
  for (DType t : {DType::kBF16, DType::kF16, DType::kQ4_K, DType::kQ8_0, DType::kQ4_0}) {
    for (auto [n_tokens, n_out, n_in] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 256},
                                         {7, 1000, 512},
                                         {64, 384, 4096},
                                         {130, 4096, 1024}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(n_tokens) + "x" +
                   std::to_string(n_out) + "x" + std::to_string(n_in));
      const Tensor w = test::random_weight(t, n_out, n_in, ++seed);
      CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
      // bf16 activations; the reference sees the same rounded values.
      const auto x =
          test::round_bf16(test::random_floats(static_cast<size_t>(n_tokens * n_in), ++seed));
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
      cuda::DeviceBuffer dx = upload(xb);
      const size_t n_y = static_cast<size_t>(n_tokens * n_out);
      cuda::DeviceBuffer dy = poisoned<float>(n_y);
      CU_ASSIGN_OR_FAIL(
          cuda::DeviceBuffer ws,
          cuda::DeviceBuffer::create(cuda::gemm_workspace_bytes(dw) + 16, 0, stream()));
      CU_ASSERT_OK(cuda::gemm(lt_, dw, dx.as<uint16_t>(), n_tokens, DType::kF32, dy.data(), 0.0f,
                              ws.data(), ws.bytes(), stream()));
      const std::vector<float> y = download<float>(dy, n_y);
      EXPECT_EQ(test::count_non_finite(y), 0u);
      const std::vector<float> ref = reference(w, x, n_tokens);
      // bf16 weights are exact; others are rounded to bf16 for the tensor cores.
      EXPECT_LT(test::rel_l2(y, ref), t == DType::kBF16 ? 1e-5 : 1e-2);

      // bf16 output, and beta = 1 accumulation into an f32 output.
      cuda::DeviceBuffer dyb = poisoned<uint16_t>(n_y);
      CU_ASSERT_OK(cuda::gemm(lt_, dw, dx.as<uint16_t>(), n_tokens, DType::kBF16, dyb.data(), 0.0f,
                              ws.data(), ws.bytes(), stream()));
      const std::vector<float> yb = test::bf16_to_f32(download<uint16_t>(dyb, n_y));
      EXPECT_EQ(test::count_non_finite(yb), 0u);
      EXPECT_LT(test::rel_l2(yb, ref), 1e-2);
      CU_ASSERT_OK(cuda::gemm(lt_, dw, dx.as<uint16_t>(), n_tokens, DType::kF32, dy.data(), 1.0f,
                              ws.data(), ws.bytes(), stream()));
      const std::vector<float> y2 = download<float>(dy, n_y);
      std::vector<float> ref2(ref.size());
      for (size_t i = 0; i < ref.size(); ++i) ref2[i] = 2.0f * ref[i];
      EXPECT_LT(test::rel_l2(y2, ref2), t == DType::kBF16 ? 1e-5 : 1e-2);
    }
  }
}

// Weights made on the device (random_device_weight: what make_random_cuda_model builds) at the
// random SmolLM2 shape's matrices: the small-batch matvec and the GEMM against a CPU product
// over the downloaded Q8_0 quants and scales (int8 [n_out, n_in], f16 [n_out, n_in / 32]).
TEST_F(CudaGemm, DeviceMadeQ8_0WeightsMatchTheirDownloadedValues) {
  uint64_t seed = 1300;
  for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{1536, 576}, {576, 1536}, {960, 576},
                             {3072, 576}, {37, 4096}}) {
    CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::random_device_weight(DType::kQ8_0, n_out, n_in,
                                                                        ++seed, 0, stream()));
    const size_t n_w = static_cast<size_t>(n_out * n_in), n_s = n_w / 32;
    std::vector<int8_t> q(n_w);
    std::vector<uint16_t> sc(n_s);
    ASSERT_EQ(cudaMemcpy(q.data(), dw.data, n_w, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(sc.data(), dw.scales, n_s * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t rows : {1, 3, 8}) {
      SCOPED_TRACE("q8_0 [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "] x " +
                   std::to_string(rows));
      const auto x =
          test::round_bf16(test::random_floats(static_cast<size_t>(rows * n_in), ++seed));
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
      std::vector<float> ref(static_cast<size_t>(rows * n_out));
      for (int64_t b = 0; b < rows; ++b) {
        for (int64_t r = 0; r < n_out; ++r) {
          double acc = 0;
          for (int64_t i = 0; i < n_in; ++i) {
            const size_t at = static_cast<size_t>(r * n_in + i);
            const float s = f16_to_f32(sc[static_cast<size_t>(r * (n_in / 32) + i / 32)]);
            acc += static_cast<double>(q[at]) * s * x[static_cast<size_t>(b * n_in + i)];
          }
          ref[static_cast<size_t>(b * n_out + r)] = static_cast<float>(acc);
        }
      }
      cuda::DeviceBuffer dx = upload(xb);
      const size_t n_y = static_cast<size_t>(rows * n_out);
      cuda::DeviceBuffer dy = poisoned<float>(n_y);
      CU_ASSERT_OK(cuda::matvec_batch(dw, dx.as<uint16_t>(), rows, dy.as<float>(), stream()));
      const double mv = test::rel_l2(download<float>(dy, n_y), ref);
      CU_ASSIGN_OR_FAIL(
          cuda::DeviceBuffer ws,
          cuda::DeviceBuffer::create(cuda::gemm_workspace_bytes(dw) + 16, 0, stream()));
      cuda::DeviceBuffer dg = poisoned<float>(n_y);
      CU_ASSERT_OK(cuda::gemm(lt_, dw, dx.as<uint16_t>(), rows, DType::kF32, dg.data(), 0.0f,
                              ws.data(), ws.bytes(), stream()));
      const double gm = test::rel_l2(download<float>(dg, n_y), ref);
      std::printf("q8_0 [%lld, %lld] x %lld: small-batch matvec rel L2 %.2e, GEMM %.2e\n",
                  static_cast<long long>(n_out), static_cast<long long>(n_in),
                  static_cast<long long>(rows), mv, gm);
      EXPECT_LT(mv, 1e-5);
      EXPECT_LT(gm, 1e-2);
    }
  }
}

TEST_F(CudaGemm, F16OperandsAndWorkspaceChecks) {
  const int64_t m = 33, n = 300, k = 264;
  const auto w = test::random_floats(static_cast<size_t>(n * k), 1);
  const auto x = test::random_floats(static_cast<size_t>(m * k), 2);
  std::vector<uint16_t> wh(w.size()), xh(x.size());
  std::vector<float> wr(w.size()), xr(x.size());
  for (size_t i = 0; i < w.size(); ++i) {
    wh[i] = f32_to_f16(w[i]);
    wr[i] = f16_to_f32(wh[i]);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    xh[i] = f32_to_f16(x[i]);
    xr[i] = f16_to_f32(xh[i]);
  }
  cuda::DeviceBuffer dw = upload(wh), dx = upload(xh);
  cuda::DeviceBuffer dy = poisoned<float>(static_cast<size_t>(m * n));
  CU_ASSERT_OK(cuda::gemm_lowp(lt_, DType::kF16, dw.data(), k, dx.data(), k, m, n, k, DType::kF32,
                               dy.data(), 0.0f, stream()));
  const std::vector<float> y = download<float>(dy, static_cast<size_t>(m * n));
  CU_ASSIGN_OR_FAIL(Tensor wt, Tensor::from_f32({n, k}, wr));
  EXPECT_LT(test::rel_l2(y, reference(wt, xr, m)), 1e-5);

  const Tensor q = test::random_weight(DType::kQ4_K, 16, 256, 3);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dq, cuda::upload_weight(q, 0, stream()));
  EXPECT_EQ(
      cuda::gemm(lt_, dq, dx.as<uint16_t>(), 1, DType::kF32, dy.data(), 0.0f, nullptr, 0, stream())
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::gemm_lowp(lt_, DType::kF32, dw.data(), k, dx.data(), k, m, n, k, DType::kF32,
                            dy.data(), 0.0f, stream())
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rinfer
