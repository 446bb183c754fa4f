// RMSNorm (plain and fused with the residual add), RoPE, SwiGLU, GeGLU (tanh), softmax,
// f32<->bf16, KV store (plain, ring, device position) and the embedding gather against the CPU
// references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/model_ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

class CudaElementwise : public test::CudaTest {
 protected:
  cpu::OpContext ref_ctx() const {
    cpu::OpContext c;
    c.impl = cpu::Impl::kReference;
    return c;
  }
};

TEST_F(CudaElementwise, RmsNormMatchesTheReference) {
  uint64_t seed = 1;
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1},
                         {3, 100},
                         {7, 4096},
                         {2, 14335},
                         {33, 577},
                         {4, 576},
                         {5, 8192},
                         {2, 2048}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(n));
    const size_t total = static_cast<size_t>(rows * n);
    const auto x = test::random_floats(total, ++seed, -3.0f, 3.0f);
    const auto w = test::random_floats(static_cast<size_t>(n), ++seed, 0.5f, 1.5f);
    std::vector<float> ref(total);
    cpu::rms_norm(ref_ctx(), x.data(), w.data(), rows, n, 1e-5f, ref.data());
    cuda::DeviceBuffer dx = upload(x), dw = upload(w);
    cuda::DeviceBuffer out = poisoned<float>(total);
    CU_ASSERT_OK(cuda::rms_norm(dx.as<float>(), dw.as<float>(), rows, n, 1e-5f, DType::kF32,
                                out.data(), stream()));
    auto y = download<float>(out, total);
    EXPECT_EQ(test::count_non_finite(y), 0u);
    EXPECT_LT(test::rel_l2(y, ref), 1e-5);
    // bf16 output.
    cuda::DeviceBuffer outb = poisoned<uint16_t>(total);
    CU_ASSERT_OK(cuda::rms_norm(dx.as<float>(), dw.as<float>(), rows, n, 1e-5f, DType::kBF16,
                                outb.data(), stream()));
    const auto yb = test::bf16_to_f32(download<uint16_t>(outb, total));
    EXPECT_EQ(test::count_non_finite(yb), 0u);
    EXPECT_LT(test::rel_l2(yb, ref), 1e-2);
    // No weight, in place.
    std::vector<float> ref_nw(total);
    cpu::rms_norm(ref_ctx(), x.data(), nullptr, rows, n, 1e-6f, ref_nw.data());
    CU_ASSERT_OK(
        cuda::rms_norm(dx.as<float>(), nullptr, rows, n, 1e-6f, DType::kF32, dx.data(), stream()));
    EXPECT_LT(test::rel_l2(download<float>(dx, total), ref_nw), 1e-5);

    // Fused: residual += x; out = rms_norm(residual) * w.
    const auto r0 = test::random_floats(total, ++seed, -2.0f, 2.0f);
    cuda::DeviceBuffer dres = upload(r0), dx2 = upload(x);
    cuda::DeviceBuffer out2 = poisoned<float>(total);
    CU_ASSERT_OK(cuda::add_rms_norm(dres.as<float>(), dx2.as<float>(), dw.as<float>(), rows, n,
                                    1e-5f, DType::kF32, out2.data(), stream()));
    std::vector<float> sum(total), ref2(total);
    for (size_t i = 0; i < total; ++i) sum[i] = r0[i] + x[i];
    cpu::rms_norm(ref_ctx(), sum.data(), w.data(), rows, n, 1e-5f, ref2.data());
    EXPECT_LT(test::rel_l2(download<float>(dres, total), sum), 1e-7);
    EXPECT_LT(test::rel_l2(download<float>(out2, total), ref2), 1e-5);
  }
  cuda::DeviceBuffer b = poisoned<float>(8);
  EXPECT_EQ(cuda::add_rms_norm(b.as<float>(), b.as<float>(), nullptr, 1, 8, 1e-5f, DType::kF32,
                               b.data(), stream())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::rms_norm(b.as<float>(), nullptr, 1, 8, 1e-5f, DType::kI32, b.data(), stream()).code(),
      StatusCode::kInvalidArgument);
}

TEST_F(CudaElementwise, RopeMatchesTheReferenceAtLongPositions) {
  uint64_t seed = 50;
  for (cpu::RopeMode mode : {cpu::RopeMode::kNormal, cpu::RopeMode::kNeox}) {
    for (auto [n_rot, head_dim] : {std::pair<int64_t, int64_t>{128, 128}, {64, 64}, {32, 64}}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(mode)) + " n_rot " + std::to_string(n_rot) +
                   " head_dim " + std::to_string(head_dim));
      const int64_t n_tokens = 37, n_heads = 5, stride = n_heads * head_dim + 8;
      std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
      for (int64_t t = 0; t < n_tokens; ++t)
        pos[static_cast<size_t>(t)] = static_cast<int32_t>(t * 997 % 32768);
      pos[0] = 32767;
      const auto x = test::random_floats(static_cast<size_t>(n_tokens * stride), ++seed);
      cpu::RopeParams p;
      p.n_rot = n_rot;
      p.freq_base = 500000.0f;
      p.freq_scale = 0.5f;
      p.mode = mode;
      // Reference on the packed [n_tokens, n_heads, head_dim] rows.
      std::vector<float> packed(static_cast<size_t>(n_tokens * n_heads * head_dim));
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t i = 0; i < n_heads * head_dim; ++i) {
          packed[static_cast<size_t>(t * n_heads * head_dim + i)] =
              x[static_cast<size_t>(t * stride + i)];
        }
      }
      cpu::rope(ref_ctx(), packed.data(), n_tokens, n_heads, head_dim, pos, p);
      cuda::DeviceBuffer dx = upload(x), dpos = upload(pos);
      CU_ASSERT_OK(cuda::rope(dx.as<float>(), n_tokens, n_heads, head_dim, stride,
                              dpos.as<int32_t>(), p, stream()));
      const auto y = download<float>(dx, x.size());
      std::vector<float> got(packed.size());
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t i = 0; i < n_heads * head_dim; ++i) {
          got[static_cast<size_t>(t * n_heads * head_dim + i)] =
              y[static_cast<size_t>(t * stride + i)];
        }
        for (int64_t i = n_heads * head_dim; i < stride; ++i) {  // the pad is untouched
          EXPECT_EQ(y[static_cast<size_t>(t * stride + i)], x[static_cast<size_t>(t * stride + i)]);
        }
      }
      EXPECT_LT(test::rel_l2(got, packed), 1e-6);
    }
  }
}

// The gate and up halves of a fused [rows, 2n] buffer, each as [rows, n].
void split_halves(const std::vector<float>& gu, int64_t rows, int64_t n, std::vector<float>& gate,
                  std::vector<float>& up) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      gate.push_back(gu[static_cast<size_t>(r * 2 * n + i)]);
      up.push_back(gu[static_cast<size_t>(r * 2 * n + n + i)]);
    }
  }
}

TEST_F(CudaElementwise, SwigluSoftmaxAndConvert) {
  // SwiGLU on the halves of a fused [rows, 2n] buffer: odd n (one element a thread) and n % 4
  // == 0 (four a thread).
  for (const int64_t n : {int64_t{1001}, int64_t{1024}}) {
    SCOPED_TRACE("swiglu n " + std::to_string(n));
    const int64_t rows = 9;
    const auto gu = test::random_floats(static_cast<size_t>(rows * 2 * n), 3, -6.0f, 6.0f);
    std::vector<float> gate, up, ref(static_cast<size_t>(rows * n));
    split_halves(gu, rows, n, gate, up);
    cpu::swiglu(ref_ctx(), gate.data(), up.data(), rows * n, ref.data());
    cuda::DeviceBuffer dgu = upload(gu);
    cuda::DeviceBuffer out = poisoned<float>(ref.size());
    CU_ASSERT_OK(cuda::swiglu(dgu.as<float>(), dgu.as<float>() + n, rows, n, 2 * n, DType::kF32,
                              out.data(), stream()));
    auto y = download<float>(out, ref.size());
    EXPECT_EQ(test::count_non_finite(y), 0u);
    EXPECT_LT(test::rel_l2(y, ref), 1e-6);
    cuda::DeviceBuffer outb = poisoned<uint16_t>(ref.size());
    CU_ASSERT_OK(cuda::swiglu(dgu.as<float>(), dgu.as<float>() + n, rows, n, 2 * n, DType::kBF16,
                              outb.data(), stream()));
    const auto yb = download<uint16_t>(outb, ref.size());
    size_t off = 0;  // bf16 output is the f32 output rounded to nearest even
    for (size_t i = 0; i < yb.size(); ++i) off += yb[i] != f32_to_bf16(y[i]) ? 1 : 0;
    EXPECT_EQ(off, 0u);
    EXPECT_LT(test::rel_l2(test::bf16_to_f32(yb), ref), 1e-2);
  }

  // Softmax rows, one of them as long as a vocabulary.
  for (auto [srows, sn] : {std::pair<int64_t, int64_t>{5, 1}, {3, 777}, {2, 128256}}) {
    auto x = test::random_floats(static_cast<size_t>(srows * sn), 9, -20.0f, 20.0f);
    std::vector<float> sref = x;
    for (int64_t r = 0; r < srows; ++r) cpu::softmax(sref.data() + r * sn, sn);
    cuda::DeviceBuffer dx = upload(x);
    CU_ASSERT_OK(cuda::softmax(dx.as<float>(), srows, sn, stream()));
    EXPECT_LT(test::rel_l2(download<float>(dx, x.size()), sref), 1e-5) << sn;
  }

  // f32 -> bf16 rounds to nearest even like the host conversion.
  const auto c = test::random_floats(10007, 4, -1e4f, 1e4f);
  cuda::DeviceBuffer dc = upload(c);
  cuda::DeviceBuffer db = poisoned<uint16_t>(c.size());
  CU_ASSERT_OK(cuda::convert_f32_to_bf16(dc.as<float>(), static_cast<int64_t>(c.size()),
                                         db.as<uint16_t>(), stream()));
  const auto cb = download<uint16_t>(db, c.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < c.size(); ++i) mismatches += cb[i] != f32_to_bf16(c[i]) ? 1 : 0;
  EXPECT_EQ(mismatches, 0u);

  // bf16 -> f32 is exact: back to the host's widening of the same bits.
  cuda::DeviceBuffer dw = poisoned<float>(c.size());
  CU_ASSERT_OK(cuda::convert_bf16_to_f32(db.as<uint16_t>(), static_cast<int64_t>(c.size()),
                                         dw.as<float>(), stream()));
  const auto cw = download<float>(dw, c.size());
  const auto want = test::bf16_to_f32(cb);
  mismatches = 0;
  for (size_t i = 0; i < c.size(); ++i) mismatches += cw[i] != want[i] ? 1 : 0;
  EXPECT_EQ(mismatches, 0u);
  EXPECT_FALSE(cuda::convert_bf16_to_f32(nullptr, 3, dw.as<float>(), stream()).ok());
}

// The fused decode kernel gives exactly what rope then kv_store give: the same qkv rows and the
// same cache bytes (rows at device positions, a ring, partial rotation, both cache dtypes).
TEST_F(CudaElementwise, RopeKvStoreMatchesRopeThenKvStore) {
  uint64_t seed = 700;
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (auto [n_rot, head_dim, ring] :
         {std::tuple<int64_t, int64_t, int64_t>{64, 64, 0}, {96, 128, 0}, {128, 128, 13}}) {
      for (cpu::RopeMode mode : {cpu::RopeMode::kNormal, cpu::RopeMode::kNeox}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " n_rot " + std::to_string(n_rot) + " head_dim " +
                     std::to_string(head_dim) + " ring " + std::to_string(ring));
        const int64_t n_head = 5, n_head_kv = 3, n_tokens = 3, n_ctx = 50;
        const int64_t width = n_head_kv * head_dim, row = width + 8;
        const int64_t stride = (n_head + 2 * n_head_kv) * head_dim + 4;
        const int64_t elem = t == DType::kF32 ? 4 : 2;
        const int64_t rows = ring > 0 ? ring : n_ctx;
        const size_t cache_bytes = static_cast<size_t>(rows * row * elem);
        const auto x = test::random_floats(static_cast<size_t>(n_tokens * stride), ++seed);
        const std::vector<int32_t> pos = {40, 41, 42};
        cpu::RopeParams p;
        p.n_rot = n_rot;
        p.freq_base = 10000.0f;
        p.mode = mode;
        cuda::KvLayout lay{t, n_head_kv, head_dim, row, ring};
        cuda::DeviceBuffer dpos = upload(pos);
        cuda::DeviceBuffer xa = upload(x), xb = upload(x);
        cuda::DeviceBuffer ka = poisoned<uint8_t>(cache_bytes), va = poisoned<uint8_t>(cache_bytes);
        cuda::DeviceBuffer kb = poisoned<uint8_t>(cache_bytes), vb = poisoned<uint8_t>(cache_bytes);
        float* qa = xa.as<float>();
        CU_ASSERT_OK(cuda::rope(qa, n_tokens, n_head + n_head_kv, head_dim, stride,
                                dpos.as<int32_t>(), p, stream()));
        CU_ASSERT_OK(cuda::kv_store(qa + n_head * head_dim, qa + (n_head + n_head_kv) * head_dim,
                                    n_tokens, stride, lay, ka.data(), va.data(), 0, stream(),
                                    dpos.as<int32_t>()));
        CU_ASSERT_OK(cuda::rope_kv_store(xb.as<float>(), n_tokens, n_head, stride,
                                         dpos.as<int32_t>(), p, lay, kb.data(), vb.data(),
                                         stream()));
        EXPECT_EQ(download<float>(xa, x.size()), download<float>(xb, x.size()));
        EXPECT_EQ(download<uint8_t>(ka, cache_bytes), download<uint8_t>(kb, cache_bytes));
        EXPECT_EQ(download<uint8_t>(va, cache_bytes), download<uint8_t>(vb, cache_bytes));
      }
    }
  }
  cuda::DeviceBuffer b = poisoned<float>(64);
  cuda::KvLayout lay{DType::kBF16, 1, 8, 8, 0};
  EXPECT_EQ(cuda::rope_kv_store(b.as<float>(), 1, 1, 16, nullptr, cpu::RopeParams{}, lay, b.data(),
                                b.data(), stream())
                .code(),
            StatusCode::kInvalidArgument);
}

// The decode fusion residual add + RMSNorm + int16 quantization against the reference and
// against quantize_activation of its own output (1, 2, 4 and 8 float4 a thread), and
// rms_norm_row (the same without the quantization).
TEST_F(CudaElementwise, RmsNormQ16MatchesTheReference) {
  uint64_t seed = 900;
  for (int64_t n : {32, 576, 1024, 1056, 4096, 8192, 14336}) {
    for (bool with_res : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + (with_res ? " residual" : ""));
      const auto x = test::random_floats(static_cast<size_t>(n), ++seed, -3.0f, 3.0f);
      const auto r0 = test::random_floats(static_cast<size_t>(n), ++seed, -2.0f, 2.0f);
      const auto w = test::random_floats(static_cast<size_t>(n), ++seed, 0.5f, 1.5f);
      std::vector<float> sum(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = with_res ? x[i] + r0[i] : x[i];
      cpu::rms_norm(ref_ctx(), sum.data(), w.data(), 1, n, 1e-5f, ref.data());
      cuda::DeviceBuffer dx = upload(x), dr = upload(r0), dw = upload(w);
      cuda::DeviceBuffer out = poisoned<float>(static_cast<size_t>(n));
      const size_t qb = cuda::quantized_activation_bytes(n);
      cuda::DeviceBuffer ws1 = poisoned<uint8_t>(qb), ws2 = poisoned<uint8_t>(qb);
      auto qa1 = cuda::quantized_activation_in(ws1.data(), qb, n);
      auto qa2 = cuda::quantized_activation_in(ws2.data(), qb, n);
      ASSERT_TRUE(qa1.ok() && qa2.ok());
      CU_ASSERT_OK(cuda::rms_norm_q16(dx.as<float>(), with_res ? dr.as<float>() : nullptr,
                                      dw.as<float>(), n, 1e-5f, out.as<float>(), *qa1, stream()));
      const auto y = download<float>(out, static_cast<size_t>(n));
      EXPECT_EQ(test::count_non_finite(y), 0u);
      EXPECT_LT(test::rel_l2(y, ref), 1e-5);
      if (with_res) EXPECT_LT(test::rel_l2(download<float>(dr, sum.size()), sum), 1e-7);
      CU_ASSERT_OK(cuda::quantize_activation(out.as<float>(), *qa2, stream()));
      EXPECT_EQ(download<uint8_t>(ws1, qb), download<uint8_t>(ws2, qb));
      // Without the quantization (rms_norm_row): the same output and residual.
      cuda::DeviceBuffer dr2 = upload(r0);
      cuda::DeviceBuffer out2 = poisoned<float>(static_cast<size_t>(n));
      CU_ASSERT_OK(cuda::rms_norm_row(dx.as<float>(), with_res ? dr2.as<float>() : nullptr,
                                      dw.as<float>(), n, 1e-5f, out2.as<float>(), stream()));
      EXPECT_EQ(download<float>(out2, static_cast<size_t>(n)), y);
      if (with_res) {
        EXPECT_EQ(download<float>(dr2, sum.size()), download<float>(dr, sum.size()));
      }
    }
  }
  cuda::DeviceBuffer b = poisoned<float>(64);
  EXPECT_EQ(
      cuda::rms_norm_row(b.as<float>(), nullptr, b.as<float>(), 48, 1e-5f, b.as<float>(), stream())
          .code(),
      StatusCode::kInvalidArgument);  // not a multiple of 32
}

TEST_F(CudaElementwise, KvStoreWritesRowsAtAnOffset) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    const int64_t n_ctx = 50, n_head_kv = 3, head_dim = 64, n_tokens = 7, pos0 = 40;
    const int64_t width = n_head_kv * head_dim, row = width + 8, src_stride = 3 * width;
    const int64_t elem = t == DType::kF32 ? 4 : 2;
    const auto kv = test::random_floats(static_cast<size_t>(n_tokens * src_stride), 8);
    cuda::DeviceBuffer src = upload(kv);
    cuda::DeviceBuffer kc = poisoned<uint8_t>(static_cast<size_t>(n_ctx * row * elem));
    cuda::DeviceBuffer vc = poisoned<uint8_t>(static_cast<size_t>(n_ctx * row * elem));
    cuda::KvLayout lay{t, n_head_kv, head_dim, row};
    CU_ASSERT_OK(cuda::kv_store(src.as<float>(), src.as<float>() + width, n_tokens, src_stride, lay,
                                kc.data(), vc.data(), pos0, stream()));
    const auto kb = download<uint8_t>(kc, static_cast<size_t>(n_ctx * row * elem));
    const auto vb = download<uint8_t>(vc, static_cast<size_t>(n_ctx * row * elem));
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      for (int64_t e = 0; e < width; ++e) {
        const size_t at = static_cast<size_t>(((pos0 + tk) * row + e) * elem);
        float gk, gv;
        if (t == DType::kF32) {
          std::memcpy(&gk, &kb[at], 4);
          std::memcpy(&gv, &vb[at], 4);
        } else {
          uint16_t hk, hv;
          std::memcpy(&hk, &kb[at], 2);
          std::memcpy(&hv, &vb[at], 2);
          gk = bf16_to_f32(hk);
          gv = bf16_to_f32(hv);
        }
        float ek = kv[static_cast<size_t>(tk * src_stride + e)];
        float ev = kv[static_cast<size_t>(tk * src_stride + width + e)];
        if (t == DType::kBF16) {
          ek = bf16_to_f32(f32_to_bf16(ek));
          ev = bf16_to_f32(f32_to_bf16(ev));
        }
        ASSERT_EQ(gk, ek);
        ASSERT_EQ(gv, ev);
      }
    }
    EXPECT_EQ(kb[0], 0xff);  // rows before pos0 untouched
  }
}

TEST_F(CudaElementwise, GegluTanhMatchesTheReference) {
  uint64_t seed = 90;
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {9, 1001}, {3, 2048}, {17, 333}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(n));
    // The halves of a fused [rows, 2n] gate|up buffer; gates far into both tails too.
    auto gu = test::random_floats(static_cast<size_t>(rows * 2 * n), ++seed, -6.0f, 6.0f);
    gu[0] = -30.0f;
    if (n > 2) gu[2] = 25.0f;
    std::vector<float> gate, up, ref(static_cast<size_t>(rows * n));
    split_halves(gu, rows, n, gate, up);
    cpu::geglu_tanh(ref_ctx(), gate.data(), up.data(), rows * n, ref.data());
    cuda::DeviceBuffer dgu = upload(gu);
    cuda::DeviceBuffer out = poisoned<float>(ref.size());
    CU_ASSERT_OK(cuda::geglu_tanh(dgu.as<float>(), dgu.as<float>() + n, rows, n, 2 * n, DType::kF32,
                                  out.data(), stream()));
    const auto y = download<float>(out, ref.size());
    EXPECT_EQ(test::count_non_finite(y), 0u);
    EXPECT_LT(test::rel_l2(y, ref), 1e-6);
    // Separate buffers (in_stride n), bf16 output.
    cuda::DeviceBuffer dg = upload(gate), du = upload(up);
    cuda::DeviceBuffer outb = poisoned<uint16_t>(ref.size());
    CU_ASSERT_OK(cuda::geglu_tanh(dg.as<float>(), du.as<float>(), rows, n, n, DType::kBF16,
                                  outb.data(), stream()));
    const auto yb = test::bf16_to_f32(download<uint16_t>(outb, ref.size()));
    EXPECT_EQ(test::count_non_finite(yb), 0u);
    EXPECT_LT(test::rel_l2(yb, ref), 1e-2);
  }
  cuda::DeviceBuffer b = poisoned<float>(8);
  EXPECT_EQ(cuda::geglu_tanh(b.as<float>(), b.as<float>(), 1, 8, 4, DType::kF32, b.data(), stream())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::geglu_tanh(b.as<float>(), nullptr, 1, 8, 8, DType::kF32, b.data(), stream()).code(),
      StatusCode::kInvalidArgument);
}

// A ring cache (position p in row p % ring_rows) written across its end, with pos0 read from
// device memory (what a CUDA-graph decode step does).
TEST_F(CudaElementwise, KvStoreWrapsARingAndReadsPos0FromTheDevice) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (bool dev_pos : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (dev_pos ? " device pos0" : " host pos0"));
      const int64_t ring = 13, n_head_kv = 2, head_dim = 256, n_tokens = 6, pos0 = 50;
      const int64_t width = n_head_kv * head_dim, row = width + 8, elem = t == DType::kF32 ? 4 : 2;
      const auto kv = test::random_floats(static_cast<size_t>(n_tokens * 2 * width), 21);
      cuda::DeviceBuffer src = upload(kv);
      const size_t bytes = static_cast<size_t>(ring * row * elem);
      cuda::DeviceBuffer kc = poisoned<uint8_t>(bytes), vc = poisoned<uint8_t>(bytes);
      cuda::DeviceBuffer dpos = upload(std::vector<int32_t>{static_cast<int32_t>(pos0)});
      const cuda::KvLayout lay{t, n_head_kv, head_dim, row, ring};
      CU_ASSERT_OK(cuda::kv_store(src.as<float>(), src.as<float>() + width, n_tokens, 2 * width,
                                  lay, kc.data(), vc.data(), dev_pos ? 0 : pos0, stream(),
                                  dev_pos ? dpos.as<int32_t>() : nullptr));
      const auto kb = download<uint8_t>(kc, bytes);
      const auto vb = download<uint8_t>(vc, bytes);
      auto read = [&](const std::vector<uint8_t>& b, size_t at) {
        if (t == DType::kF32) {
          float f;
          std::memcpy(&f, &b[at], 4);
          return f;
        }
        uint16_t h;
        std::memcpy(&h, &b[at], 2);
        return bf16_to_f32(h);
      };
      std::vector<bool> written(static_cast<size_t>(ring), false);
      for (int64_t tk = 0; tk < n_tokens; ++tk) {
        const int64_t r = (pos0 + tk) % ring;  // 11, 12, 0, 1, 2, 3
        written[static_cast<size_t>(r)] = true;
        for (int64_t e = 0; e < width; ++e) {
          const size_t at = static_cast<size_t>((r * row + e) * elem);
          float ek = kv[static_cast<size_t>(tk * 2 * width + e)];
          float ev = kv[static_cast<size_t>(tk * 2 * width + width + e)];
          if (t == DType::kBF16) {
            ek = bf16_to_f32(f32_to_bf16(ek));
            ev = bf16_to_f32(f32_to_bf16(ev));
          }
          ASSERT_EQ(read(kb, at), ek) << "token " << tk << " element " << e;
          ASSERT_EQ(read(vb, at), ev) << "token " << tk << " element " << e;
        }
      }
      for (int64_t r = 0; r < ring; ++r) {  // rows no position maps to are untouched
        if (!written[static_cast<size_t>(r)]) {
          EXPECT_EQ(kb[static_cast<size_t>(r * row * elem)], 0xff) << "row " << r;
        }
      }
    }
  }
  cuda::DeviceBuffer b = poisoned<float>(4096);
  const cuda::KvLayout lay{DType::kF32, 1, 64, 64, 4};
  EXPECT_EQ(
      cuda::kv_store(b.as<float>(), b.as<float>(), 5, 64, lay, b.data(), b.data(), 0, stream())
          .code(),
      StatusCode::kInvalidArgument);  // 5 tokens do not fit 4 ring rows
}

TEST_F(CudaElementwise, GetRowsGathersEveryLayout) {
  uint64_t seed = 70;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const bool k_quant = t == DType::kQ4_K || t == DType::kQ6_K;
    const int64_t n_rows = 301, n = k_quant ? 768 : (is_quantized(t) ? 96 : 99);
    const Tensor w = test::random_weight(t, n_rows, n, ++seed);
    CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
    const std::vector<int32_t> ids = {0, 300, 17, 17, 150, 299};
    std::vector<float> ref(ids.size() * static_cast<size_t>(n));
    CU_ASSERT_OK(cpu::get_rows(w, ids, ref.data()));
    if (t == DType::kQ6_K) ref = test::round_bf16(ref);  // uploaded as bf16
    cuda::DeviceBuffer dids = upload(ids);
    cuda::DeviceBuffer out = poisoned<float>(ref.size());
    CU_ASSERT_OK(cuda::get_rows(dw, dids.as<int32_t>(), static_cast<int64_t>(ids.size()),
                                DType::kF32, out.data(), stream()));
    const auto y = download<float>(out, ref.size());
    EXPECT_EQ(test::count_non_finite(y), 0u);
    EXPECT_LT(test::rel_l2(y, ref), 1e-6);
    cuda::DeviceBuffer outb = poisoned<uint16_t>(ref.size());
    CU_ASSERT_OK(cuda::get_rows(dw, dids.as<int32_t>(), static_cast<int64_t>(ids.size()),
                                DType::kBF16, outb.data(), stream()));
    EXPECT_LT(test::rel_l2(test::bf16_to_f32(download<uint16_t>(outb, ref.size())), ref), 1e-2);
    // An id out of range writes NaN, never reads out of bounds.
    const std::vector<int32_t> bad = {5, -1, 301};
    cuda::DeviceBuffer dbad = upload(bad);
    cuda::DeviceBuffer outn = poisoned<float>(bad.size() * static_cast<size_t>(n));
    CU_ASSERT_OK(cuda::get_rows(dw, dbad.as<int32_t>(), 3, DType::kF32, outn.data(), stream()));
    const auto yn = download<float>(outn, bad.size() * static_cast<size_t>(n));
    EXPECT_EQ(test::count_non_finite(yn), 2u * static_cast<size_t>(n));
    EXPECT_TRUE(std::isfinite(yn[0]));
  }
}

// The decode step's first kernel: the embedding row, the first norm and its int16 blocks in one
// kernel, bit for bit get_rows + scale + rms_norm_q16 (every layout; the widths of SmolLM2,
// Llama-3-8B and the limit), and an id out of range gives NaN.
TEST_F(CudaElementwise, EmbedRmsNormQ16IsGetRowsThenTheNorm) {
  uint64_t seed = 1300;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K}) {
    for (int64_t n : {int64_t{576}, int64_t{4096}, int64_t{8192}}) {
      for (float es : {1.0f, 3.5f}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(n) + " scale " +
                     std::to_string(es));
        const int64_t n_rows = 37;
        const Tensor w =
            test::random_weight(t, n_rows, t == DType::kQ4_K ? n / 256 * 256 : n, ++seed);
        if (w.shape()[1] != n) continue;  // Q4_K needs multiples of 256
        CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dw, cuda::upload_weight(w, 0, stream()));
        const auto nw = test::random_floats(static_cast<size_t>(n), ++seed, 0.5f, 1.5f);
        cuda::DeviceBuffer dnw = upload(nw), dids = upload(std::vector<int32_t>{29});
        const size_t qb = cuda::quantized_activation_bytes(n);
        cuda::DeviceBuffer x1 = poisoned<float>(static_cast<size_t>(n)),
                           x2 = poisoned<float>(static_cast<size_t>(n));
        cuda::DeviceBuffer h1 = poisoned<float>(static_cast<size_t>(n)),
                           h2 = poisoned<float>(static_cast<size_t>(n));
        cuda::DeviceBuffer q1 = poisoned<uint8_t>(qb), q2 = poisoned<uint8_t>(qb);
        auto qa1 = cuda::quantized_activation_in(q1.data(), qb, n);
        auto qa2 = cuda::quantized_activation_in(q2.data(), qb, n);
        ASSERT_TRUE(qa1.ok() && qa2.ok());
        CU_ASSERT_OK(cuda::embed_rms_norm_q16(dw, dids.as<int32_t>(), es, dnw.as<float>(), 1e-5f,
                                              x1.as<float>(), h1.as<float>(), *qa1, stream()));
        CU_ASSERT_OK(cuda::get_rows(dw, dids.as<int32_t>(), 1, DType::kF32, x2.data(), stream()));
        if (es != 1.0f) CU_ASSERT_OK(cuda::scale(x2.as<float>(), n, es, stream()));
        CU_ASSERT_OK(cuda::rms_norm_q16(x2.as<float>(), nullptr, dnw.as<float>(), n, 1e-5f,
                                        h2.as<float>(), *qa2, stream()));
        const auto xa = download<float>(x1, static_cast<size_t>(n));
        EXPECT_EQ(test::count_non_finite(xa), 0u);
        EXPECT_EQ(xa, download<float>(x2, static_cast<size_t>(n)));
        EXPECT_EQ(download<float>(h1, static_cast<size_t>(n)),
                  download<float>(h2, static_cast<size_t>(n)));
        EXPECT_EQ(download<uint8_t>(q1, qb), download<uint8_t>(q2, qb));
        // An id out of range: NaN rows, no out-of-bounds read.
        cuda::DeviceBuffer dbad = upload(std::vector<int32_t>{static_cast<int32_t>(n_rows)});
        CU_ASSERT_OK(cuda::embed_rms_norm_q16(dw, dbad.as<int32_t>(), es, dnw.as<float>(), 1e-5f,
                                              x1.as<float>(), h1.as<float>(), *qa1, stream()));
        EXPECT_EQ(test::count_non_finite(download<float>(x1, static_cast<size_t>(n))),
                  static_cast<size_t>(n));
      }
    }
  }
  // Rows over the limit, or not a multiple of 32.
  const Tensor wide = test::random_weight(DType::kBF16, 2, 8224, 1);
  CU_ASSIGN_OR_FAIL(cuda::DeviceWeight dwide, cuda::upload_weight(wide, 0, stream()));
  cuda::DeviceBuffer b = poisoned<float>(8224);
  const size_t qb = cuda::quantized_activation_bytes(8224);
  cuda::DeviceBuffer qw = poisoned<uint8_t>(qb);
  auto qa = cuda::quantized_activation_in(qw.data(), qb, 8224);
  ASSERT_TRUE(qa.ok());
  EXPECT_EQ(cuda::embed_rms_norm_q16(dwide, b.as<int32_t>(), 1.0f, b.as<float>(), 1e-5f,
                                     b.as<float>(), b.as<float>(), *qa, stream())
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rinfer
