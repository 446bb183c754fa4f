// Paged attention over an int8 KV cache (PagedAttentionShape::kv_dtype = i8): each row holds
// the KV heads' codes, then their f32 scales (kv::KvSpec::row_bytes). The random f32 rows of
// paged_inputs.h are quantized per head (core/quantize_8bit.h); the rows no query sees get a NaN
// scale, so a wrong read poisons the output. Against the f32 kernel on the dequantized values
// (code * scale): the reference bit for bit, the fast path within rounding, on every SIMD target.
#include <gtest/gtest.h>

#include <cstring>

#include "core/quantize_8bit.h"
#include "ops_test_util.h"
#include "paged_inputs.h"

namespace rinfer::cpu {
namespace {

using namespace test_paged;  // NOLINT(google-build-using-namespace)

struct I8Inputs {
  PagedInputs f32;              // k, v: the dequantized values (NaN where unseen)
  PagedAttentionShape s;        // the i8 shape (row stride in bytes)
  std::vector<uint8_t> k8, v8;  // [n_blocks * block_size, row bytes]
};

// group: codes per scale (0: a scale per head).
I8Inputs quantize(const PagedInputs& in, int64_t group = 0) {
  I8Inputs q;
  q.f32 = in;
  for (size_t i = 0; i < q.f32.seqs.size(); ++i) q.f32.seqs[i].block_table = q.f32.tables[i].data();
  const int64_t hkv = in.s.n_head_kv, dh = in.s.head_dim, kv_dim = hkv * dh;
  const int64_t gs = group > 0 ? group : dh, n_scales = kv_dim / gs;
  const int64_t rb = kv_dim + 4 * n_scales + 3;  // 3 bytes of padding: the stride is honoured
  q.s = in.s;
  q.s.kv_dtype = DType::kI8;
  q.s.kv_group = group;
  q.s.kv_row_stride = rb;
  const int64_t n_rows = in.s.n_blocks * in.s.block_size;
  std::vector<float> scales(static_cast<size_t>(n_scales));
  for (auto [src, dst, deq] : {std::tuple{&in.k, &q.k8, &q.f32.k}, {&in.v, &q.v8, &q.f32.v}}) {
    dst->assign(static_cast<size_t>(n_rows * rb), 0x5a);
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* x = src->data() + r * in.s.kv_row_stride;
      uint8_t* row = dst->data() + r * rb;
      auto* codes = reinterpret_cast<int8_t*>(row);
      float* y = deq->data() + r * in.s.kv_row_stride;
      if (std::isnan(x[0])) {  // unseen: NaN scales
        std::fill(scales.begin(), scales.end(), NAN);
      } else {
        quantize_rows_int8(x, n_scales, gs, codes, scales.data());
        for (int64_t i = 0; i < kv_dim; ++i) {
          y[i] = static_cast<float>(codes[i]) * scales[static_cast<size_t>(i / gs)];
        }
      }
      std::memcpy(row + kv_dim, scales.data(), scales.size() * 4);
    }
  }
  return q;
}

std::vector<float> run_i8(const OpContext& ctx, const I8Inputs& in) {
  std::vector<float> out(in.f32.q.size(), NAN);
  const Status st = paged_attention(ctx, in.s, in.f32.seqs, in.f32.q.data(), in.k8.data(),
                                    in.v8.data(), out.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

void expect_i8_matches_f32(const I8Inputs& in, std::initializer_list<ThreadPool*> pools,
                           const std::string& what) {
  const std::vector<float> ref = run_paged({Impl::kReference}, in.f32);
  const std::vector<float> ref8 = run_i8({Impl::kReference}, in);
  EXPECT_TRUE(gaps_untouched(in.f32, ref8)) << what;
  for (const AttentionSeq& sq : in.f32.seqs) {
    EXPECT_EQ(rinfer::test::rel_l2(rows_of(in.f32, ref8, sq), rows_of(in.f32, ref, sq)), 0.0)
        << what;
  }
  for (ThreadPool* pool : pools) {
    const std::vector<float> fast = run_paged({Impl::kFast, pool}, in.f32);
    const std::vector<float> fast8 = run_i8({Impl::kFast, pool}, in);
    EXPECT_TRUE(gaps_untouched(in.f32, fast8)) << what;
    for (const AttentionSeq& sq : in.f32.seqs) {
      const auto got = rows_of(in.f32, fast8, sq);
      EXPECT_LE(rinfer::test::rel_l2(got, rows_of(in.f32, fast, sq)), 1e-6) << what;
      EXPECT_LE(rinfer::test::rel_l2(got, rows_of(in.f32, ref, sq)), 1e-5)
          << what << " (" << sq.n_tokens << " tokens, n_kv " << sq.n_kv << ") threads "
          << (pool ? pool->size() : 1);
    }
  }
}

const SeqSpec kMix8[] = {{1, 1},   {1, 45}, {12, 12}, {1, 300}, {9, 150},
                         {1, 129}, {5, 70}, {2, 17},  {1, 16}};

TEST(PagedAttentionI8, MatchesTheF32KernelOnTheDequantizedValues) {
  ThreadPool pool3(3);
  uint64_t seed = 8100;
  for (auto [n_head, n_head_kv] : {std::pair<int64_t, int64_t>{9, 3}, {4, 4}}) {
    for (int64_t head_dim : {64, 80, 12}) {
      for (int64_t block_size : {16, 7}) {
        for (int64_t window : {0, 37}) {
          // A scale per head, or per 4 codes (every head_dim here is a multiple of 4).
          const int64_t group = window == 0 ? 0 : 4;
          const I8Inputs in = quantize(make_paged(paged_shape(n_head, n_head_kv, head_dim,
                                                              block_size, window, seed % 2 ? 8 : 0),
                                                  kMix8, seed),
                                       group);
          ++seed;
          expect_i8_matches_f32(
              in, {nullptr, &pool3},
              "heads " + std::to_string(n_head) + "/" + std::to_string(n_head_kv) + " head_dim " +
                  std::to_string(head_dim) + " block " + std::to_string(block_size) + " window " +
                  std::to_string(window) + " group " + std::to_string(group));
        }
      }
    }
  }
}

TEST(PagedAttentionI8, EverySimdTarget) {
  for (int64_t target : rinfer::test::simd_targets_to_test()) {
    rinfer::test::ScopedSimdTarget scope(target);
    const I8Inputs in = quantize(make_paged(paged_shape(9, 3, 80, 7, 20), kMix8, 8200), 16);
    expect_i8_matches_f32(in, {nullptr}, std::string(simd_target_name()));
  }
}

TEST(PagedAttentionI8, BadShapesAreRefused) {
  const SeqSpec specs[] = {{1, 20}, {3, 40}};
  const I8Inputs in = quantize(make_paged(paged_shape(4, 2, 8, 7), specs, 8300));
  std::vector<float> out(in.f32.q.size());
  auto call = [&](const PagedAttentionShape& s) {
    return paged_attention({}, s, in.f32.seqs, in.f32.q.data(), in.k8.data(), in.v8.data(),
                           out.data());
  };
  EXPECT_TRUE(call(in.s).ok());
  PagedAttentionShape s = in.s;
  s.kv_row_stride = 16 + 4 * 2 - 1;  // the codes fit, the scales do not
  Status st = call(s);
  EXPECT_NE(st.message().find("kv_row_stride 23 < the 24 a i8 row takes"), std::string::npos)
      << st.to_string();
  s = in.s;
  s.kv_group = 3;  // not a divisor of 8
  st = call(s);
  EXPECT_NE(st.message().find("i8 groups of 3 in a head of 8"), std::string::npos)
      << st.to_string();
  s = in.s;
  s.kv_dtype = DType::kBF16;
  st = call(s);
  EXPECT_NE(st.message().find("K/V of bf16 (f32 or i8)"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace rinfer::cpu
