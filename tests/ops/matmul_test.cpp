// matmul: every fast path vs the scalar reference (dequantize_row + double accumulation), on
// random weights of every dtype, odd sizes, 1..33 tokens, 1..3 threads and every SIMD target
// this machine can run. Also the activation quantizer (SIMD vs scalar, bit-exact) and errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/matmul_internal.h"
#include "ops/cpu/ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

using test::random_floats;
using test::rel_l2;

// Relative L2 error bound of the fast path vs the reference.
double tolerance(DType t, bool quantized_acts) {
  if (quantized_acts && internal::has_int8_path(t)) return 1e-2;  // 8-bit activations
  return 2e-6;  // f32 accumulation of exactly dequantized weights
}

std::vector<float> run_matmul(const OpContext& ctx, const Tensor& w, const std::vector<float>& x,
                              int64_t n_tokens) {
  std::vector<float> y(static_cast<size_t>(n_tokens * w.dim(0)), NAN);
  const Status st = matmul(ctx, w, x.data(), n_tokens, y.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return y;
}

struct Case {
  DType dtype;
  int64_t n_out;
  int64_t n_in;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    c.push_back({t, 17, 32 * 5});
    c.push_back({t, 67, 32 * 18});
  }
  // Block counts around the direct kernels' groups of 16 (full groups, tails of 1..15).
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    c.push_back({t, 17, 32 * 1});
    c.push_back({t, 16, 32 * 16});
    c.push_back({t, 19, 32 * 31});
    c.push_back({t, 21, 32 * 35});
  }
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    c.push_back({t, 23, 256});
    c.push_back({t, 37, 256 * 3});
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    c.push_back({t, 9, 37});
    c.push_back({t, 33, 576});
  }
  // Everything else goes through the dequantize-then-f32 fallback.
  for (DType t : {DType::kQ8_K, DType::kF64, DType::kI8, DType::kU8, DType::kI16, DType::kI32,
                  DType::kF8E4M3, DType::kF8E5M2}) {
    c.push_back({t, 5, t == DType::kQ8_K ? 512 : 70});
  }
  return c;
}

std::string label(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " [" + std::to_string(c.n_out) + ", " +
         std::to_string(c.n_in) + "]";
}

TEST(Matmul, FastMatchesReferenceAllDtypesTokensThreads) {
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    const Tensor w = test::make_tensor(c.dtype, c.n_out, c.n_in,
                                       test::random_weights(c.dtype, c.n_out, c.n_in, seed++));
    ASSERT_TRUE(w.defined());
    for (int64_t n_tokens : {1, 2, 3, 7, 33}) {
      const auto x = random_floats(static_cast<size_t>(n_tokens * c.n_in), seed++);
      const auto ref = run_matmul({Impl::kReference, nullptr}, w, x, n_tokens);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        for (bool qa : {true, false}) {
          OpContext ctx{Impl::kFast, pool, qa};
          const auto y = run_matmul(ctx, w, x, n_tokens);
          EXPECT_LE(rel_l2(y, ref), tolerance(c.dtype, qa))
              << label(c) << " n_tokens " << n_tokens << " threads "
              << (pool != nullptr ? pool->size() : 1) << " quantize_activations " << qa;
        }
      }
    }
  }
}

// The same on every SIMD target (each target has its own kernels), one thread.
TEST(Matmul, EverySimdTarget) {
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    ASSERT_EQ(simd_target_name(), test::simd_target_label(target));
    uint64_t seed = 100;
    for (const Case& c : cases()) {
      if (!is_quantized(c.dtype) && c.dtype != DType::kF16 && c.dtype != DType::kBF16 &&
          c.dtype != DType::kF32) {
        continue;
      }
      const Tensor w = test::make_tensor(c.dtype, c.n_out, c.n_in,
                                         test::random_weights(c.dtype, c.n_out, c.n_in, seed++));
      for (int64_t n_tokens : {1, 5}) {
        const auto x = random_floats(static_cast<size_t>(n_tokens * c.n_in), seed++);
        const auto ref = run_matmul({Impl::kReference, nullptr}, w, x, n_tokens);
        for (bool qa : {true, false}) {
          const auto y = run_matmul({Impl::kFast, nullptr, qa}, w, x, n_tokens);
          EXPECT_LE(rel_l2(y, ref), tolerance(c.dtype, qa))
              << label(c) << " target " << simd_target_name() << " n_tokens " << n_tokens
              << " quantize_activations " << qa;
        }
      }
    }
  }
}

// Larger shapes like SmolLM2's, where the direct matvec kernels and the multi-group paths run,
// and where the error bound of the 8-bit activations is measured on realistic sizes.
TEST(Matmul, SmolLmShapes) {
  ThreadPool pool(2);
  const struct {
    DType t;
    int64_t n_out, n_in;
  } shapes[] = {{DType::kQ4_1, 192, 576},
                {DType::kQ4_1, 576, 1536},
                {DType::kQ8_0, 1001, 576},
                {DType::kQ4_0, 96, 1536},
                {DType::kQ4_K, 64, 1536},
                {DType::kQ6_K, 64, 1536},
                {DType::kQ5_0, 64, 1536},
                // Over 4 MB: the matrix-vector product is split over the pool.
                {DType::kQ4_0, 12000, 576}};
  uint64_t seed = 7;
  for (const auto& s : shapes) {
    const Tensor w =
        test::make_tensor(s.t, s.n_out, s.n_in, test::random_weights(s.t, s.n_out, s.n_in, seed++));
    for (int64_t n_tokens : {1, 9}) {
      const auto x = random_floats(static_cast<size_t>(n_tokens * s.n_in), seed++);
      const auto ref = run_matmul({Impl::kReference, nullptr}, w, x, n_tokens);
      const auto y = run_matmul({Impl::kFast, &pool, true}, w, x, n_tokens);
      const double err = rel_l2(y, ref);
      EXPECT_LE(err, 1e-2) << dtype_name(s.t) << " n_tokens " << n_tokens;
      EXPECT_GT(err, 0.0);  // the activations really were quantized
    }
  }
}

TEST(Matmul, SliceOfRows) {
  const DType t = DType::kQ4_1;
  const Tensor full = test::make_tensor(t, 40, 64, test::random_weights(t, 40, 64, 3));
  auto w = full.slice(0, 5, 26);
  ASSERT_TRUE(w.ok());
  const auto x = random_floats(3 * 64, 4);
  const auto ref = run_matmul({Impl::kReference, nullptr}, *w, x, 3);
  const auto y = run_matmul({Impl::kFast, nullptr}, *w, x, 3);
  EXPECT_LE(rel_l2(y, ref), 1e-2);
  // Row 0 of the slice is row 5 of the full matrix.
  const auto yfull = run_matmul({Impl::kReference, nullptr}, full, x, 3);
  EXPECT_EQ(ref[0], yfull[5]);
}

TEST(Matmul, ReferenceIsDoubleDotOfDequantizedRows) {
  const DType t = DType::kQ4_K;
  const auto bytes = test::random_weights(t, 3, 256, 9);
  const Tensor w = test::make_tensor(t, 3, 256, bytes);
  const auto x = random_floats(2 * 256, 10);
  const auto y = run_matmul({Impl::kReference, nullptr}, w, x, 2);
  std::vector<float> row(256);
  for (int64_t o = 0; o < 3; ++o) {
    ASSERT_TRUE(dequantize_row(t, bytes.data() + o * 144, row.data(), 256).ok());
    for (int64_t tk = 0; tk < 2; ++tk) {
      double acc = 0;
      for (int i = 0; i < 256; ++i)
        acc += double(row[static_cast<size_t>(i)]) * x[static_cast<size_t>(tk * 256 + i)];
      EXPECT_EQ(y[static_cast<size_t>(tk * 3 + o)], static_cast<float>(acc));
    }
  }
}

// matmul_multi gives exactly what one matmul per weight gives (same kernels, same quantized
// activations), for the direct decode path and the fallback.
TEST(Matmul, MultiMatchesSeparateCalls) {
  ThreadPool pool(2);
  const Tensor a =
      test::make_tensor(DType::kQ4_1, 577, 576, test::random_weights(DType::kQ4_1, 577, 576, 1));
  const Tensor b =
      test::make_tensor(DType::kQ8_0, 65, 576, test::random_weights(DType::kQ8_0, 65, 576, 2));
  const Tensor c =
      test::make_tensor(DType::kQ4_K, 33, 512, test::random_weights(DType::kQ4_K, 33, 512, 3));
  // Large enough (> 4 MB together) for the decode rows to be split over the pool.
  const Tensor big =
      test::make_tensor(DType::kQ8_0, 7000, 576, test::random_weights(DType::kQ8_0, 7000, 576, 6));
  for (int64_t n_tokens : {1, 3}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const OpContext ctx{Impl::kFast, p};
      {
        const auto xb = random_floats(static_cast<size_t>(n_tokens * 576), 7);
        std::vector<float> y1(static_cast<size_t>(n_tokens * 577)),
            y2(static_cast<size_t>(n_tokens * 7000));
        const Tensor* ws[] = {&a, &big};
        float* ys[] = {y1.data(), y2.data()};
        ASSERT_TRUE(matmul_multi(ctx, ws, xb.data(), n_tokens, ys).ok());
        EXPECT_EQ(y1, run_matmul(ctx, a, xb, n_tokens));
        EXPECT_EQ(y2, run_matmul(ctx, big, xb, n_tokens));
      }
      const auto x = random_floats(static_cast<size_t>(n_tokens * 576), 4);
      std::vector<float> ya(static_cast<size_t>(n_tokens * 577)),
          yb(static_cast<size_t>(n_tokens * 65));
      const Tensor* ws[] = {&a, &b};
      float* ys[] = {ya.data(), yb.data()};
      ASSERT_TRUE(matmul_multi(ctx, ws, x.data(), n_tokens, ys).ok());
      EXPECT_EQ(ya, run_matmul(ctx, a, x, n_tokens));
      EXPECT_EQ(yb, run_matmul(ctx, b, x, n_tokens));
    }
  }
  // Errors: mismatched n_in, count mismatch.
  const auto x = random_floats(576, 5);
  std::vector<float> y1(577), y2(33);
  const Tensor* ws[] = {&a, &c};
  float* ys[] = {y1.data(), y2.data()};
  EXPECT_EQ(matmul_multi({}, ws, x.data(), 1, ys).code(), StatusCode::kInvalidArgument);
  float* ys1[] = {y1.data()};
  EXPECT_EQ(matmul_multi({}, ws, x.data(), 1, ys1).code(), StatusCode::kInvalidArgument);
}

// Batch invariance: a row gives the same bits whichever rows share its call. Rows marked single
// (OpContext::single_rows, the engine's decode rows) match a call with that row alone; the
// other rows match the same rows in any other tiled call, whatever their position in the
// register tiles.
TEST(Matmul, RowsAreBatchInvariant) {
  ThreadPool pool(2);
  for (const Case& c : cases()) {
    if (c.dtype == DType::kQ8_K || c.dtype == DType::kF64 || c.dtype == DType::kI8 ||
        c.dtype == DType::kU8 || c.dtype == DType::kI16 || c.dtype == DType::kI32 ||
        c.dtype == DType::kF8E4M3 || c.dtype == DType::kF8E5M2) {
      continue;
    }
    SCOPED_TRACE(label(c));
    const Tensor w = test::make_tensor(c.dtype, c.n_out, c.n_in,
                                       test::random_weights(c.dtype, c.n_out, c.n_in, 71));
    for (bool q8 : {true, false}) {
      OpContext ctx{Impl::kFast, &pool, q8};
      const int64_t n = 11;
      const std::vector<float> x = random_floats(static_cast<size_t>(n * c.n_in), 72);
      const int64_t n_out = c.n_out;
      auto row = [&](const std::vector<float>& y, int64_t t) {
        return std::vector<float>(y.begin() + t * n_out, y.begin() + (t + 1) * n_out);
      };
      ctx.single_rows = 3;
      const std::vector<float> mixed = run_matmul(ctx, w, x, n);
      ctx.single_rows = 0;
      const std::vector<float> tiled = run_matmul(ctx, w, x, n);
      for (int64_t t = 0; t < n; ++t) {
        const std::vector<float> xt(x.begin() + t * c.n_in, x.begin() + (t + 1) * c.n_in);
        const std::vector<float> alone = run_matmul(ctx, w, xt, 1);
        if (t < 3) EXPECT_EQ(row(mixed, t), alone) << "single row " << t << " q8 " << q8;
        // Tiled rows: the same bits as in a call of the rows from t on (other tile positions),
        // with row 0 appended so that the call has 2 rows at least (1 row is a single row).
        std::vector<float> xs(x.begin() + t * c.n_in, x.end());
        xs.insert(xs.end(), x.begin(), x.begin() + c.n_in);
        const std::vector<float> shifted = run_matmul(ctx, w, xs, n - t + 1);
        EXPECT_EQ(row(tiled, t), row(shifted, 0)) << "tiled row " << t << " q8 " << q8;
        if (t >= 3) EXPECT_EQ(row(mixed, t), row(tiled, t)) << "row " << t << " q8 " << q8;
      }
    }
  }
}

TEST(Matmul, Errors) {
  const auto x = random_floats(64, 1);
  std::vector<float> y(64);
  auto w1 = Tensor::empty({64}, DType::kF32);
  ASSERT_TRUE(w1.ok());
  Status st = matmul({}, *w1, x.data(), 1, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("2-D"), std::string::npos) << st.message();
  auto w2 = Tensor::empty({2, 32}, DType::kQ8_0);
  ASSERT_TRUE(w2.ok());
  st = matmul({}, *w2, nullptr, 1, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = matmul({}, *w2, x.data(), -1, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(matmul({}, *w2, x.data(), 0, y.data()).ok());
  EXPECT_EQ(matmul({}, Tensor(), x.data(), 1, y.data()).code(), StatusCode::kInvalidArgument);
}

// Guards undefined behaviour on corrupt numbers: a NaN or inf activation used to be converted to
// int8 (undefined; UBSan stops on the overflowing lane sum) and gave garbage. Now its block has
// zero quants and NaN scales: every output of that token is NaN, as the f32 matmul gives, and
// the other tokens are untouched. The SIMD and scalar quantizers agree on such blocks too.
TEST(Matmul, NonFiniteActivationsGiveNaNRowsOnTheInt8Path) {
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    uint64_t seed = 500;
    for (const Case& c : cases()) {
      if (!internal::has_int8_path(c.dtype)) continue;
      const Tensor w = test::make_tensor(c.dtype, c.n_out, c.n_in,
                                         test::random_weights(c.dtype, c.n_out, c.n_in, seed++));
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        const int64_t n_tokens = 3;
        auto x = random_floats(static_cast<size_t>(n_tokens * c.n_in), seed++);
        x[static_cast<size_t>(c.n_in + c.n_in / 2)] = bad;  // token 1
        auto clean = x;
        clean[static_cast<size_t>(c.n_in + c.n_in / 2)] = 0.5f;
        const auto y = run_matmul({Impl::kFast, nullptr, true}, w, x, n_tokens);
        const auto want = run_matmul({Impl::kFast, nullptr, true}, w, clean, n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < c.n_out; ++r) {
            const auto i = static_cast<size_t>(t * c.n_out + r);
            if (t == 1) {
              ASSERT_TRUE(std::isnan(y[i])) << label(c) << " " << simd_target_name() << " row " << r
                                            << " bad " << bad << ": " << y[i];
            } else {
              ASSERT_EQ(y[i], want[i]) << label(c) << " token " << t << " row " << r;
            }
          }
        }
      }
    }
    const int64_t k = 96;
    auto x = random_floats(static_cast<size_t>(k), 9);
    x[40] = NAN;  // block 1
    const internal::QActsLayout l(k);
    std::vector<uint8_t> m1(internal::qacts_bytes(l, 1) + 64), m2(m1.size());
    auto align = [](std::vector<uint8_t>& v) {
      return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
    };
    const internal::QActs a = internal::qacts_view(l, 1, align(m1));
    const internal::QActs b = internal::qacts_view(l, 1, align(m2));
    internal::quantize_act_row(x.data(), a, 0);
    internal::quantize_act_row_ref(x.data(), b, 0);
    EXPECT_EQ(std::memcmp(a.qs, b.qs, static_cast<size_t>(l.kp)), 0) << simd_target_name();
    for (int i = 32; i < 64; ++i) EXPECT_EQ(a.qs[i], 0);
    EXPECT_TRUE(std::isnan(a.d32[1]) && std::isnan(b.d32[1]) && std::isnan(a.s32[1]));
    EXPECT_TRUE(std::isfinite(a.d32[0]) && std::isfinite(a.d32[2]));
    EXPECT_EQ(a.d32[0], b.d32[0]);
  }
}

// The SIMD activation quantizer matches the scalar one bit for bit on every target.
TEST(QuantizeActivations, SimdMatchesScalarBitExact) {
  for (int64_t target : test::simd_targets_to_test()) {
    test::ScopedSimdTarget scope(target);
    for (int64_t k : {32, 160, 576, 1536}) {
      auto x = random_floats(static_cast<size_t>(k), static_cast<uint64_t>(k), -3.0f, 3.0f);
      x[5] = 0.0f;  // a zero, an exact half step, and an all-zero-ish block are fine too
      const internal::QActsLayout l(k);
      std::vector<uint8_t> m1(internal::qacts_bytes(l, 2) + 64), m2(m1.size());
      auto align = [](std::vector<uint8_t>& v) {
        return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(v.data()) + 63) &
                                       ~uintptr_t{63});
      };
      const internal::QActs a = internal::qacts_view(l, 2, align(m1));
      const internal::QActs b = internal::qacts_view(l, 2, align(m2));
      internal::quantize_act_row(x.data(), a, 1);
      internal::quantize_act_row_ref(x.data(), b, 1);
      EXPECT_EQ(std::memcmp(a.qs + l.kp, b.qs + l.kp, static_cast<size_t>(l.kp)), 0)
          << simd_target_name() << " k " << k;
      for (int64_t i = 0; i < l.kp / 4; ++i) EXPECT_EQ(a.dexp[l.kp / 4 + i], b.dexp[l.kp / 4 + i]);
      for (int64_t g = 0; g < l.g32; ++g) {
        EXPECT_EQ(a.d32[l.g32 + g], b.d32[l.g32 + g]);
        EXPECT_EQ(a.s32[l.g32 + g], b.s32[l.g32 + g]);
      }
      for (int64_t g = 0; g < l.g16; ++g) EXPECT_EQ(a.s16[l.g16 + g], b.s16[l.g16 + g]);
      EXPECT_EQ(std::memcmp(a.qs4 + l.k4, b.qs4 + l.k4, static_cast<size_t>(l.k4)), 0);
      // qs4 regroups qs: element e of block b sits at (b / 4) * 128 + (e / 16) * 64 +
      // (b % 4) * 16 + e % 16.
      for (int64_t i = 0; i < k; ++i) {
        const int64_t blk = i / 32, e = i % 32;
        EXPECT_EQ(b.qs4[l.k4 + (blk / 4) * 128 + (e / 16) * 64 + (blk % 4) * 16 + e % 16],
                  b.qs[l.kp + i]);
      }
      // Every element is within half a step of x.
      for (int64_t i = 0; i < k; ++i) {
        const float d = b.d32[l.g32 + i / 32];
        EXPECT_LE(std::fabs(d * b.qs[l.kp + i] - x[static_cast<size_t>(i)]), 0.5f * d * 1.0001f);
      }
    }
  }
}

}  // namespace
}  // namespace rinfer::cpu
