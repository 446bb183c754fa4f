// matmul_bf16: the packed layout against the weights it came from, the AMX kernel against the
// scalar reference (the same bf16 values accumulated in double) on random data with odd sizes,
// 1..3 threads, and the whole against the f32 matmul within bf16's rounding. The AMX cases skip
// on a CPU without AMX-BF16; the reference and the error paths run everywhere.

#include "ops/cpu/matmul_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

using test::random_floats;
using test::rel_l2;

Tensor random_f32(int64_t n_out, int64_t n_in, uint64_t seed) {
  return test::make_tensor(DType::kF32, n_out, n_in,
                           test::random_weights(DType::kF32, n_out, n_in, seed));
}

std::vector<float> run(const OpContext& ctx, const PackedBf16& w, const std::vector<float>& x,
                       int64_t n_tokens) {
  std::vector<float> y(static_cast<size_t>(n_tokens * w.n_out()), NAN);
  const Status st = matmul_bf16(ctx, w, x.data(), n_tokens, y.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return y;
}

TEST(MatmulBf16, PackKeepsEveryWeightRoundedToBf16) {
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    const int64_t n_out = 37, n_in = t == DType::kQ8_0 ? 96 : 70;
    const Tensor w = test::make_tensor(t, n_out, n_in, test::random_weights(t, n_out, n_in, 7));
    auto p = PackedBf16::pack(w);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->n_out(), n_out);
    EXPECT_EQ(p->n_in(), n_in);
    EXPECT_EQ(p->n_pad() % 32, 0);
    EXPECT_EQ(p->k_pad() % 32, 0);
    std::vector<float> row(static_cast<size_t>(n_in));
    const int64_t row_bytes = n_in / dtype_traits(t).block_size * dtype_traits(t).block_bytes;
    for (int64_t o = 0; o < n_out; ++o) {
      ASSERT_TRUE(
          dequantize_row(t, static_cast<const uint8_t*>(w.data()) + o * row_bytes, row.data(), n_in)
              .ok());
      for (int64_t i = 0; i < n_in; ++i) {
        ASSERT_EQ(p->at(o, i), bf16_to_f32(f32_to_bf16(row[static_cast<size_t>(i)])))
            << dtype_name(t) << " W[" << o << ", " << i << "]";
      }
    }
  }
}

TEST(MatmulBf16, ReferenceWithinBf16RoundingOfTheF32Matmul) {
  const Tensor w = random_f32(45, 83, 3);
  auto p = PackedBf16::pack(w);
  ASSERT_TRUE(p.ok());
  const int64_t n_tokens = 5;
  const auto x = random_floats(static_cast<size_t>(n_tokens * 83), 4);
  std::vector<float> f32(static_cast<size_t>(n_tokens * 45));
  ASSERT_TRUE(matmul({Impl::kReference, nullptr}, w, x.data(), n_tokens, f32.data()).ok());
  const auto y = run({Impl::kReference, nullptr}, *p, x, n_tokens);
  const double e = rel_l2(y, f32);
  EXPECT_GT(e, 1e-5);  // bf16 rounding is there ...
  EXPECT_LT(e, 1e-2);  // ... and no more than that
}

TEST(MatmulBf16, AmxMatchesReferenceOddSizesTokensThreads) {
  if (!amx_bf16_available()) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  ThreadPool pool2(2), pool3(3);
  struct Shape {
    int64_t n_out, n_in;
  };
  uint64_t seed = 11;
  for (const Shape s : {Shape{1, 1}, Shape{17, 31}, Shape{32, 32}, Shape{33, 65}, Shape{100, 384},
                        Shape{384, 1536}}) {
    const Tensor w = random_f32(s.n_out, s.n_in, seed++);
    auto p = PackedBf16::pack(w);
    ASSERT_TRUE(p.ok());
    for (int64_t n_tokens : {1, 15, 16, 33, 70}) {
      const auto x = random_floats(static_cast<size_t>(n_tokens * s.n_in), seed++);
      const auto ref = run({Impl::kReference, nullptr}, *p, x, n_tokens);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        const auto y = run({Impl::kFast, pool}, *p, x, n_tokens);
        EXPECT_LE(rel_l2(y, ref), 1e-5)
            << "[" << s.n_out << ", " << s.n_in << "] n_tokens " << n_tokens << " threads "
            << (pool != nullptr ? pool->size() : 1);
        for (float v : y) ASSERT_TRUE(std::isfinite(v));
      }
      // With a bias: the same products plus the bias of each column, fast as reference.
      const auto bias = random_floats(static_cast<size_t>(s.n_out), seed++);
      std::vector<float> yb(ref.size(), NAN), rb(ref.size(), NAN);
      ASSERT_TRUE(
          matmul_bf16({Impl::kFast, &pool2}, *p, x.data(), n_tokens, yb.data(), bias.data()).ok());
      ASSERT_TRUE(
          matmul_bf16({Impl::kReference, nullptr}, *p, x.data(), n_tokens, rb.data(), bias.data())
              .ok());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(rb[i], ref[i] + bias[i % static_cast<size_t>(s.n_out)], 1e-5f);
      }
      EXPECT_LE(rel_l2(yb, rb), 1e-5);
    }
  }
}

TEST(MatmulBf16, Errors) {
  PackedBf16 empty;
  std::vector<float> x(4), y(4);
  EXPECT_FALSE(matmul_bf16({}, empty, x.data(), 1, y.data()).ok());
  auto p = PackedBf16::pack(random_f32(2, 2, 1));
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(matmul_bf16({}, *p, x.data(), -1, y.data()).ok());
  EXPECT_FALSE(matmul_bf16({}, *p, nullptr, 1, y.data()).ok());
  EXPECT_TRUE(matmul_bf16({}, *p, nullptr, 0, nullptr).ok());
  EXPECT_FALSE(PackedBf16::pack(Tensor()).ok());
  if (!amx_bf16_available()) {
    const Status st = matmul_bf16({}, *p, x.data(), 1, y.data());
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.to_string().find("AMX"), std::string::npos) << st.to_string();
  }
}

}  // namespace
}  // namespace rinfer::cpu
