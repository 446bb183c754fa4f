// Decode (flash-decoding) and prefill (FlashAttention-2 tiles) attention against the CPU scalar
// reference cpu::attention(kReference): GQA ratios 1, 3, 4 and 8, head dims 64, 128 and 256, f32
// and bf16 caches with padded rows, contexts up to 32k for decode; sliding windows smaller and
// larger than the context, ring caches that wrap, n_kv from device memory under a larger upper
// bound, a decode step captured once in a CUDA graph and replayed over a wrapping ring, and
// decode over a paged cache (block tables) against the same rows laid out contiguously.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

struct Case {
  int64_t n_tokens, n_kv, n_head, n_head_kv, head_dim;
};

// The optional features: a sliding window, a ring cache, n_kv read from device memory with the
// launch sized for an upper bound (decode).
struct Extra {
  int64_t window = 0;
  int64_t ring_rows = 0;
  int64_t n_kv_upper = 0;  // > 0: p.n_kv = this, the real n_kv through p.n_kv_device
};

std::string name(const Case& c, DType t, const Extra& x = {}) {
  return std::string(dtype_name(t)) + " tokens " + std::to_string(c.n_tokens) + " kv " +
         std::to_string(c.n_kv) + " heads " + std::to_string(c.n_head) + "/" +
         std::to_string(c.n_head_kv) + " d " + std::to_string(c.head_dim) + " window " +
         std::to_string(x.window) + " ring " + std::to_string(x.ring_rows) + " upper " +
         std::to_string(x.n_kv_upper);
}

class CudaAttention : public test::CudaTest {
 public:
  // Runs one case; returns the relative L2 error against the reference (negative on failure).
  double run(const Case& c, DType kv_t, bool decode, uint64_t seed, DType out_t = DType::kF32,
             const Extra& x = {}) {
    const int64_t width = c.n_head_kv * c.head_dim, row = width + 8;  // padded cache rows
    const size_t cache_n = static_cast<size_t>(c.n_kv * row);
    // Cache values as the kernels will see them (bf16-rounded for a bf16 cache), position p in
    // row p: the reference's layout.
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
                          1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                          x.window};
    cpu::OpContext ctx;
    ctx.impl = cpu::Impl::kReference;
    // Prefill rounds q to bf16 on the way in: give the reference the same q.
    const std::vector<float> q_ref = decode ? q : test::round_bf16(q);
    std::vector<float> ref(q_n);
    const Status rs = cpu::attention(ctx, s, q_ref.data(), k.data(), v.data(), ref.data());
    EXPECT_TRUE(rs.ok()) << rs.to_string();

    // The device cache: a ring (position p in row p % ring_rows, written in position order so
    // newer positions overwrite older ones) or n_ctx = max(n_kv, upper bound) rows. Rows no
    // position was written to stay NaN: reading one unmasked shows in the output.
    const int64_t dev_rows = x.ring_rows > 0 ? x.ring_rows : std::max(c.n_kv, x.n_kv_upper);
    const size_t dev_n = static_cast<size_t>(dev_rows * row);
    std::vector<float> kd(dev_n, std::nanf("")), vd(dev_n, std::nanf(""));
    for (int64_t pos = 0; pos < c.n_kv; ++pos) {
      const int64_t r = x.ring_rows > 0 ? pos % x.ring_rows : pos;
      std::copy_n(k.begin() + pos * row, row, kd.begin() + r * row);
      std::copy_n(v.begin() + pos * row, row, vd.begin() + r * row);
    }
    cuda::DeviceBuffer dk, dv;
    if (kv_t == DType::kBF16) {
      std::vector<uint16_t> kb(dev_n), vb(dev_n);
      for (size_t i = 0; i < dev_n; ++i) {
        kb[i] = f32_to_bf16(kd[i]);
        vb[i] = f32_to_bf16(vd[i]);
      }
      dk = upload(kb);
      dv = upload(vb);
    } else {
      dk = upload(kd);
      dv = upload(vd);
    }
    cuda::DeviceBuffer dq = upload(q);
    cuda::AttentionParams p;
    p.n_tokens = c.n_tokens;
    p.n_kv = c.n_kv;
    p.n_head = c.n_head;
    p.kv = {kv_t, c.n_head_kv, c.head_dim, row, x.ring_rows};
    p.scale = s.scale;
    p.window = x.window;
    cuda::DeviceBuffer dn_kv;
    if (x.n_kv_upper > 0) {
      dn_kv = upload(std::vector<int32_t>{static_cast<int32_t>(c.n_kv)});
      p.n_kv = x.n_kv_upper;
      p.n_kv_device = dn_kv.as<int32_t>();
    }
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

  // The fused decode step against the unfused chain over the cases of
  // DecodeRopeMatchesTheUnfusedChain, with tol the relative L2 bound of its output, over a
  // cache of kv (bf16; f32: the cases of head_dim 64 and 128).
  void decode_rope_cases(double tol, DType kv = DType::kBF16);
};

void decode_cases(CudaAttention* t, const std::vector<Case>& cases, uint64_t seed);

// The decode kernels' 32-bit indexing limits, checked on the host (no GPU needed).
TEST(CudaDecodeLimits, LayerCacheMustFit32BitIndices) {
  EXPECT_TRUE(cuda::decode_kv_fits(32768, 1024));
  EXPECT_TRUE(cuda::decode_kv_fits(1 << 19, 4095));
  EXPECT_FALSE(cuda::decode_kv_fits(1 << 19, 4096));  // 2^31 elements
  EXPECT_FALSE(cuda::decode_kv_fits(cuda::kMaxDecodeKv + 1, 1));
  EXPECT_FALSE(cuda::decode_kv_fits(0, 1024));
  EXPECT_FALSE(cuda::decode_kv_fits(16, 0));
}

TEST_F(CudaAttention, DecodeMatchesTheReferenceForEveryGqaRatio) {
  decode_cases(this,
               {{1, 1, 4, 4, 128},
                {1, 17, 12, 4, 64},
                {1, 300, 8, 2, 128},
                {1, 1000, 32, 4, 64},
                {1, 4099, 24, 8, 128},
                {1, 4099, 32, 32, 64},
                {1, 777, 36, 4, 128},
                {1, 130, 16, 2, 64},
                {1, 1000, 4, 1, 256},
                {1, 33, 3, 1, 256},
                {1, 2049, 24, 8, 256}},
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

struct ExtraCase {
  Case c;
  Extra x;
};

TEST_F(CudaAttention, DecodeWithWindowsRingsAndDeviceNkv) {
  uint64_t seed = 7000;
  const std::vector<ExtraCase> cases = {
      {{1, 1000, 4, 1, 256}, {512, 0, 0}},          // Gemma 3 270M local layer
      {{1, 300, 24, 8, 128}, {1000, 0, 0}},         // window past the context
      {{1, 4099, 32, 4, 64}, {100, 0, 0}},          // GQA 8, narrow window
      {{1, 33, 3, 1, 256}, {7, 0, 0}},              // odd sizes
      {{1, 777, 8, 8, 256}, {300, 300, 0}},         // ring wrapped twice
      {{1, 5000, 16, 2, 128}, {1024, 1030, 0}},     // ring a little larger than the window
      {{1, 700, 4, 1, 256}, {0, 0, 4096}},          // device n_kv, grid for 4096
      {{1, 50, 12, 4, 64}, {0, 0, 32768}},          // device n_kv far below the bound
      {{1, 2000, 8, 1, 256}, {512, 512, 8192}},     // all three (graph decode of Gemma)
      {{1, 9000, 24, 8, 128}, {4096, 4096, 32768}}  // GQA 3, long window, wrapped ring
  };
  for (const ExtraCase& e : cases) {
    for (DType kv : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(name(e.c, kv, e.x));
      const double err = run(e.c, kv, /*decode=*/true, seed += 10, DType::kF32, e.x);
      EXPECT_GE(err, 0.0);
      EXPECT_LT(err, 1e-5);
    }
  }
}

TEST_F(CudaAttention, PrefillWithHeadDim256WindowsAndRings) {
  uint64_t seed = 8000;
  const std::vector<ExtraCase> cases = {
      {{100, 100, 4, 1, 256}, {}},             // head_dim 256, one kv head
      {{257, 300, 8, 1, 256}, {}},             // odd tiles
      {{5, 5, 3, 3, 256}, {2, 0, 0}},          // tiny, window 2
      {{300, 300, 4, 1, 256}, {64, 0, 0}},     // window inside a query tile
      {{130, 1030, 24, 8, 128}, {200, 0, 0}},  // window across KV tiles, GQA 3
      {{77, 500, 12, 4, 64}, {1000, 0, 0}},    // window past the context
      {{64, 1000, 4, 1, 256}, {512, 575, 0}},  // Gemma: ring = window + batch - 1
      {{200, 200, 6, 2, 128}, {50, 249, 0}},   // ring rows never written (NaN)
      {{33, 2000, 32, 4, 64}, {100, 140, 0}},  // wrapped ring, GQA 8
      {{512, 512, 4, 1, 256}, {}}};
  for (const ExtraCase& e : cases) {
    for (DType t : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(name(e.c, t, e.x));
      const double err = run(e.c, t, /*decode=*/false, seed += 10, DType::kF32, e.x);
      EXPECT_GE(err, 0.0);
      EXPECT_LT(err, 1e-2);  // bf16 tensor-core inputs
    }
  }
  SCOPED_TRACE("bf16 output, head_dim 256, window");
  const double err = run({77, 200, 8, 1, 256}, DType::kBF16, false, 19, DType::kBF16, {60, 0, 0});
  EXPECT_GE(err, 0.0);
  EXPECT_LT(err, 1e-2);
}

// A decode step (kv_store at a device position, then attention over a device n_kv) captured once
// in a CUDA graph and replayed for every token, over a sliding-window ring cache that wraps:
// nothing per token may be baked into the launches.
TEST_F(CudaAttention, GraphReplayedDecodeOverARingCache) {
  for (DType kv_t : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(kv_t));
    const int64_t n_head = 4, n_head_kv = 1, d = 256, window = 100, n_ctx = 1024;
    const int64_t width = n_head_kv * d, row = width + 8, prompt = 90, steps = 45;
    const int64_t total = prompt + steps;
    // All keys/values by position (what kv_store will have stored), and the queries per step.
    std::vector<float> k = test::random_floats(static_cast<size_t>(total * width), 11, -1, 1);
    std::vector<float> v = test::random_floats(static_cast<size_t>(total * width), 12, -1, 1);
    const std::vector<float> qs =
        test::random_floats(static_cast<size_t>(steps * n_head * d), 13, -1, 1);
    cuda::DeviceBuffer dk_src = upload(k), dv_src = upload(v);
    if (kv_t == DType::kBF16) {
      k = test::round_bf16(k);
      v = test::round_bf16(v);
    }
    const int64_t elem = kv_t == DType::kBF16 ? 2 : 4;
    cuda::DeviceBuffer kc = poisoned<uint8_t>(static_cast<size_t>(window * row * elem));
    cuda::DeviceBuffer vc = poisoned<uint8_t>(static_cast<size_t>(window * row * elem));
    const cuda::KvLayout lay{kv_t, n_head_kv, d, row, window};
    // The prompt's keys and values, in one store (positions 0..89 of a 100-row ring).
    CU_ASSERT_OK(cuda::kv_store(dk_src.as<float>(), dv_src.as<float>(), prompt, width, lay,
                                kc.data(), vc.data(), 0, stream()));

    // The step's inputs live at fixed device addresses: [pos0, n_kv], the new k/v row, q.
    cuda::DeviceBuffer pos = upload(std::vector<int32_t>{0, 0});
    cuda::DeviceBuffer knew = poisoned<float>(static_cast<size_t>(width));
    cuda::DeviceBuffer vnew = poisoned<float>(static_cast<size_t>(width));
    cuda::DeviceBuffer dq = poisoned<float>(static_cast<size_t>(n_head * d));
    cuda::DeviceBuffer out = poisoned<float>(static_cast<size_t>(n_head * d));
    cuda::AttentionParams p;
    p.n_tokens = 1;
    p.n_kv = n_ctx;  // the upper bound
    p.n_head = n_head;
    p.kv = lay;
    p.scale = 1.0f / 16.0f;
    p.window = window;
    p.n_kv_device = pos.as<int32_t>() + 1;
    const size_t ws_bytes = cuda::attention_decode_workspace_bytes(p);
    ASSERT_GT(ws_bytes, 0u);
    CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer ws, cuda::DeviceBuffer::create(ws_bytes, 0, stream()));
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);

    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const Status s1 = cuda::kv_store(knew.as<float>(), vnew.as<float>(), 1, width, lay, kc.data(),
                                     vc.data(), 0, stream(), pos.as<int32_t>());
    const Status s2 = cuda::attention_decode(p, dq.as<float>(), kc.data(), vc.data(),
                                             out.as<float>(), ws.data(), ws.bytes(), stream());
    ASSERT_EQ(cudaStreamEndCapture(stream(), &graph), cudaSuccess);
    ASSERT_TRUE(s1.ok()) << s1.to_string();
    ASSERT_TRUE(s2.ok()) << s2.to_string();
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

    cpu::OpContext ctx;
    ctx.impl = cpu::Impl::kReference;
    double worst = 0.0;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t p_new = prompt + step;
      const std::vector<int32_t> hp = {static_cast<int32_t>(p_new),
                                       static_cast<int32_t>(p_new + 1)};
      const size_t kv_off = static_cast<size_t>(p_new * width);
      const float* q_step = qs.data() + step * n_head * d;
      ASSERT_EQ(cudaMemcpyAsync(pos.data(), hp.data(), 8, cudaMemcpyHostToDevice, stream()),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(knew.data(), dk_src.as<float>() + kv_off, width * 4,
                                cudaMemcpyDeviceToDevice, stream()),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(vnew.data(), dv_src.as<float>() + kv_off, width * 4,
                                cudaMemcpyDeviceToDevice, stream()),
                cudaSuccess);
      ASSERT_EQ(
          cudaMemcpyAsync(dq.data(), q_step, n_head * d * 4, cudaMemcpyHostToDevice, stream()),
          cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream()), cudaSuccess);
      const auto got = download<float>(out, static_cast<size_t>(n_head * d));
      cpu::AttentionShape s{1, p_new + 1, n_head, n_head_kv, d, width, p.scale, window};
      std::vector<float> ref(static_cast<size_t>(n_head * d));
      ASSERT_TRUE(cpu::attention(ctx, s, q_step, k.data(), v.data(), ref.data()).ok());
      EXPECT_EQ(test::count_non_finite(got), 0u) << "step " << step;
      worst = std::max(worst, test::rel_l2(got, ref));
    }
    EXPECT_LT(worst, 1e-5);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// The fused decode step (RoPE + KV store + attention + in-kernel split merge + int16 output)
// gives what rope_kv_store, attention_decode and quantize_activation give in turn: the same cache
// bytes, the same output to f32 rounding (the merge adds the splits in another order) and int16
// blocks equal to quantize_activation of its own output. Each case runs twice with the same
// counters (they must come back zero) and the row of the new position starts as NaN, so a
// stale read of it shows. Both attention kernels: the scalar f32 one (1e-6) and the tensor-core
// one (head_dim 64 / 128), whose q and probabilities are bf16 pairs hi + lo (about 2^-16
// relative a product: 3e-5).
TEST_F(CudaAttention, DecodeRopeMatchesTheUnfusedChain) {
  for (bool mma : {false, true}) {
    SCOPED_TRACE(mma ? "tensor cores" : "scalar");
    cuda::apply_kernel_config({.attention_mma = mma});
    decode_rope_cases(mma ? 3e-5 : 1e-6);
  }
  cuda::apply_kernel_config({});
  SCOPED_TRACE("f32 cache");  // the scalar kernel (the tensor cores take bf16 caches)
  decode_rope_cases(1e-6, DType::kF32);
}

void CudaAttention::decode_rope_cases(double tol, DType kv) {
  const bool f32 = kv == DType::kF32;
  struct RopeCase {
    Case c;
    Extra x;
    int64_t n_rot;
    cpu::RopeMode mode;
  };
  const cpu::RopeMode kN = cpu::RopeMode::kNormal, kX = cpu::RopeMode::kNeox;
  const std::vector<RopeCase> cases = {
      {{1, 1, 4, 4, 128}, {}, 128, kN},                   // first token: one split
      {{1, 200, 32, 8, 128}, {0, 0, 4096}, 128, kN},      // Llama-3-8B at a short context
      {{1, 4099, 32, 8, 128}, {0, 0, 8192}, 128, kX},     // long context, many splits
      {{1, 777, 36, 4, 128}, {}, 96, kX},                 // GQA 9 (two groups), partial rotary
      {{1, 150, 8, 2, 128}, {}, 36, kX},                  // NeoX, pairs 18 apart
      {{1, 300, 9, 3, 64}, {}, 64, kN},                   // SmolLM2's GQA 3, head_dim 64
      {{1, 1000, 4, 1, 256}, {512, 512, 4096}, 256, kX},  // Gemma 3 local layer on a ring
      {{1, 2000, 8, 8, 256}, {300, 301, 0}, 128, kN},     // GQA 1, wrapped ring
      {{1, 20000, 16, 2, 64}, {0, 0, 32768}, 64, kX},     // long context, device n_kv
  };
  uint64_t seed = 9100;
  for (const RopeCase& rc : cases) {
    if (f32 && rc.c.head_dim > 128) continue;
    for (bool q16 : {false, true}) {
      const Case& c = rc.c;
      SCOPED_TRACE(name(c, kv, rc.x) + " n_rot " + std::to_string(rc.n_rot) +
                   (rc.mode == kX ? " neox" : "") + (q16 ? " q16" : ""));
      const int64_t hd = c.head_dim, width = c.n_head_kv * hd, row = width + 8;
      const int64_t q_n = c.n_head * hd, qkv_n = (c.n_head + 2 * c.n_head_kv) * hd;
      const int64_t pos = c.n_kv - 1;
      const int64_t rows = rc.x.ring_rows > 0 ? rc.x.ring_rows : std::max(c.n_kv, rc.x.n_kv_upper);
      // Earlier positions' keys and values everywhere; the new position's row NaN. The caches as
      // bytes: bf16 or f32 elements.
      const auto n_el = static_cast<size_t>(rows * row);
      auto rk = test::random_floats(n_el, seed += 10, -1.0f, 1.0f);
      auto rv = test::random_floats(n_el, seed + 1, -1.0f, 1.0f);
      const int64_t new_row = rc.x.ring_rows > 0 ? pos % rc.x.ring_rows : pos;
      std::fill_n(rk.begin() + new_row * row, width, std::nanf(""));
      std::fill_n(rv.begin() + new_row * row, width, std::nanf(""));
      const size_t el_bytes = f32 ? 4 : 2;
      std::vector<uint8_t> cache_k(n_el * el_bytes), cache_v(cache_k.size());
      for (size_t i = 0; i < n_el; ++i) {
        if (f32) {
          std::memcpy(&cache_k[i * 4], &rk[i], 4);
          std::memcpy(&cache_v[i * 4], &rv[i], 4);
        } else {
          const uint16_t kb = f32_to_bf16(rk[i]), vb = f32_to_bf16(rv[i]);
          std::memcpy(&cache_k[i * 2], &kb, 2);
          std::memcpy(&cache_v[i * 2], &vb, 2);
        }
      }
      const auto qkv = test::random_floats(static_cast<size_t>(qkv_n), seed + 2, -1.0f, 1.0f);

      cuda::AttentionParams p;
      p.n_tokens = 1;
      p.n_kv = c.n_kv;
      p.n_head = c.n_head;
      p.kv = {kv, c.n_head_kv, hd, row, rc.x.ring_rows};
      p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      p.window = rc.x.window;
      ASSERT_TRUE(cuda::attention_decode_rope_supports(p.kv));
      cuda::DeviceBuffer dn_kv = upload(std::vector<int32_t>{static_cast<int32_t>(c.n_kv)});
      cuda::DeviceBuffer dpos = upload(std::vector<int32_t>{static_cast<int32_t>(pos)});
      if (rc.x.n_kv_upper > 0) p.n_kv = rc.x.n_kv_upper;
      p.n_kv_device = dn_kv.as<int32_t>();
      cpu::RopeParams rope;
      rope.n_rot = rc.n_rot;
      rope.freq_base = 500000.0f;
      rope.freq_scale = 0.5f;
      rope.mode = rc.mode;
      const size_t ws_bytes = cuda::attention_decode_workspace_bytes(p) + 16;
      CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer ws, cuda::DeviceBuffer::create(ws_bytes, 0, stream()));
      const size_t qb = cuda::quantized_activation_bytes(q_n);

      // The unfused chain.
      cuda::DeviceBuffer qkv_a = upload(qkv), ka = upload(cache_k), va = upload(cache_v);
      cuda::DeviceBuffer out_a = poisoned<float>(static_cast<size_t>(q_n));
      CU_ASSERT_OK(cuda::rope_kv_store(qkv_a.as<float>(), 1, c.n_head, qkv_n, dpos.as<int32_t>(),
                                       rope, p.kv, ka.data(), va.data(), stream()));
      CU_ASSERT_OK(cuda::attention_decode(p, qkv_a.as<float>(), ka.data(), va.data(),
                                          out_a.as<float>(), ws.data(), ws_bytes, stream()));
      const auto ref = download<float>(out_a, static_cast<size_t>(q_n));

      // The fused step, twice over the same counters.
      const int64_t n_counters = cuda::attention_decode_counters(p);
      ASSERT_GT(n_counters, 0);
      cuda::DeviceBuffer counters = upload(std::vector<uint32_t>(static_cast<size_t>(n_counters)));
      cuda::DeviceBuffer qkv_b = upload(qkv), kb = upload(cache_k), vb = upload(cache_v);
      cuda::DeviceBuffer q16_b = poisoned<uint8_t>(qb), q16_c = poisoned<uint8_t>(qb);
      CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qa_b,
                        cuda::quantized_activation_in(q16_b.data(), qb, q_n));
      CU_ASSIGN_OR_FAIL(cuda::QuantizedActivation qa_c,
                        cuda::quantized_activation_in(q16_c.data(), qb, q_n));
      std::vector<float> got[2];
      for (int run_i = 0; run_i < 2; ++run_i) {
        cuda::DeviceBuffer out_b = poisoned<float>(static_cast<size_t>(q_n));
        CU_ASSERT_OK(cuda::attention_decode_rope(
            p, rope, qkv_b.as<float>(), kb.data(), vb.data(), out_b.as<float>(),
            q16 ? &qa_b : nullptr, counters.as<unsigned>(), ws.data(), ws_bytes, stream()));
        got[run_i] = download<float>(out_b, static_cast<size_t>(q_n));
        if (q16 && run_i == 0) {
          CU_ASSERT_OK(cuda::quantize_activation(out_b.as<float>(), qa_c, stream()));
          EXPECT_EQ(download<uint8_t>(q16_b, qb), download<uint8_t>(q16_c, qb));
        }
      }
      EXPECT_EQ(test::count_non_finite(got[0]), 0u);
      EXPECT_LT(test::rel_l2(got[0], ref), tol);
      EXPECT_EQ(got[0], got[1]);
      EXPECT_EQ(download<uint32_t>(counters, static_cast<size_t>(n_counters)),
                std::vector<uint32_t>(static_cast<size_t>(n_counters)));
      EXPECT_EQ(download<uint8_t>(kb, cache_k.size()), download<uint8_t>(ka, cache_k.size()));
      EXPECT_EQ(download<uint8_t>(vb, cache_k.size()), download<uint8_t>(va, cache_k.size()));
      EXPECT_EQ(download<float>(qkv_b, qkv.size()), qkv);  // the input row stays raw
    }
  }
}

// A paged cache (KvLayout::block_table, the engine core's arena): the positions' rows scattered
// over shuffled blocks of 16 with blocks of other sequences between them. The decode kernel and
// the fused RoPE step give exactly what they give over the contiguous cache, and the fused step
// writes the new position's K/V into its slot.
TEST_F(CudaAttention, DecodeOverAPagedCacheIsTheContiguousDecode) {
  struct PagedCase {
    Case c;
    int64_t window;
    DType kv;
    bool mma;
  };
  const std::vector<PagedCase> cases = {
      {{1, 200, 32, 8, 128}, 0, DType::kBF16, true},     // Llama-3-8B heads
      {{1, 1337, 9, 3, 64}, 0, DType::kBF16, true},      // SmolLM2 heads, many splits
      {{1, 1000, 4, 1, 256}, 512, DType::kBF16, false},  // Gemma 3 local layer
      {{1, 777, 36, 4, 128}, 0, DType::kBF16, false},    // GQA 9, the scalar split
      {{1, 333, 8, 2, 128}, 100, DType::kF32, false},    // f32 cache, window
  };
  const int64_t bs = 16;
  uint64_t seed = 9700;
  for (const PagedCase& pc : cases) {
    const Case& c = pc.c;
    SCOPED_TRACE(name(c, pc.kv, {pc.window, 0, 0}) + (pc.mma ? " mma" : " scalar"));
    cuda::apply_kernel_config({.attention_mma = pc.mma});
    const int64_t hd = c.head_dim, width = c.n_head_kv * hd, row = width;
    const int64_t n_used = (c.n_kv + bs - 1) / bs, n_blocks = 2 * n_used + 3;
    std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
    for (int64_t i = 0; i < n_blocks; ++i) blocks[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::shuffle(blocks.begin(), blocks.end(), rng);
    blocks.resize(static_cast<size_t>(n_used));  // the sequence's table
    const size_t el = pc.kv == DType::kF32 ? 4 : 2;
    const auto flat_n = static_cast<size_t>(c.n_kv * row);
    const auto paged_n = static_cast<size_t>(n_blocks * bs * row);
    auto bytes_of = [&](const std::vector<float>& f) {
      std::vector<uint8_t> b(f.size() * el);
      for (size_t i = 0; i < f.size(); ++i) {
        if (el == 4) {
          std::memcpy(&b[i * 4], &f[i], 4);
        } else {
          const uint16_t h = f32_to_bf16(f[i]);
          std::memcpy(&b[i * 2], &h, 2);
        }
      }
      return b;
    };
    const auto fk = bytes_of(test::random_floats(flat_n, seed += 10, -1.0f, 1.0f));
    const auto fv = bytes_of(test::random_floats(flat_n, seed + 1, -1.0f, 1.0f));
    // The paged caches: other blocks random, position p's row at its slot.
    auto pk = bytes_of(test::random_floats(paged_n, seed + 2, -1.0f, 1.0f));
    auto pv = bytes_of(test::random_floats(paged_n, seed + 3, -1.0f, 1.0f));
    const auto slot = [&](int64_t p) {
      return static_cast<size_t>(blocks[static_cast<size_t>(p / bs)] * bs + p % bs);
    };
    const size_t row_bytes = static_cast<size_t>(row) * el;
    for (int64_t p = 0; p < c.n_kv; ++p) {
      std::memcpy(&pk[slot(p) * row_bytes], &fk[static_cast<size_t>(p) * row_bytes], row_bytes);
      std::memcpy(&pv[slot(p) * row_bytes], &fv[static_cast<size_t>(p) * row_bytes], row_bytes);
    }
    cuda::DeviceBuffer dtable = upload(blocks);
    cuda::DeviceBuffer dn_kv = upload(std::vector<int32_t>{static_cast<int32_t>(c.n_kv)});
    cuda::AttentionParams flat;
    flat.n_tokens = 1;
    flat.n_kv = c.n_kv;
    flat.n_head = c.n_head;
    flat.kv = {pc.kv, c.n_head_kv, hd, row, 0};
    flat.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    flat.window = pc.window;
    flat.n_kv_device = dn_kv.as<int32_t>();
    cuda::AttentionParams paged = flat;
    paged.kv.block_table = dtable.as<int32_t>();
    paged.kv.block_size = bs;
    paged.kv.paged_rows = n_blocks * bs;
    const size_t ws_bytes = cuda::attention_decode_workspace_bytes(flat) + 16;
    CU_ASSIGN_OR_FAIL(cuda::DeviceBuffer ws, cuda::DeviceBuffer::create(ws_bytes, 0, stream()));
    const int64_t q_n = c.n_head * hd, qkv_n = (c.n_head + 2 * c.n_head_kv) * hd;
    const auto qkv = test::random_floats(static_cast<size_t>(qkv_n), seed + 4, -1.0f, 1.0f);
    cuda::DeviceBuffer dq = upload(qkv);
    // Decode over the cached positions.
    std::vector<float> out[2];
    for (int i = 0; i < 2; ++i) {
      cuda::DeviceBuffer dk = upload(i == 0 ? fk : pk), dv = upload(i == 0 ? fv : pv);
      cuda::DeviceBuffer o = poisoned<float>(static_cast<size_t>(q_n));
      CU_ASSERT_OK(cuda::attention_decode(i == 0 ? flat : paged, dq.as<float>(), dk.data(),
                                          dv.data(), o.as<float>(), ws.data(), ws_bytes, stream()));
      out[i] = download<float>(o, static_cast<size_t>(q_n));
    }
    EXPECT_EQ(test::count_non_finite(out[0]), 0u);
    EXPECT_EQ(out[1], out[0]);
    // The fused step writing position n_kv - 1 (its rows NaN before).
    if (!cuda::attention_decode_rope_supports(flat.kv)) continue;
    const size_t last = static_cast<size_t>(c.n_kv - 1);
    auto nan_row = [&](std::vector<uint8_t>& b, size_t r) {
      for (size_t e = 0; e < static_cast<size_t>(row); ++e) {
        if (el == 4) {
          const float n = std::nanf("");
          std::memcpy(&b[(r * static_cast<size_t>(row) + e) * 4], &n, 4);
        } else {
          const uint16_t n = 0x7fc0;
          std::memcpy(&b[(r * static_cast<size_t>(row) + e) * 2], &n, 2);
        }
      }
    };
    auto fk2 = fk, fv2 = fv;
    nan_row(fk2, last);
    nan_row(fv2, last);
    nan_row(pk, slot(c.n_kv - 1));
    nan_row(pv, slot(c.n_kv - 1));
    cpu::RopeParams rope;
    rope.n_rot = hd;
    rope.freq_base = 10000.0f;
    const int64_t n_counters = cuda::attention_decode_counters(flat);
    cuda::DeviceBuffer counters = upload(std::vector<uint32_t>(static_cast<size_t>(n_counters)));
    std::vector<uint8_t> new_k[2];
    for (int i = 0; i < 2; ++i) {
      cuda::DeviceBuffer dqkv = upload(qkv);
      cuda::DeviceBuffer dk = upload(i == 0 ? fk2 : pk), dv = upload(i == 0 ? fv2 : pv);
      cuda::DeviceBuffer o = poisoned<float>(static_cast<size_t>(q_n));
      CU_ASSERT_OK(cuda::attention_decode_rope(i == 0 ? flat : paged, rope, dqkv.as<float>(),
                                               dk.data(), dv.data(), o.as<float>(), nullptr,
                                               counters.as<unsigned>(), ws.data(), ws_bytes,
                                               stream()));
      out[i] = download<float>(o, static_cast<size_t>(q_n));
      const auto all = download<uint8_t>(dk, i == 0 ? fk2.size() : pk.size());
      const size_t r = i == 0 ? last : slot(c.n_kv - 1);
      new_k[i].assign(all.begin() + static_cast<std::ptrdiff_t>(r * row_bytes),
                      all.begin() + static_cast<std::ptrdiff_t>((r + 1) * row_bytes));
    }
    EXPECT_EQ(test::count_non_finite(out[0]), 0u);
    EXPECT_EQ(out[1], out[0]);
    EXPECT_EQ(new_k[1], new_k[0]);
  }
  cuda::apply_kernel_config({});
  // A paged layout elsewhere is refused.
  cuda::AttentionParams bad;
  bad.n_tokens = 2;
  bad.n_kv = 8;
  bad.n_head = 2;
  bad.kv = {DType::kBF16, 1, 64, 64, 0};
  bad.kv.block_table = reinterpret_cast<const int32_t*>(16);
  bad.kv.block_size = 16;
  bad.kv.paged_rows = 64;
  cuda::DeviceBuffer b = poisoned<float>(1024);
  EXPECT_FALSE(cuda::attention_prefill(bad, b.as<float>(), b.data(), b.data(), DType::kF32,
                                       b.data(), b.data(), 4096, stream())
                   .ok());
  bad.n_tokens = 1;
  bad.kv.block_size = 0;
  EXPECT_FALSE(cuda::attention_decode(bad, b.as<float>(), b.data(), b.data(), b.as<float>(),
                                      b.data(), 4096, stream())
                   .ok());
}

TEST_F(CudaAttention, DecodeRopeRejectsBadInput) {
  // Bad input: a bad n_rot, no counters, caches the fused step does not take.
  cuda::DeviceBuffer b = poisoned<float>(4096);
  cuda::AttentionParams p;
  p.n_tokens = 1;
  p.n_kv = 4;
  p.n_head = 2;
  p.kv = {DType::kBF16, 1, 64, 64, 0};
  cpu::RopeParams rope;
  rope.n_rot = 64;
  unsigned* cnt = reinterpret_cast<unsigned*>(b.data());
  rope.n_rot = 65;
  EXPECT_EQ(cuda::attention_decode_rope(p, rope, b.as<float>(), b.data(), b.data(), b.as<float>(),
                                        nullptr, cnt, b.data(), 4096, stream())
                .code(),
            StatusCode::kInvalidArgument);
  rope.n_rot = 64;
  EXPECT_EQ(cuda::attention_decode_rope(p, rope, b.as<float>(), b.data(), b.data(), b.as<float>(),
                                        nullptr, nullptr, b.data(), 4096, stream())
                .code(),
            StatusCode::kInvalidArgument);
  // An f32 cache of head_dim 256 (the fused step takes f32 at 64 and 128 only).
  p.kv = {DType::kF32, 1, 256, 256, 0};
  EXPECT_FALSE(cuda::attention_decode_rope_supports(p.kv));
  rope.n_rot = 256;
  EXPECT_EQ(cuda::attention_decode_rope(p, rope, b.as<float>(), b.data(), b.data(), b.as<float>(),
                                        nullptr, cnt, b.data(), 4096, stream())
                .code(),
            StatusCode::kUnsupported);
  p.kv = {DType::kF16, 1, 64, 64, 0};
  EXPECT_FALSE(cuda::attention_decode_rope_supports(p.kv));
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
  // A ring too small for the window, a negative window, n_kv_device in prefill.
  p.n_tokens = 1;
  p.kv.ring_rows = 3;
  p.window = 4;
  EXPECT_EQ(cuda::attention_decode(p, b.as<float>(), b.data(), b.data(), b.as<float>(), nullptr, 0,
                                   stream())
                .code(),
            StatusCode::kInvalidArgument);
  p.kv.ring_rows = 0;
  p.window = -1;
  EXPECT_EQ(cuda::attention_decode(p, b.as<float>(), b.data(), b.data(), b.as<float>(), nullptr, 0,
                                   stream())
                .code(),
            StatusCode::kInvalidArgument);
  p.window = 0;
  p.n_kv_device = b.as<int32_t>();
  EXPECT_EQ(cuda::attention_prefill(p, b.as<float>(), b.data(), b.data(), DType::kF32, b.data(),
                                    b.data(), 4096 * 4, stream())
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rinfer
