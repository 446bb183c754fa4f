// attention_bf16 (AMX) against the f64 reference of paged_attention in its bidirectional mode,
// on random data: sequences of odd lengths packed back to back with a gap between them, head
// sizes 32 and 64, a row stride wider than the heads, 1..3 threads; rows outside every
// sequence stay as they were. Skips on a CPU without AMX-BF16; the argument checks run anywhere.

#include "ops/cpu/attention_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/matmul_bf16.h"
#include "test_util.h"

namespace rinfer::cpu {
namespace {

using test::random_floats;
using test::rel_l2;

TEST(AttentionBf16, MatchesTheReferenceOnOddLengthsHeadsThreads) {
  if (!amx_bf16_available()) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  ThreadPool pool2(2), pool3(3);
  uint64_t seed = 5;
  for (int64_t head_dim : {32, 64}) {
    const int64_t n_head = 3, stride = n_head * head_dim + 8;
    std::vector<AttentionSeq> seqs;
    int64_t row = 0;
    for (int64_t len : {1, 15, 16, 17, 33, 70, 130}) {
      seqs.push_back({row, len, len, nullptr});
      row += len + 2;  // two rows of no sequence between each
    }
    const int64_t n_rows = row;
    std::vector<int32_t> table(static_cast<size_t>(n_rows));
    std::iota(table.begin(), table.end(), 0);
    std::vector<AttentionSeq> ref_seqs = seqs;
    for (AttentionSeq& s : ref_seqs) s.block_table = table.data() + s.q_start;
    // Scores of a few units, as in a trained model, so the softmax is neither flat nor one-hot.
    auto scaled = [&](float by) {
      auto x = random_floats(static_cast<size_t>(n_rows * stride), seed++);
      for (float& f : x) f *= by;
      return x;
    };
    const auto q = scaled(2.0f), k = scaled(2.0f), v = scaled(1.0f);
    PagedAttentionShape ps;
    ps.n_head = n_head;
    ps.n_head_kv = n_head;
    ps.head_dim = head_dim;
    ps.kv_row_stride = stride;
    ps.block_size = 1;
    ps.n_blocks = n_rows;
    ps.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    ps.causal = false;
    // The reference writes [rows, n_head * head_dim]; compare the same columns.
    std::vector<float> qc(static_cast<size_t>(n_rows * n_head * head_dim));
    for (int64_t r = 0; r < n_rows; ++r) {
      std::copy_n(q.begin() + r * stride, n_head * head_dim, qc.begin() + r * n_head * head_dim);
    }
    std::vector<float> ref(qc.size(), 0.0f);
    ASSERT_TRUE(paged_attention({Impl::kReference, nullptr}, ps, ref_seqs, qc.data(), k.data(),
                                v.data(), ref.data())
                    .ok());
    EncoderAttentionShape s{n_head, head_dim, stride, ps.scale};
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<float> out(static_cast<size_t>(n_rows * stride), 7.0f);
      ASSERT_TRUE(
          attention_bf16({Impl::kFast, pool}, s, seqs, q.data(), k.data(), v.data(), out.data())
              .ok());
      std::vector<float> got(ref.size(), 0.0f), want(ref.size(), 0.0f);
      for (int64_t r = 0; r < n_rows; ++r) {
        const bool in_seq = std::any_of(seqs.begin(), seqs.end(), [&](const AttentionSeq& sq) {
          return r >= sq.q_start && r < sq.q_start + sq.n_tokens;
        });
        for (int64_t c = 0; c < stride; ++c) {
          const float o = out[static_cast<size_t>(r * stride + c)];
          if (!in_seq || c >= n_head * head_dim) {
            ASSERT_EQ(o, 7.0f) << "row " << r << " col " << c << " was written";
            continue;
          }
          got[static_cast<size_t>(r * n_head * head_dim + c)] = o;
          want[static_cast<size_t>(r * n_head * head_dim + c)] =
              ref[static_cast<size_t>(r * n_head * head_dim + c)];
        }
      }
      const double e = rel_l2(got, want);
      EXPECT_LE(e, 1e-2) << "head_dim " << head_dim << " threads "
                         << (pool != nullptr ? pool->size() : 1);
      EXPECT_GT(e, 0.0);  // bf16 rounding is there: the kernel did not fall back to f32
    }
  }
}

TEST(AttentionBf16, BadShapesAreRefused) {
  std::vector<float> x(64 * 4, 0.0f);
  const AttentionSeq seq{0, 2, 2, nullptr};
  const std::vector<AttentionSeq> one{seq};
  EXPECT_FALSE(attention_bf16({}, {1, 48, 64, 1.0f}, one, x.data(), x.data(), x.data(), x.data())
                   .ok());  // head size not a multiple of 32
  EXPECT_FALSE(attention_bf16({}, {2, 32, 32, 1.0f}, one, x.data(), x.data(), x.data(), x.data())
                   .ok());  // stride narrower than the heads
  const std::vector<AttentionSeq> causal{{0, 1, 2, nullptr}};
  EXPECT_FALSE(
      attention_bf16({}, {1, 32, 32, 1.0f}, causal, x.data(), x.data(), x.data(), x.data()).ok());
  EXPECT_FALSE(
      attention_bf16({}, {1, 32, 32, 1.0f}, one, nullptr, x.data(), x.data(), x.data()).ok());
  EXPECT_TRUE(attention_bf16({}, {1, 32, 32, 1.0f}, {}, nullptr, nullptr, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace rinfer::cpu
