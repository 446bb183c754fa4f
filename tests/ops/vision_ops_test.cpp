// The image classifiers' CPU ops (conv2d in every form, its fused epilogue, batch_norm,
// bias_activation, the pools): fast vs the float64 reference on random data of odd and round
// sizes, 1..3 threads, every SIMD target; the padding rules and hand-checked values.
#include "ops/cpu/vision_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

std::vector<float> rnd(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  return test::random_floats(static_cast<size_t>(n), seed, lo, hi);
}

struct ConvCase {
  const char* name;
  Conv2dShape s;
  bool same = false;  // TensorFlow "same" padding instead of s's
};

Conv2dShape shape(int64_t n, int64_t h, int64_t w, int64_t ci, int64_t co, int64_t k, int64_t st,
                  int64_t pad, int64_t groups = 1) {
  Conv2dShape s;
  s.n = n, s.h = h, s.w = w, s.c_in = ci, s.c_out = co, s.kh = s.kw = k,
  s.stride_h = s.stride_w = st;
  s.groups = groups;
  set_padding(s, pad);
  return s;
}

const ConvCase kCases[] = {
    {"pointwise", shape(2, 7, 5, 24, 40, 1, 1, 0)},
    {"pointwise odd", shape(1, 3, 11, 17, 33, 1, 1, 0)},
    {"pointwise strided", shape(1, 9, 9, 8, 12, 1, 2, 0)},
    {"stem 3x3 s2", shape(2, 17, 15, 3, 32, 3, 2, 1)},
    {"3x3 s1 odd channels", shape(1, 6, 7, 19, 21, 3, 1, 1)},
    {"7x7 s2 p3", shape(1, 23, 19, 3, 16, 7, 2, 3)},
    {"5x5 no padding", shape(1, 9, 8, 5, 7, 5, 1, 0)},
    {"depthwise 3x3", shape(2, 9, 7, 32, 32, 3, 1, 1, 32)},
    {"depthwise 3x3 s2 odd", shape(1, 13, 11, 37, 37, 3, 2, 1, 37)},
    {"depthwise 5x5 same s2", shape(1, 14, 14, 40, 40, 5, 2, 0, 40), true},
    {"depthwise 5x5 same s1 odd", shape(1, 7, 9, 19, 19, 5, 1, 0, 19), true},
    {"stem same s2 even", shape(1, 16, 16, 3, 8, 3, 2, 0), true},
    {"grouped", shape(1, 6, 6, 8, 12, 3, 1, 1, 4)},
    {"depthwise 1 channel", shape(1, 5, 5, 1, 1, 3, 1, 1, 1)},
    {"large pointwise (chunks)", shape(3, 28, 28, 16, 24, 1, 1, 0)},
    {"large 3x3 (chunks)", shape(2, 30, 30, 16, 16, 3, 1, 1)},
};

TEST(Conv2d, FastMatchesReferenceWithEveryEpilogue) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 100;
  for (const ConvCase& c : kCases) {
    Conv2dShape s = c.s;
    if (c.same) set_same_padding(s);
    ASSERT_TRUE(check_conv2d(s).ok()) << c.name << ": " << check_conv2d(s).to_string();
    const int64_t oh = s.out_h(), ow = s.out_w();
    const auto x = rnd(s.n * s.h * s.w * s.c_in, ++seed, -2, 2);
    const auto w = rnd(s.c_out * s.kh * s.kw * (s.c_in / s.groups), ++seed);
    const auto bias = rnd(s.c_out, ++seed);
    const auto res = rnd(s.n * oh * ow * s.c_out, ++seed, -3, 3);
    for (Activation act :
         {Activation::kNone, Activation::kRelu, Activation::kRelu6, Activation::kSilu}) {
      for (int variant = 0; variant < 3; ++variant) {
        ConvEpilogue ep;
        ep.act = act;
        if (variant >= 1) ep.bias = bias.data();
        if (variant == 2) ep.residual = res.data();
        std::vector<float> ref(res.size());
        ASSERT_TRUE(conv2d({Impl::kReference}, s, x.data(), w.data(), ep, ref.data()).ok());
        for (int64_t target : test::simd_targets_to_test()) {
          test::ScopedSimdTarget pin(target);
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
            std::vector<float> y(res.size(), 123.0f);
            ASSERT_TRUE(conv2d({Impl::kFast, pool}, s, x.data(), w.data(), ep, y.data()).ok());
            EXPECT_LE(test::rel_l2(y, ref), 3e-6)
                << c.name << " act " << activation_name(act) << " variant " << variant << " "
                << test::simd_target_label(target) << " threads "
                << (pool != nullptr ? pool->size() : 1);
          }
        }
      }
    }
  }
}

TEST(Conv2d, HandCheckedValues) {
  // One 3x3 image of one channel, a 2x2 kernel of ones, stride 1, no padding: window sums.
  Conv2dShape s = shape(1, 3, 3, 1, 1, 2, 1, 0);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 1, 1, 1};
  std::vector<float> y(4);
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    ASSERT_TRUE(conv2d({impl}, s, x.data(), w.data(), {}, y.data()).ok());
    EXPECT_EQ(y, (std::vector<float>{12, 16, 24, 28}));
  }
  // Padding 1 with a 3x3 kernel of ones: the corners see 4 pixels.
  s = shape(1, 3, 3, 1, 1, 3, 1, 1);
  const std::vector<float> w9(9, 1.0f);
  std::vector<float> y9(9);
  ASSERT_TRUE(conv2d({Impl::kFast}, s, x.data(), w9.data(), {}, y9.data()).ok());
  EXPECT_EQ(y9[0], 1 + 2 + 4 + 5);
  EXPECT_EQ(y9[4], 45);
  // ReLU6 clamps, a bias shifts.
  const float b = -20.0f;
  ConvEpilogue ep{&b, nullptr, Activation::kRelu6};
  ASSERT_TRUE(conv2d({Impl::kFast}, s, x.data(), w9.data(), ep, y9.data()).ok());
  EXPECT_EQ(y9[0], 0.0f);  // 12 - 20 < 0
  EXPECT_EQ(y9[4], 6.0f);  // 45 - 20 > 6
}

TEST(Conv2d, SamePaddingFollowsTensorFlow) {
  Conv2dShape s = shape(1, 224, 224, 3, 32, 3, 2, 0);
  set_same_padding(s);  // out 112: total (111 * 2 + 3 - 224) = 1: 0 before, 1 after
  EXPECT_EQ(s.pad_top, 0);
  EXPECT_EQ(s.pad_bottom, 1);
  EXPECT_EQ(s.out_h(), 112);
  s = shape(1, 7, 7, 8, 8, 5, 1, 0, 8);
  set_same_padding(s);  // total 4: 2 and 2
  EXPECT_EQ(s.pad_left, 2);
  EXPECT_EQ(s.pad_right, 2);
  EXPECT_EQ(s.out_w(), 7);
  s = shape(1, 15, 15, 8, 8, 5, 2, 0, 8);
  set_same_padding(s);  // out 8: total 7 * 2 + 5 - 15 = 4
  EXPECT_EQ(s.pad_top, 2);
  EXPECT_EQ(s.out_h(), 8);
}

TEST(Conv2d, BadShapesAreRefusedByName) {
  const std::vector<float> buf(4096, 0.5f);
  std::vector<float> out(4096);
  auto err = [&](Conv2dShape s) {
    return conv2d({Impl::kFast}, s, buf.data(), buf.data(), {}, out.data()).message();
  };
  EXPECT_NE(err(shape(1, 0, 4, 3, 3, 1, 1, 0)).find("sizes"), std::string::npos);
  EXPECT_NE(err(shape(1, 4, 4, 6, 6, 3, 1, 1, 4)).find("groups 4"), std::string::npos);
  EXPECT_NE(err(shape(1, 4, 4, 3, 3, 3, 1, 3)).find("pad_top 3"), std::string::npos);
  EXPECT_NE(err(shape(1, 2, 2, 3, 3, 5, 1, 0)).find("larger than"), std::string::npos);
  EXPECT_NE(err(shape(1, 4, 4, 3, 3, 3, 0, 1)).find("stride"), std::string::npos);
  EXPECT_NE(
      conv2d({Impl::kFast}, shape(1, 4, 4, 3, 3, 1, 1, 0), nullptr, buf.data(), {}, out.data())
          .message()
          .find("null"),
      std::string::npos);
}

TEST(BatchNorm, FastMatchesReferenceAndFoldingAgrees) {
  ThreadPool pool2(2);
  for (auto [rows, c] : {std::pair<int64_t, int64_t>{49, 1280}, {3, 37}, {1000, 24}, {5, 1}}) {
    const auto x = rnd(rows * c, 7, -3, 3);
    const auto g = rnd(c, 8, 0.5, 1.5), b = rnd(c, 9), m = rnd(c, 10), v = rnd(c, 11, 0.1, 2);
    for (Activation act : {Activation::kNone, Activation::kRelu6, Activation::kSilu}) {
      auto ref = x;
      batch_norm({Impl::kReference}, ref.data(), rows, c, g.data(), b.data(), m.data(), v.data(),
                 1e-3f, act);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        auto y = x;
        batch_norm({Impl::kFast, pool}, y.data(), rows, c, g.data(), b.data(), m.data(), v.data(),
                   1e-3f, act);
        EXPECT_LE(test::rel_l2(y, ref), 2e-6) << rows << "x" << c;
      }
      // The same values through a 1x1 identity convolution with the batch norm folded in:
      // w' = w * gamma / sqrt(var + eps), b' = beta - mean * gamma / sqrt(var + eps).
      if (c > 64) continue;
      std::vector<float> wf(static_cast<size_t>(c * c), 0.0f), bf(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i) {
        const double sc = g[i] / std::sqrt(double(v[i]) + 1e-3);
        wf[i * c + i] = static_cast<float>(sc);
        bf[i] = static_cast<float>(b[i] - m[i] * sc);
      }
      std::vector<float> y(x.size());
      Conv2dShape s = shape(1, rows, 1, c, c, 1, 1, 0);
      ASSERT_TRUE(
          conv2d({Impl::kFast}, s, x.data(), wf.data(), {bf.data(), nullptr, act}, y.data()).ok());
      EXPECT_LE(test::rel_l2(y, ref), 2e-6) << "folded " << rows << "x" << c;
    }
  }
}

TEST(BiasActivation, FastMatchesReferenceOnEveryTarget) {
  const auto x = rnd(37 * 19, 3, -100, 100);  // SiLU's tails: exp(-z) overflows below -88
  const auto b = rnd(19, 4);
  for (Activation act :
       {Activation::kNone, Activation::kRelu, Activation::kRelu6, Activation::kSilu}) {
    auto ref = x;
    bias_activation({Impl::kReference}, ref.data(), b.data(), 37, 19, act);
    for (int64_t target : test::simd_targets_to_test()) {
      test::ScopedSimdTarget pin(target);
      auto y = x;
      bias_activation({Impl::kFast}, y.data(), b.data(), 37, 19, act);
      EXPECT_LE(test::rel_l2(y, ref), 1e-6)
          << activation_name(act) << " " << test::simd_target_label(target);
      for (float v : y) EXPECT_TRUE(std::isfinite(v));
    }
  }
  std::vector<float> z = {-1.0f, 0.5f, 7.0f, 2.0f};
  bias_activation({Impl::kFast}, z.data(), nullptr, 1, 4, Activation::kRelu6);
  EXPECT_EQ(z, (std::vector<float>{0.0f, 0.5f, 6.0f, 2.0f}));
}

TEST(Pool, GlobalAverageAndMaxMatchReference) {
  const auto x = rnd(2 * 7 * 5 * 37, 5, -4, 4);
  std::vector<float> ref(2 * 37), y(2 * 37);
  global_avg_pool({Impl::kReference}, x.data(), 2, 7, 5, 37, ref.data());
  global_avg_pool({Impl::kFast}, x.data(), 2, 7, 5, 37, y.data());
  EXPECT_LE(test::rel_l2(y, ref), 1e-6);
  double sum = 0;
  for (int p = 0; p < 35; ++p) sum += x[p * 37 + 3];
  EXPECT_NEAR(ref[3], sum / 35, 1e-6);

  // 3x3 stride 2 pad 1 (ResNet): against a direct scan of each window.
  ThreadPool pool2(2);
  const int64_t h = 9, w = 8, c = 5, oh = 5, ow = 4;
  const auto xm = rnd(h * w * c, 6, -4, 4);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
    std::vector<float> out(oh * ow * c);
    ASSERT_TRUE(max_pool2d({Impl::kFast, pool}, xm.data(), 1, h, w, c, 3, 2, 1, out.data()).ok());
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        for (int64_t ch = 0; ch < c; ++ch) {
          float m = -INFINITY;
          for (int64_t iy = oy * 2 - 1; iy <= oy * 2 + 1; ++iy) {
            for (int64_t ix = ox * 2 - 1; ix <= ox * 2 + 1; ++ix) {
              if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                m = std::max(m, xm[(iy * w + ix) * c + ch]);
            }
          }
          EXPECT_EQ(out[(oy * ow + ox) * c + ch], m);
        }
      }
    }
  }
  std::vector<float> out(64);
  EXPECT_FALSE(max_pool2d({Impl::kFast}, xm.data(), 1, h, w, c, 3, 2, 3, out.data()).ok());
  EXPECT_FALSE(max_pool2d({Impl::kFast}, xm.data(), 1, 1, 1, c, 5, 1, 1, out.data()).ok());
}

}  // namespace
}  // namespace rinfer::cpu
