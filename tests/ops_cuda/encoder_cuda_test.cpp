// The encoder kernels (encoder_ops.h) against the CPU references on random data: LayerNorm with
// its bias and residual fused, bias + exact GELU, the embedding sum, varlen bidirectional
// attention (packed and padded batches, head dims 32 / 64 / 128), mean and CLS pooling.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/encoder_ops.h"

namespace rinfer {
namespace {

class CudaEncoderOps : public test::CudaTest {
 protected:
  static cpu::OpContext ref_ctx() {
    cpu::OpContext c;
    c.impl = cpu::Impl::kReference;
    return c;
  }
};

TEST_F(CudaEncoderOps, LayerNormMatchesTheReference) {
  uint64_t seed = 10;
  for (auto [rows, n] :
       {std::pair<int64_t, int64_t>{1, 1}, {5, 384}, {3, 768}, {17, 1000}, {2, 8192}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(n));
    const auto total = static_cast<size_t>(rows * n);
    const auto x = test::random_floats(total, ++seed, -3.0f, 3.0f);
    const auto res = test::random_floats(total, ++seed, -2.0f, 2.0f);
    const auto bias = test::random_floats(static_cast<size_t>(n), ++seed, -0.5f, 0.5f);
    const auto g = test::random_floats(static_cast<size_t>(n), ++seed, 0.5f, 1.5f);
    const auto b = test::random_floats(static_cast<size_t>(n), ++seed, -0.2f, 0.2f);
    // The reference of z = x + bias + res: LayerNorm(x + bias, res).
    std::vector<float> xb(x);
    for (size_t i = 0; i < total; ++i) xb[i] += bias[i % static_cast<size_t>(n)];
    std::vector<float> ref(total), ref_plain(total);
    cpu::layer_norm(ref_ctx(), xb.data(), res.data(), g.data(), b.data(), rows, n, 1e-12f,
                    ref.data());
    cpu::layer_norm(ref_ctx(), x.data(), nullptr, g.data(), b.data(), rows, n, 1e-5f,
                    ref_plain.data());
    cuda::DeviceBuffer dx = upload(x), dr = upload(res), dbias = upload(bias), dg = upload(g),
                       db = upload(b);
    cuda::DeviceBuffer out = poisoned<float>(total);
    cuda::DeviceBuffer outb = poisoned<uint16_t>(total);
    CU_ASSERT_OK(cuda::layer_norm(dx.as<float>(), dbias.as<float>(), dr.as<float>(), dg.as<float>(),
                                  db.as<float>(), rows, n, 1e-12f, out.as<float>(),
                                  outb.as<uint16_t>(), stream()));
    const auto y = download<float>(out, total);
    const auto yb = test::bf16_to_f32(download<uint16_t>(outb, total));
    EXPECT_EQ(test::count_non_finite(y), 0u);
    if (n > 1) {
      EXPECT_LT(test::rel_l2(y, ref), 2e-6);
      EXPECT_LT(test::rel_l2(yb, ref), 5e-3);
    }
    EXPECT_EQ(yb, test::round_bf16(y));  // the bf16 output is the f32 one rounded
    // In place over the residual, no bias: out aliases res.
    std::vector<float> ref_inplace(total);
    cpu::layer_norm(ref_ctx(), x.data(), res.data(), g.data(), b.data(), rows, n, 1e-12f,
                    ref_inplace.data());
    CU_ASSERT_OK(cuda::layer_norm(dx.as<float>(), nullptr, dr.as<float>(), dg.as<float>(),
                                  db.as<float>(), rows, n, 1e-12f, dr.as<float>(), nullptr,
                                  stream()));
    if (n > 1) EXPECT_LT(test::rel_l2(download<float>(dr, total), ref_inplace), 2e-6);
    // Plain (no bias, no residual), another eps.
    CU_ASSERT_OK(cuda::layer_norm(dx.as<float>(), nullptr, nullptr, dg.as<float>(), db.as<float>(),
                                  rows, n, 1e-5f, out.as<float>(), nullptr, stream()));
    if (n > 1) EXPECT_LT(test::rel_l2(download<float>(out, total), ref_plain), 2e-6);
  }
}

TEST_F(CudaEncoderOps, BiasGeluMatchesTheReference) {
  uint64_t seed = 40;
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 2}, {7, 1536}, {33, 3072}, {3, 130}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(n));
    const auto total = static_cast<size_t>(rows * n);
    // Wide enough for both tails (z down to -12: tiny negative outputs).
    const auto x = test::random_floats(total, ++seed, -12.0f, 6.0f);
    const auto bias = test::random_floats(static_cast<size_t>(n), ++seed, -1.0f, 1.0f);
    std::vector<float> ref(x);
    cpu::gelu_erf(ref_ctx(), ref.data(), bias.data(), rows, n);  // double, erfc: exact tails
    // f32 input.
    cuda::DeviceBuffer dx = upload(x), dbias = upload(bias);
    cuda::DeviceBuffer out = poisoned<uint16_t>(total);
    CU_ASSERT_OK(cuda::bias_gelu_erf(dx.data(), DType::kF32, dbias.as<float>(), rows, n,
                                     out.as<uint16_t>(), stream()));
    const auto y = test::bf16_to_f32(download<uint16_t>(out, total));
    // Each output within bf16 rounding (2^-8 relative) of the exact value, tails included.
    size_t bad = 0;
    for (size_t i = 0; i < total; ++i) {
      if (!(std::fabs(y[i] - ref[i]) <= std::fabs(ref[i]) * 0.0040f + 1e-30f)) ++bad;
    }
    EXPECT_EQ(bad, 0u);
    // bf16 input, in place: the reference on the rounded inputs.
    const auto xr = test::round_bf16(x);
    std::vector<uint16_t> xb(total);
    for (size_t i = 0; i < total; ++i) xb[i] = f32_to_bf16(x[i]);
    std::vector<float> ref_b(xr);
    cpu::gelu_erf(ref_ctx(), ref_b.data(), bias.data(), rows, n);
    cuda::DeviceBuffer dxb = upload(xb);
    CU_ASSERT_OK(cuda::bias_gelu_erf(dxb.data(), DType::kBF16, dbias.as<float>(), rows, n,
                                     dxb.as<uint16_t>(), stream()));
    const auto yb = test::bf16_to_f32(download<uint16_t>(dxb, total));
    bad = 0;
    for (size_t i = 0; i < total; ++i) {
      if (!(std::fabs(yb[i] - ref_b[i]) <= std::fabs(ref_b[i]) * 0.0040f + 1e-30f)) ++bad;
    }
    EXPECT_EQ(bad, 0u);
  }
  // Odd rows are refused.
  EXPECT_FALSE(cuda::bias_gelu_erf(nullptr, DType::kF32, nullptr, 1, 3, nullptr, stream()).ok());
}

TEST_F(CudaEncoderOps, EmbedSumMatchesTheGather) {
  const int64_t n = 384, n_word = 1000, n_pos = 64, n_type = 2, rows = 77;
  const auto word = test::random_floats(static_cast<size_t>(n_word * n), 71);
  const auto pos = test::random_floats(static_cast<size_t>(n_pos * n), 72);
  const auto type = test::random_floats(static_cast<size_t>(n_type * n), 73);
  std::vector<int32_t> ids(rows), positions(rows), types(rows);
  for (int64_t r = 0; r < rows; ++r) {
    ids[static_cast<size_t>(r)] = static_cast<int32_t>((r * 37 + 5) % n_word);
    positions[static_cast<size_t>(r)] = static_cast<int32_t>(r % n_pos);
    types[static_cast<size_t>(r)] = static_cast<int32_t>(r % 3 == 0);
  }
  cuda::DeviceBuffer dw = upload(word), dp = upload(pos), dt = upload(type), di = upload(ids),
                     dpos = upload(positions), dty = upload(types);
  cuda::DeviceBuffer out = poisoned<float>(static_cast<size_t>(rows * n));
  const cuda::EmbedTables tables{dw.as<float>(), dp.as<float>(), dt.as<float>(), n};
  for (bool with_types : {true, false}) {
    CU_ASSERT_OK(cuda::embed_sum(tables, di.as<int32_t>(), dpos.as<int32_t>(),
                                 with_types ? dty.as<int32_t>() : nullptr, rows, out.as<float>(),
                                 stream()));
    const auto y = download<float>(out, static_cast<size_t>(rows * n));
    size_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const auto i = static_cast<size_t>(r);
      const int64_t t = with_types ? types[i] : 0;
      for (int64_t c = 0; c < n; ++c) {
        const float want =
            word[static_cast<size_t>(ids[i] * n + c)] +
            (pos[static_cast<size_t>(positions[i] * n + c)] + type[static_cast<size_t>(t * n + c)]);
        if (y[static_cast<size_t>(r * n + c)] != want) ++bad;
      }
    }
    EXPECT_EQ(bad, 0u) << (with_types ? "with types" : "type 0");
  }
}

// One batch: sequences of `lengths` in slots of `slots` rows (padded when a slot is longer).
struct VarlenCase {
  int64_t head_dim;
  int64_t n_head;
  std::vector<int32_t> lengths;
  std::vector<int32_t> slots;  // empty: packed
};

TEST_F(CudaEncoderOps, VarlenAttentionMatchesTheReference) {
  const std::vector<VarlenCase> cases = {
      {32, 12, {7, 1, 64, 65, 130, 40, 256}, {}},
      {32, 12, {5, 30, 17}, {30, 30, 30}},
      {64, 4, {200, 3, 128}, {}},
      {128, 2, {33, 100}, {}},
  };
  uint64_t seed = 100;
  for (const VarlenCase& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim));
    const int64_t width = c.n_head * c.head_dim, stride = 3 * width + 8;  // padded rows
    const size_t n_seqs = c.lengths.size();
    std::vector<int32_t> starts(n_seqs);
    int32_t rows = 0, max_len = 0;
    for (size_t s = 0; s < n_seqs; ++s) {
      starts[s] = rows;
      rows += c.slots.empty() ? c.lengths[s] : c.slots[s];
      max_len = std::max(max_len, c.lengths[s]);
    }
    const auto vals = test::random_floats(static_cast<size_t>(rows * stride), ++seed, -2.0f, 2.0f);
    const auto bias = test::random_floats(static_cast<size_t>(3 * width), ++seed, -0.5f, 0.5f);
    std::vector<uint16_t> qkv(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) qkv[i] = f32_to_bf16(vals[i]);
    // The reference inputs: bf16 values + bias, rounded to bf16 (as the kernel loads them).
    std::vector<float> q(static_cast<size_t>(rows * width)), k(q.size()), v(q.size());
    for (int32_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        auto at = [&](int64_t part) {
          const auto col = static_cast<size_t>(part * width + i);
          const float x = bf16_to_f32(qkv[static_cast<size_t>(r * stride) + col]) + bias[col];
          return bf16_to_f32(f32_to_bf16(x));
        };
        const auto o = static_cast<size_t>(r * width + i);
        q[o] = at(0);
        k[o] = at(1);
        v[o] = at(2);
      }
    }
    std::vector<int32_t> table(static_cast<size_t>(rows));
    for (int32_t r = 0; r < rows; ++r) table[static_cast<size_t>(r)] = r;
    std::vector<cpu::AttentionSeq> seqs;
    for (size_t s = 0; s < n_seqs; ++s) {
      seqs.push_back({starts[s], c.lengths[s], c.lengths[s], table.data() + starts[s]});
    }
    cpu::PagedAttentionShape as;
    as.n_head = as.n_head_kv = c.n_head;
    as.head_dim = c.head_dim;
    as.kv_row_stride = width;
    as.block_size = 1;
    as.n_blocks = rows;
    as.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    as.causal = false;
    std::vector<float> ref(q.size(), 0.0f);
    CU_ASSERT_OK(
        cpu::paged_attention(ref_ctx(), as, seqs, q.data(), k.data(), v.data(), ref.data()));

    cuda::DeviceBuffer dqkv = upload(qkv), dbias = upload(bias), dstarts = upload(starts),
                       dlens = upload(c.lengths);
    cuda::DeviceBuffer out = poisoned<uint16_t>(q.size());
    cuda::VarlenAttentionParams p;
    p.n_seqs = static_cast<int64_t>(n_seqs);
    p.n_head = c.n_head;
    p.head_dim = c.head_dim;
    p.qkv_stride = stride;
    p.out_stride = width;
    p.max_len = max_len;
    p.scale = as.scale;
    p.starts = dstarts.as<int32_t>();
    p.lengths = dlens.as<int32_t>();
    p.bias = dbias.as<float>();
    CU_ASSERT_OK(cuda::attention_varlen(p, dqkv.as<uint16_t>(), out.as<uint16_t>(), stream()));
    const auto got = test::bf16_to_f32(download<uint16_t>(out, q.size()));
    // Compare each sequence's rows; padding rows must be left unwritten (still the poison).
    for (size_t s = 0; s < n_seqs; ++s) {
      const int32_t slot = c.slots.empty() ? c.lengths[s] : c.slots[s];
      const auto first = static_cast<size_t>(starts[s] * width);
      const auto n_valid = static_cast<size_t>(c.lengths[s] * width);
      std::vector<float> g(got.begin() + static_cast<std::ptrdiff_t>(first),
                           got.begin() + static_cast<std::ptrdiff_t>(first + n_valid));
      std::vector<float> r(ref.begin() + static_cast<std::ptrdiff_t>(first),
                           ref.begin() + static_cast<std::ptrdiff_t>(first + n_valid));
      EXPECT_EQ(test::count_non_finite(g), 0u) << "sequence " << s;
      EXPECT_LT(test::rel_l2(g, r), 1e-2) << "sequence " << s;
      size_t written = 0;
      for (auto i = first + n_valid; i < static_cast<size_t>((starts[s] + slot) * width); ++i) {
        written += std::isnan(got[i]) ? 0 : 1;
      }
      EXPECT_EQ(written, 0u) << "padding of sequence " << s;
    }
  }
  cuda::VarlenAttentionParams bad;
  bad.head_dim = 48;
  EXPECT_EQ(cuda::attention_varlen(bad, nullptr, nullptr, stream()).code(),
            StatusCode::kUnsupported);
}

TEST_F(CudaEncoderOps, PoolRowsMatchesTheReference) {
  const int64_t n = 384;
  const std::vector<int32_t> starts = {0, 5, 6, 70, 90};
  const std::vector<int32_t> lengths = {5, 1, 60, 20, 3};
  const int64_t rows = 93;
  auto hidden = test::random_floats(static_cast<size_t>(rows * n), 7, -1.0f, 1.0f);
  // A zero row stays zero when normalized.
  for (int64_t c = 0; c < n; ++c) hidden[static_cast<size_t>(5 * n + c)] = 0.0f;
  cuda::DeviceBuffer dh = upload(hidden), ds = upload(starts), dl = upload(lengths);
  for (cpu::PoolKind kind : {cpu::PoolKind::kMean, cpu::PoolKind::kCls}) {
    for (bool normalize : {true, false}) {
      std::vector<float> ref(starts.size() * static_cast<size_t>(n));
      cpu::pool_rows(kind, normalize, hidden.data(), n, starts, lengths, ref.data());
      cuda::DeviceBuffer out = poisoned<float>(ref.size());
      CU_ASSERT_OK(cuda::pool_rows(kind, normalize, dh.as<float>(), n, ds.as<int32_t>(),
                                   dl.as<int32_t>(), static_cast<int64_t>(starts.size()),
                                   out.as<float>(), stream()));
      const auto y = download<float>(out, ref.size());
      EXPECT_EQ(test::count_non_finite(y), 0u);
      EXPECT_LT(test::rel_l2(y, ref), 1e-6) << (kind == cpu::PoolKind::kCls ? "cls" : "mean");
    }
  }
}

}  // namespace
}  // namespace rinfer
