// The packed f32 GEMM of the convolutions: fast vs the float64 reference on odd sizes (partial
// panels, token tails of every tile size, k of 1 and k in several blocks), every SIMD target, 1-3
// threads, every epilogue; the packing itself; conv2d through it against conv2d's reference.
#include "ops/cpu/gemm_packed_f32.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/vision_ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

TEST(PackedF32, PackKeepsEveryWeight) {
  const auto w = test::random_floats(37 * 11, 1);
  const PackedF32 p = PackedF32::pack(w.data(), 37, 11);
  for (int64_t o = 0; o < 37; ++o)
    for (int64_t i = 0; i < 11; ++i) EXPECT_EQ(p.at(o, i), w[o * 11 + i]);
  EXPECT_EQ(p.panel(1)[5 * 32 + 31], 0.0f);  // output 63 of 37: padding
}

// Under the sanitizers (unoptimized SIMD) a subset of the sizes.
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
const std::vector<int64_t> kOuts = {1, 33, 96}, kKs = {1, 27, 600}, kTokens = {1, 7, 13};
#else
const std::vector<int64_t> kOuts = {1, 16, 31, 32, 33, 96, 100}, kKs = {1, 3, 27, 40, 160, 600},
                           kTokens = {1, 2, 5, 6, 7, 13, 100};
#endif

TEST(GemmPackedF32, FastMatchesReferenceOnOddSizes) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 10;
  for (int64_t n_out : kOuts) {
    for (int64_t k : kKs) {
      for (int64_t tokens : kTokens) {
        const int64_t ldx = k + (k % 3);  // a row stride wider than k sometimes
        const auto x = test::random_floats(static_cast<size_t>(tokens * ldx), ++seed, -2, 2);
        const auto w = test::random_floats(static_cast<size_t>(n_out * k), ++seed);
        const auto bias = test::random_floats(static_cast<size_t>(n_out), ++seed);
        const auto res = test::random_floats(static_cast<size_t>(tokens * n_out), ++seed, -3, 3);
        const PackedF32 p = PackedF32::pack(w.data(), n_out, k);
        for (Activation act : {Activation::kNone, Activation::kRelu6, Activation::kSilu}) {
          for (int variant = 0; variant < 3; ++variant) {
            ConvEpilogue ep{variant >= 1 ? bias.data() : nullptr,
                            variant == 2 ? res.data() : nullptr, act};
            std::vector<float> ref(res.size());
            ASSERT_TRUE(
                gemm_packed_f32({Impl::kReference}, p, x.data(), ldx, tokens, ep, ref.data()).ok());
            for (int64_t target : test::simd_targets_to_test()) {
              test::ScopedSimdTarget pin(target);
              for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
                std::vector<float> y(res.size(), 7.0f);
                ASSERT_TRUE(
                    gemm_packed_f32({Impl::kFast, pool}, p, x.data(), ldx, tokens, ep, y.data())
                        .ok());
                // Each output within f32 accumulation error of its terms' magnitude (a single
                // output can cancel, so a relative bound on it alone would not hold).
                double worst = 0;
                for (int64_t t = 0; t < tokens; ++t) {
                  for (int64_t o = 0; o < n_out; ++o) {
                    double mag =
                        std::abs(double(ep.bias != nullptr ? bias[o] : 0.0f)) +
                        std::abs(double(ep.residual != nullptr ? res[t * n_out + o] : 0.0f));
                    for (int64_t i = 0; i < k; ++i)
                      mag += std::abs(double(x[t * ldx + i]) * w[o * k + i]);
                    const double e = std::abs(double(y[t * n_out + o]) - ref[t * n_out + o]);
                    worst = std::max(worst, e / (mag * 1e-7 * double(k + 2)));
                  }
                }
                EXPECT_LE(worst, 1.0)
                    << n_out << "x" << k << " tokens " << tokens << " " << activation_name(act)
                    << " variant " << variant << " " << test::simd_target_label(target);
                EXPECT_LE(test::rel_l2(y, ref), 1e-5);
              }
            }
          }
        }
      }
    }
  }
}

TEST(GemmPackedF32, BadArgumentsAreErrors) {
  const auto w = test::random_floats(8, 2);
  const PackedF32 p = PackedF32::pack(w.data(), 2, 4);
  std::vector<float> x(8), y(4);
  EXPECT_FALSE(gemm_packed_f32({}, p, x.data(), 3, 2, {}, y.data()).ok());  // ldx < k
  EXPECT_FALSE(gemm_packed_f32({}, PackedF32(), x.data(), 4, 2, {}, y.data()).ok());
  EXPECT_TRUE(gemm_packed_f32({}, p, x.data(), 4, 0, {}, y.data()).ok());
}

TEST(Conv2dPacked, MatchesTheReferenceConvolution) {
  ThreadPool pool2(2);
  struct Case {
    int64_t n, h, w, ci, co, k, stride, pad;
  };
  uint64_t seed = 50;
  for (const Case& c : {Case{2, 7, 5, 24, 40, 1, 1, 0}, Case{1, 17, 15, 3, 32, 3, 2, 1},
                        Case{1, 23, 19, 3, 16, 7, 2, 3}, Case{1, 9, 9, 8, 12, 1, 2, 0},
                        Case{2, 30, 30, 16, 20, 3, 1, 1}}) {
    Conv2dShape s;
    s.n = c.n, s.h = c.h, s.w = c.w, s.c_in = c.ci, s.c_out = c.co, s.kh = s.kw = c.k;
    s.stride_h = s.stride_w = c.stride;
    set_padding(s, c.pad);
    const auto x = test::random_floats(static_cast<size_t>(s.n * s.h * s.w * s.c_in), ++seed);
    const int64_t kk = s.kh * s.kw * s.c_in;
    const auto w = test::random_floats(static_cast<size_t>(s.c_out * kk), ++seed);
    const auto b = test::random_floats(static_cast<size_t>(s.c_out), ++seed);
    const int64_t out = s.n * s.out_h() * s.out_w() * s.c_out;
    const auto res = test::random_floats(static_cast<size_t>(out), ++seed);
    const PackedF32 p = PackedF32::pack(w.data(), s.c_out, kk);
    const ConvEpilogue ep{b.data(), res.data(), Activation::kRelu};
    std::vector<float> ref(static_cast<size_t>(out)), y(static_cast<size_t>(out));
    ASSERT_TRUE(conv2d({Impl::kReference}, s, x.data(), w.data(), ep, ref.data()).ok());
    ASSERT_TRUE(conv2d({Impl::kFast, &pool2}, s, x.data(), w.data(), ep, y.data(), &p).ok());
    EXPECT_LE(test::rel_l2(y, ref), 2e-6) << c.k << "x" << c.k << " " << c.ci << "->" << c.co;
  }
}

}  // namespace
}  // namespace rinfer::cpu
