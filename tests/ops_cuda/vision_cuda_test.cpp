// The vision kernels (vision_ops.h) and the cuDNN convolutions (conv_cudnn.h) against the CPU
// reference loops of ops/cpu/vision_ops.h on random data of odd sizes: the operands rounded to
// bf16 first, so the reference computes on exactly what the device sees, and the outputs, one
// bf16 rounding of f32 sums, within bf16's precision of it. Every output element is checked
// written (the buffers start as NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/cudnn.h"
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/vision_ops.h"
#include "ops/cuda/conv_cudnn.h"
#include "ops/cuda/vision_ops.h"

namespace rinfer {
namespace {

using cpu::Activation;

std::vector<uint16_t> to16(const std::vector<float>& v, DType dt) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = dt == DType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
  }
  return out;
}
std::vector<float> from16(const std::vector<uint16_t>& v, DType dt) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = dt == DType::kF16 ? f16_to_f32(v[i]) : bf16_to_f32(v[i]);
  }
  return out;
}

// Random values already representable in the 16-bit type (the reference sees the device's
// operands): bf16 values are f16 values too in these ranges only when rounded to both.
std::vector<float> random16(size_t n, uint64_t seed, float lo, float hi, DType dt) {
  return from16(to16(test::random_floats(n, seed, lo, hi), dt), dt);
}

const DType kTypes[] = {DType::kBF16, DType::kF16};

// bf16 outputs: each element within 1/128 of its magnitude plus an absolute floor scaled to the
// output's size (cancellation in long sums), and the whole within rel L2 5e-3.
void expect_bf16_close(const std::vector<float>& got, const std::vector<float>& ref,
                       const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(test::count_non_finite(got), 0u) << what;
  double scale = 0.0;
  for (float r : ref) scale = std::max(scale, double(std::fabs(r)));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = std::fabs(ref[i]) / 128.0 + 2e-3 * scale + 1e-6;
    if (std::fabs(double(got[i]) - ref[i]) > tol && bad++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", reference " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
  EXPECT_LT(test::rel_l2(got, ref), 5e-3) << what;
}

class CudaVisionOps : public test::CudaTest {
 protected:
  static cpu::OpContext ref_ctx() {
    cpu::OpContext c;
    c.impl = cpu::Impl::kReference;
    return c;
  }
};

struct ConvCase {
  int64_t n, h, w, c_in, c_out, k, stride;
  bool same;  // TensorFlow "same" padding (asymmetric for even totals), else k / 2
  bool bias, residual;
  Activation act;
};

cpu::Conv2dShape shape_of(const ConvCase& c, int64_t groups = 1) {
  cpu::Conv2dShape s;
  s.n = c.n;
  s.h = c.h;
  s.w = c.w;
  s.c_in = c.c_in;
  s.c_out = c.c_out;
  s.kh = s.kw = c.k;
  s.stride_h = s.stride_w = c.stride;
  s.groups = groups;
  if (c.same) {
    cpu::set_same_padding(s);
  } else {
    cpu::set_padding(s, c.k / 2);
  }
  return s;
}

std::string name_of(const ConvCase& c) {
  return std::to_string(c.n) + "x" + std::to_string(c.h) + "x" + std::to_string(c.w) + "x" +
         std::to_string(c.c_in) + "->" + std::to_string(c.c_out) + " k" + std::to_string(c.k) +
         " s" + std::to_string(c.stride) + (c.same ? " same" : "") + (c.bias ? " bias" : "") +
         (c.residual ? " residual" : "") + " " + std::string(cpu::activation_name(c.act));
}

TEST_F(CudaVisionOps, DepthwiseConvMatchesTheReference) {
  uint64_t seed = 1;
  for (const ConvCase& c : std::vector<ConvCase>{
           {1, 7, 9, 8, 8, 3, 1, false, true, false, Activation::kRelu6},
           {2, 15, 13, 24, 24, 3, 2, false, true, false, Activation::kRelu},
           {3, 17, 11, 40, 40, 5, 2, true, true, false, Activation::kRelu6},
           {1, 12, 12, 16, 16, 5, 1, true, false, false, Activation::kSilu},
           {2, 9, 10, 5, 5, 3, 2, true, true, false, Activation::kNone},  // c % 8 != 0
           {1, 6, 6, 3, 3, 3, 1, false, false, false, Activation::kRelu}}) {
    for (DType dt : kTypes) {
      SCOPED_TRACE(name_of(c) + " " + std::string(dtype_name(dt)));
      const cpu::Conv2dShape s = shape_of(c, c.c_in);
      const auto x = random16(static_cast<size_t>(c.n * c.h * c.w * c.c_in), ++seed, -2, 2, dt);
      const auto w = random16(static_cast<size_t>(c.c_in * c.k * c.k), ++seed, -1, 1, dt);
      const auto bias = test::random_floats(static_cast<size_t>(c.c_in), ++seed, -0.5f, 0.5f);
      const size_t out_n = static_cast<size_t>(c.n * s.out_h() * s.out_w() * c.c_in);
      std::vector<float> ref(out_n);
      ASSERT_TRUE(cpu::conv2d(ref_ctx(), s, x.data(), w.data(),
                              {c.bias ? bias.data() : nullptr, nullptr, c.act}, ref.data())
                      .ok());
      // The device's weights are tap-major: [k, k, c].
      std::vector<float> wt(w.size());
      for (int64_t ch = 0; ch < c.c_in; ++ch)
        for (int64_t t = 0; t < c.k * c.k; ++t)
          wt[static_cast<size_t>(t * c.c_in + ch)] = w[static_cast<size_t>(ch * c.k * c.k + t)];
      cuda::DeviceBuffer dx = upload(to16(x, dt)), dw = upload(to16(wt, dt)), db = upload(bias);
      cuda::DeviceBuffer dy = poisoned<uint16_t>(out_n);
      CU_ASSERT_OK(cuda::depthwise_conv2d(dt, s, dx.as<uint16_t>(), dw.as<uint16_t>(),
                                          c.bias ? db.as<float>() : nullptr, c.act,
                                          dy.as<uint16_t>(), stream()));
      expect_bf16_close(from16(download<uint16_t>(dy, out_n), dt), ref, "depthwise");
    }
  }
}

TEST_F(CudaVisionOps, CudnnConvMatchesTheReference) {
  auto h = cuda::CudnnHandle::create(0);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  auto ws = cuda::DeviceBuffer::create(size_t{64} << 20, 0, stream());
  ASSERT_TRUE(ws.ok());
  uint64_t seed = 100;
  for (const ConvCase& c : std::vector<ConvCase>{
           {2, 13, 11, 16, 24, 1, 1, false, true, true, Activation::kNone},   // a projection
           {3, 9, 7, 24, 40, 1, 1, false, true, false, Activation::kRelu6},   // an expansion
           {2, 15, 17, 8, 32, 3, 2, false, true, false, Activation::kRelu6},  // a stem
           {1, 14, 14, 8, 16, 3, 2, true, true, false, Activation::kRelu},    // "same", even
           {2, 11, 9, 32, 48, 3, 1, false, true, true, Activation::kRelu},    // bottleneck 3x3
           {1, 23, 21, 8, 64, 7, 2, false, true, false, Activation::kRelu},   // ResNet's stem
           {2, 10, 10, 64, 32, 1, 2, false, true, false, Activation::kNone},  // downsample
           {1, 5, 6, 16, 8, 3, 1, false, false, false, Activation::kSilu},
           {1, 8, 8, 16, 16, 3, 1, false, false, false, Activation::kNone}}) {
    for (const bool fuse : {true, false}) {
      for (DType dt : kTypes) {
        if (dt == DType::kF16 && !fuse) continue;  // the unfused pass is the same code in f16
        SCOPED_TRACE(name_of(c) + (fuse ? " fused " : " unfused ") + std::string(dtype_name(dt)));
        const cpu::Conv2dShape s = shape_of(c);
        const int64_t oh = s.out_h(), ow = s.out_w();
        const size_t out_n = static_cast<size_t>(c.n * oh * ow * c.c_out);
        const auto x = random16(static_cast<size_t>(c.n * c.h * c.w * c.c_in), ++seed, -1, 1, dt);
        const auto w =
            random16(static_cast<size_t>(c.c_out * c.k * c.k * c.c_in), ++seed, -0.5f, 0.5f, dt);
        const auto bias = test::random_floats(static_cast<size_t>(c.c_out), ++seed, -0.5f, 0.5f);
        const auto res = random16(out_n, ++seed, -1, 1, dt);
        std::vector<float> ref(out_n);
        ASSERT_TRUE(
            cpu::conv2d(ref_ctx(), s, x.data(), w.data(),
                        {c.bias ? bias.data() : nullptr, c.residual ? res.data() : nullptr, c.act},
                        ref.data())
                .ok());
        cuda::DeviceBuffer dx = upload(to16(x, dt)), dw = upload(to16(w, dt)), db = upload(bias),
                           dr = upload(to16(res, dt));
        cuda::DeviceBuffer dy = poisoned<uint16_t>(out_n);
        cuda::ConvBuffers b;
        b.x = dx.as<uint16_t>();
        b.w = dw.as<uint16_t>();
        b.bias = c.bias ? db.as<float>() : nullptr;
        b.residual = c.residual ? dr.as<uint16_t>() : nullptr;
        b.y = dy.as<uint16_t>();
        cuda::CudnnConvOptions o;
        o.fuse_epilogue = fuse;
        o.dtype = dt;
        auto conv = cuda::CudnnConv::create(*h, s, b, c.act, o, ws->data(), ws->bytes(), stream());
        ASSERT_TRUE(conv.ok()) << conv.status().to_string();
        if (!fuse) {
          EXPECT_FALSE(conv->fused());
        }
        // The candidates were timed on these buffers: poison y again before the real run.
        ASSERT_EQ(cudaMemsetAsync(dy.data(), 0xff, out_n * 2, stream()), cudaSuccess);
        CU_ASSERT_OK(conv->run(*h, b, ws->data(), stream()));
        expect_bf16_close(from16(download<uint16_t>(dy, out_n), dt), ref, conv->engine());
        // A plan made with a bias refuses buffers without one.
        if (c.bias) {
          cuda::ConvBuffers nb = b;
          nb.bias = nullptr;
          EXPECT_EQ(conv->run(*h, nb, ws->data(), stream()).code(), StatusCode::kInvalidArgument);
        }
      }
    }
  }
}

TEST_F(CudaVisionOps, CudnnConvRefusesWhatItCannotRun) {
  auto h = cuda::CudnnHandle::create(0);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  cuda::DeviceBuffer d = poisoned<uint16_t>(4096);
  cuda::ConvBuffers b;
  b.x = b.w = b.y = d.as<uint16_t>();
  cpu::Conv2dShape s;
  s.h = s.w = 4;
  s.c_in = 3;  // not a multiple of 8
  s.c_out = 8;
  auto r = cuda::CudnnConv::create(*h, s, b, Activation::kNone, {}, nullptr, 0, stream());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("multiples of 8"), std::string::npos);
  s.c_in = 8;
  s.kh = s.kw = 3;
  s.pad_top = 3;  // padding >= the kernel
  EXPECT_EQ(cuda::CudnnConv::create(*h, s, b, Activation::kNone, {}, nullptr, 0, stream())
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CudaVisionOps, PoolsMatchTheReference) {
  uint64_t seed = 200;
  for (auto [n, hh, ww, c] :
       {std::array<int64_t, 4>{1, 7, 7, 8}, {3, 13, 11, 20}, {2, 112, 112, 64}}) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(hh) + "x" + std::to_string(ww) + "x" +
                 std::to_string(c));
    for (DType dt : kTypes) {
      const auto x = random16(static_cast<size_t>(n * hh * ww * c), ++seed, -3, 3, dt);
      cuda::DeviceBuffer dx = upload(to16(x, dt));
      // The max pool of ResNet's stem: 3x3, stride 2, padding 1.
      const int64_t oh = (hh + 2 - 3) / 2 + 1, ow = (ww + 2 - 3) / 2 + 1;
      const size_t pn = static_cast<size_t>(n * oh * ow * c);
      std::vector<float> ref(pn);
      ASSERT_TRUE(cpu::max_pool2d(ref_ctx(), x.data(), n, hh, ww, c, 3, 2, 1, ref.data()).ok());
      cuda::DeviceBuffer dy = poisoned<uint16_t>(pn);
      CU_ASSERT_OK(cuda::max_pool2d(dt, dx.as<uint16_t>(), n, hh, ww, c, 3, 2, 1, dy.as<uint16_t>(),
                                    stream()));
      EXPECT_EQ(from16(download<uint16_t>(dy, pn), dt), ref);  // a max is exact
      std::vector<float> avg(static_cast<size_t>(n * c));
      cpu::global_avg_pool(ref_ctx(), x.data(), n, hh, ww, c, avg.data());
      cuda::DeviceBuffer da = poisoned<uint16_t>(avg.size());
      CU_ASSERT_OK(
          cuda::global_avg_pool(dt, dx.as<uint16_t>(), n, hh * ww, c, da.as<uint16_t>(), stream()));
      expect_bf16_close(from16(download<uint16_t>(da, avg.size()), dt), avg, "avg pool");
    }
  }
  EXPECT_EQ(cuda::max_pool2d(DType::kBF16, nullptr, 1, 4, 4, 8, 3, 2, 3, nullptr, stream()).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CudaVisionOps, ChannelEpilogueAndImagePacking) {
  const int64_t rows = 37, c = 24;
  for (DType dt : kTypes) {
    const auto y = random16(static_cast<size_t>(rows * c), 300, -4, 4, dt);
    const auto res = random16(y.size(), 301, -1, 1, dt);
    const auto scale = test::random_floats(static_cast<size_t>(c), 302, 0.5f, 2.0f);
    const auto shift = test::random_floats(static_cast<size_t>(c), 303, -1.0f, 1.0f);
    for (Activation act :
         {Activation::kNone, Activation::kRelu, Activation::kRelu6, Activation::kSilu}) {
      std::vector<float> ref(y.size());
      for (size_t i = 0; i < y.size(); ++i) {
        const size_t ch = i % static_cast<size_t>(c);
        double v = double(y[i]) * scale[ch] + shift[ch] + res[i];
        if (act == Activation::kRelu) v = std::max(v, 0.0);
        if (act == Activation::kRelu6) v = std::min(std::max(v, 0.0), 6.0);
        if (act == Activation::kSilu) v = v / (1.0 + std::exp(-v));
        ref[i] = static_cast<float>(v);
      }
      cuda::DeviceBuffer dy = upload(to16(y, dt)), dr = upload(to16(res, dt)), ds = upload(scale),
                         dsh = upload(shift);
      CU_ASSERT_OK(cuda::channel_epilogue(dt, dy.data(), rows, c, ds.as<float>(), dsh.as<float>(),
                                          dr.data(), act, stream()));
      expect_bf16_close(from16(download<uint16_t>(dy, y.size()), dt), ref,
                        std::string(cpu::activation_name(act)));
      // f32 rows (the head's logits + bias).
      cuda::DeviceBuffer fy = upload(y);
      std::vector<float> fref(y.size());
      for (size_t i = 0; i < y.size(); ++i) fref[i] = y[i] + shift[i % static_cast<size_t>(c)];
      CU_ASSERT_OK(cuda::channel_epilogue(DType::kF32, fy.data(), rows, c, nullptr, dsh.as<float>(),
                                          nullptr, Activation::kNone, stream()));
      EXPECT_LT(test::rel_l2(download<float>(fy, y.size()), fref), 1e-7);
    }
  }
  // 3 channels to 8, zeros after the third.
  const auto px = test::random_floats(5 * 3, 310, -2, 2);
  cuda::DeviceBuffer dp = upload(px);
  for (DType dt : kTypes) {
    cuda::DeviceBuffer out = poisoned<uint16_t>(5 * 8);
    CU_ASSERT_OK(cuda::pack_image(dt, dp.as<float>(), 5, 8, out.as<uint16_t>(), stream()));
    const auto got = from16(download<uint16_t>(out, 40), dt);
    const auto want = from16(to16(px, dt), dt);
    for (int p = 0; p < 5; ++p)
      for (int ch = 0; ch < 8; ++ch) EXPECT_EQ(got[p * 8 + ch], ch < 3 ? want[p * 3 + ch] : 0.0f);
  }
}

}  // namespace
}  // namespace rinfer
