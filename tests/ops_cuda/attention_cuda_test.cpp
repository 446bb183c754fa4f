// Decode (flash-decoding) and prefill (FlashAttention-2 tiles) attention against the CPU scalar
// reference cpu::attention(kReference): GQA ratios 1, 3, 4 and 8, head dims 64 and 128, f32 and
// bf16 caches with padded rows, contexts up to 32k for decode.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

struct Case {
  int64_t n_tokens, n_kv, n_head, n_head_kv, head_dim;
};

std::string name(const Case& c, DType t) {
  return std::string(dtype_name(t)) + " tokens " + std::to_string(c.n_tokens) + " kv " +
         std::to_string(c.n_kv) + " heads " + std::to_string(c.n_head) + "/" +
         std::to_string(c.n_head_kv) + " d " + std::to_string(c.head_dim);
}

class CudaAttention : public test::CudaTest {
 public:
  // Runs one case; returns the relative L2 error against the reference (negative on failure).
  double run(const Case& c, DType kv_t, bool decode, uint64_t seed, DType out_t = DType::kF32) {
    const int64_t width = c.n_head_kv * c.head_dim, row = width + 8;  // padded cache rows
    const size_t cache_n = static_cast<size_t>(c.n_kv * row);
    // Cache values as the kernels will see them (bf16-rounded for a bf16 cache).
    std::vector<float> k = test::random_floats(cache_n, seed, -1.0f, 1.0f);
    std::vector<float> v = test::random_floats(cache_n, seed + 1, -1.0f, 1.0f);
    if (kv_t == DType::kBF16) {
      k = test::round_bf16(k);
      v = test::round_bf16(v);
    }
    const size_t q_n = static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim);
    const std::vector<float> q = test::random_floats(q_n, seed + 2, -1.0f, 1.0f);
    cpu::AttentionShape s{c.n_tokens,
                          c.n_kv,
                          c.n_head,
                          c.n_head_kv,
                          c.head_dim,
                          row,
                          1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    cpu::OpContext ctx;
    ctx.impl = cpu::Impl::kReference;
    // Prefill rounds q to bf16 on the way in: give the reference the same q.
    const std::vector<float> q_ref = decode ? q : test::round_bf16(q);
    std::vector<float> ref(q_n);
    const Status rs = cpu::attention(ctx, s, q_ref.data(), k.data(), v.data(), ref.data());
    EXPECT_TRUE(rs.ok()) << rs.to_string();

    cuda::DeviceBuffer dk, dv;
    if (kv_t == DType::kBF16) {
      std::vector<uint16_t> kb(cache_n), vb(cache_n);
      for (size_t i = 0; i < cache_n; ++i) {
        kb[i] = f32_to_bf16(k[i]);
        vb[i] = f32_to_bf16(v[i]);
      }
      dk = upload(kb);
      dv = upload(vb);
    } else {
      dk = upload(k);
      dv = upload(v);
    }
    cuda::DeviceBuffer dq = upload(q);
    cuda::AttentionParams p;
    p.n_tokens = c.n_tokens;
    p.n_kv = c.n_kv;
    p.n_head = c.n_head;
    p.kv = {kv_t, c.n_head_kv, c.head_dim, row};
    p.scale = s.scale;
    std::vector<float> got;
    if (decode) {
      const size_t ws_bytes = cuda::attention_decode_workspace_bytes(p);
      auto ws = cuda::DeviceBuffer::create(ws_bytes + 16, 0, stream());
      EXPECT_TRUE(ws.ok());
      cuda::DeviceBuffer out = poisoned<float>(q_n);
      const Status st = cuda::attention_decode(p, dq.as<float>(), dk.data(), dv.data(),
                                               out.as<float>(), ws->data(), ws->bytes(), stream());
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (!st.ok()) return -1.0;
      got = download<float>(out, q_n);
    } else {
      const size_t ws_bytes = cuda::attention_prefill_workspace_bytes(p);
      auto ws = cuda::DeviceBuffer::create(ws_bytes + 16, 0, stream());
      EXPECT_TRUE(ws.ok());
      if (out_t == DType::kF32) {
        cuda::DeviceBuffer out = poisoned<float>(q_n);
        const Status st =
            cuda::attention_prefill(p, dq.as<float>(), dk.data(), dv.data(), DType::kF32,
                                    out.data(), ws->data(), ws->bytes(), stream());
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) return -1.0;
        got = download<float>(out, q_n);
      } else {
        cuda::DeviceBuffer out = poisoned<uint16_t>(q_n);
        const Status st =
            cuda::attention_prefill(p, dq.as<float>(), dk.data(), dv.data(), DType::kBF16,
                                    out.data(), ws->data(), ws->bytes(), stream());
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) return -1.0;
        got = test::bf16_to_f32(download<uint16_t>(out, q_n));
      }
    }
    EXPECT_EQ(test::count_non_finite(got), 0u);
    return test::rel_l2(got, ref);
  }
};

void decode_cases(CudaAttention* t, const std::vector<Case>& cases, uint64_t seed);

TEST_F(CudaAttention, DecodeMatchesTheReferenceForEveryGqaRatio) {
  decode_cases(this,
               {{1, 1, 4, 4, 128},
                {1, 17, 12, 4, 64},
                {1, 300, 8, 2, 128},
                {1, 1000, 32, 4, 64},
                {1, 4099, 24, 8, 128},
                {1, 4099, 32, 32, 64},
                {1, 777, 36, 4, 128},
                {1, 130, 16, 2, 64}},
               1000);
}

TEST_F(CudaAttention, DecodeOverLongContexts) {
  decode_cases(this,
               {{1, 32768, 32, 8, 128},
                {1, 32768, 32, 4, 128},
                {1, 20000, 24, 8, 64},
                {1, 32768, 16, 16, 128}},
               2000);
}

void decode_cases(CudaAttention* t, const std::vector<Case>& cases, uint64_t seed) {
  for (const Case& c : cases) {
    for (DType kv : {DType::kBF16, DType::kF32}) {
      if (c.n_kv >= 20000 && kv == DType::kF32 && c.n_head != c.n_head_kv) continue;  // time
      SCOPED_TRACE(name(c, kv));
      const double err = t->run(c, kv, /*decode=*/true, seed += 10);
      EXPECT_GE(err, 0.0);
      EXPECT_LT(err, 1e-5);  // f32 arithmetic on exactly the cached values
    }
  }
}

TEST_F(CudaAttention, PrefillMatchesTheReference) {
  uint64_t seed = 5000;
  const std::vector<Case> cases = {{1, 1, 4, 4, 128},     {5, 5, 6, 2, 64},
                                   {64, 64, 8, 8, 128},   {100, 113, 12, 4, 64},
                                   {257, 257, 8, 1, 128}, {130, 1030, 24, 8, 128},
                                   {33, 2000, 32, 4, 64}, {512, 512, 32, 8, 128}};
  for (const Case& c : cases) {
    for (DType t : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(name(c, t));
      const double err = run(c, t, /*decode=*/false, seed += 10);
      EXPECT_GE(err, 0.0);
      EXPECT_LT(err, 1e-2);  // bf16 tensor-core inputs
    }
  }
  SCOPED_TRACE("bf16 output");
  const double err = run({77, 200, 12, 3, 128}, DType::kBF16, false, 9, DType::kBF16);
  EXPECT_GE(err, 0.0);
  EXPECT_LT(err, 1e-2);
}

TEST_F(CudaAttention, RejectsBadShapes) {
  cuda::DeviceBuffer b = poisoned<float>(4096);
  cuda::AttentionParams p;
  p.n_tokens = 1;
  p.n_kv = 4;
  p.n_head = 6;
  p.kv = {DType::kF32, 4, 64, 256};
  // n_head not a multiple of n_head_kv
  EXPECT_EQ(cuda::attention_decode(p, b.as<float>(), b.data(), b.data(), b.as<float>(), nullptr, 0,
                                   stream())
                .code(),
            StatusCode::kInvalidArgument);
  p.n_head = 8;
  p.kv.head_dim = 96;
  p.kv.kv_row_stride = 4 * 96;
  EXPECT_EQ(cuda::attention_decode(p, b.as<float>(), b.data(), b.data(), b.as<float>(), nullptr, 0,
                                   stream())
                .code(),
            StatusCode::kUnsupported);
  p.kv.head_dim = 64;
  p.n_tokens = 5;  // more tokens than cache rows
  EXPECT_EQ(cuda::attention_prefill(p, b.as<float>(), b.data(), b.data(), DType::kF32, b.data(),
                                    nullptr, 0, stream())
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rinfer
