// The decoder sample on the GPU against the same model on the CPU (reference kernels, f32):
// small random Llama and Gemma 3 models written as GGUF here (head_dim 64, GQA, every weight
// format the GPU has a layout for), prefilled in several chunks and decoded token by token, with
// every strategy switch of the CUDA model (graphs, fusions, allocator, bf16 conversion).
// The real-shape parity with PyTorch/transformers runs on the H200 (scripts/device/parity.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "core/cuda_info.h"
#include "engine/engine_core.h"
#include "core_logits.h"
#include "engine/precision.h"
#include "formats/gguf_writer.h"
#include "kv/kv_arena.h"
#include "models/llama/cuda/llama_cuda_model.h"
#include "models/model.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/sampler.h"
#include "ops/cuda/ops_cuda.h"
#include "test_util.h"

namespace rinfer {
namespace {

struct TinySpec {
  std::string arch = "llama";  // llama | gemma3
  DType wtype = DType::kF32;
  int64_t n_layer = 3, n_embd = 256, n_ff = 512, n_head = 4, n_head_kv = 2, head_dim = 64;
  int64_t n_vocab = 320, n_ctx = 128;
  int64_t window = 8;  // gemma3 local layers
};

uint16_t f16_bits(float f) {
  // Small positive normal values only (scales): exponent/mantissa by hand.
  int e = 0;
  const float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  const int exp16 = e - 1 + 15;
  const auto mant = static_cast<uint16_t>(std::lround((m * 2.0f - 1.0f) * 1024.0f)) & 0x3ff;
  return static_cast<uint16_t>((exp16 << 10) | mant);
}

// Random bytes of `rows` rows of a block format with sane f16 scales.
std::string random_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const DTypeTraits& tr = dtype_traits(t);
  if (!tr.is_quantized) {
    const float a = 1.0f / std::sqrt(static_cast<float>(cols));
    std::string out;
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = a * u(rng);
      if (t == DType::kF32) {
        out.append(reinterpret_cast<const char*>(&v), 4);
      } else {  // bf16
        uint32_t b;
        std::memcpy(&b, &v, 4);
        const auto h = static_cast<uint16_t>(b >> 16);
        out.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    return out;
  }
  const int64_t n_blocks = rows * cols / tr.block_size;
  std::string out(static_cast<size_t>(n_blocks * tr.block_bytes), '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  std::uniform_real_distribution<float> sd(0.002f, 0.01f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    char* blk = out.data() + b * tr.block_bytes;
    auto put = [&](int off, float v) {
      const uint16_t h = f16_bits(v);
      std::memcpy(blk + off, &h, 2);
    };
    switch (t) {
      case DType::kQ8_0: put(0, sd(rng) * 0.2f); break;
      case DType::kQ4_0: put(0, sd(rng)); break;
      case DType::kQ4_1:
        put(0, sd(rng));
        put(2, -8.0f * sd(rng));
        break;
      // K-quants multiply d by 6-bit (Q4_K) or 8-bit (Q6_K) sub-block scales: keep d small
      // (and f16-normal) so weights stay ~1/sqrt(n_in) like the other formats. Larger ones make
      // the random model chaotic (attention near one-hot), where any rounding is amplified.
      case DType::kQ4_K:
        put(0, 7e-5f + sd(rng) * 0.01f);
        put(2, 7e-5f + sd(rng) * 0.01f);
        break;
      case DType::kQ6_K: put(208, 7e-5f + sd(rng) * 0.005f); break;
      default: break;
    }
  }
  return out;
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// Writes the model and returns its path.
std::string write_tiny_model(const TinySpec& s, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.set("general.architecture", GgufWriter::Value::string(s.arch));
  w.set(p + "block_count", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.n_layer)));
  w.set(p + "embedding_length", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.n_embd)));
  w.set(p + "feed_forward_length", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.n_ff)));
  w.set(p + "attention.head_count",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.n_head)));
  w.set(p + "attention.head_count_kv",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.n_head_kv)));
  w.set(p + "attention.key_length",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.head_dim)));
  w.set(p + "context_length", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.n_ctx)));
  w.set(p + "attention.layer_norm_rms_epsilon", GgufWriter::Value::of<float>(1e-6f));
  w.set(p + "rope.freq_base", GgufWriter::Value::of<float>(10000.0f));
  if (s.arch == "gemma3") {
    w.set(p + "attention.sliding_window",
          GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(s.window)));
    w.set(p + "attention.sliding_window_pattern", GgufWriter::Value::of<uint32_t>(3));
    w.set(p + "rope.freq_base", GgufWriter::Value::of<float>(1000000.0f));
  }
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols, DType t) {
    EXPECT_TRUE(w.add_tensor(name, t, {rows, cols}, random_matrix(t, rows, cols, rng)).ok())
        << name;
  };
  auto vec = [&](const std::string& name, int64_t n) {
    std::vector<float> v = test::random_floats(static_cast<size_t>(n), rng(), 0.8f, 1.2f);
    EXPECT_TRUE(w.add_tensor(name, DType::kF32, {n}, f32_bytes(v)).ok()) << name;
  };
  mat("token_embd.weight", s.n_vocab, s.n_embd, s.wtype == DType::kQ4_K ? DType::kQ8_0 : s.wtype);
  vec("output_norm.weight", s.n_embd);
  mat("output.weight", s.n_vocab, s.n_embd, s.wtype == DType::kQ4_K ? DType::kQ6_K : s.wtype);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    vec(b + "attn_norm.weight", s.n_embd);
    mat(b + "attn_q.weight", q_dim, s.n_embd, s.wtype);
    mat(b + "attn_k.weight", kv_dim, s.n_embd, s.wtype);
    // Mixed formats within a layer (as Q4_K_M files): v and down in Q6_K, not mergeable.
    mat(b + "attn_v.weight", kv_dim, s.n_embd, s.wtype == DType::kQ4_K ? DType::kQ6_K : s.wtype);
    mat(b + "attn_output.weight", s.n_embd, q_dim, s.wtype);
    vec(b + "ffn_norm.weight", s.n_embd);
    mat(b + "ffn_gate.weight", s.n_ff, s.n_embd, s.wtype);
    mat(b + "ffn_up.weight", s.n_ff, s.n_embd, s.wtype);
    mat(b + "ffn_down.weight", s.n_embd, s.n_ff, s.wtype == DType::kQ4_K ? DType::kQ6_K : s.wtype);
    if (s.arch == "gemma3") {
      vec(b + "attn_q_norm.weight", s.head_dim);
      vec(b + "attn_k_norm.weight", s.head_dim);
      vec(b + "post_attention_norm.weight", s.n_embd);
      vec(b + "post_ffw_norm.weight", s.n_embd);
    }
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rinfer_tiny_" + s.arch + "_" + std::string(dtype_name(s.wtype)) +
                             "_" + std::to_string(seed) + ".gguf"))
                               .string();
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

// Prefill `n_prefill` tokens (all logits), then decode the rest one by one (their logits), through
// the model's runner (the engine core's path); returns [tokens.size(), n_vocab].
std::vector<float> run(DecoderModel& m, const std::vector<int32_t>& tokens, int64_t n_prefill,
                       int64_t n_ctx) {
  return test::prefill_then_decode(m, tokens, n_prefill, n_ctx);
}

struct Variant {
  const char* name;
  bool graphs = true;
  FusionOptions fusion;
  AllocatorKind allocator = AllocatorKind::kCaching;
  bool to_bf16 = false;
  std::optional<DType> kv;  // LoadOptions::kv_dtype
};

class LlamaCudaModelTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  void SetUp() override {
    auto devices = cuda_devices();
    if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  }
};

// The model in `spec` prefilled and decoded on the GPU with each variant's settings, against the
// CPU reference kernels (relative L2 below tol, per phase); returns the last variant's logits.
std::vector<float> match_cpu_reference(const TinySpec& spec, std::span<const Variant> variants,
                                       double tol) {
  std::vector<float> last;
  const std::string path = write_tiny_model(spec, 7);
  const int64_t n_prefill = 37, n_decode = 12, n_ctx = 64;
  std::vector<int32_t> tokens(static_cast<size_t>(n_prefill + n_decode));
  std::mt19937 rng(3);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(spec.n_vocab));

  LoadOptions cpu_opts;
  cpu_opts.cpu.ops.impl = cpu::Impl::kReference;
  cpu_opts.max_batch = 16;
  auto cpu_model = load_decoder_model(path, cpu_opts);
  EXPECT_TRUE(cpu_model.ok()) << cpu_model.status().to_string();
  if (!cpu_model.ok()) return last;
  const std::vector<float> want = run(**cpu_model, tokens, n_prefill, n_ctx);
  EXPECT_FALSE(want.empty());
  if (want.empty()) return last;

  const size_t nv = static_cast<size_t>(spec.n_vocab);
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    LoadOptions o;
    o.device = Device::cuda(0);
    o.max_batch = 16;
    o.cuda.graphs = v.graphs;
    o.fusion = v.fusion;
    o.cuda.allocator = v.allocator;
    if (v.to_bf16) o.weight_format = DType::kBF16;
    o.kv_dtype = v.kv;
    auto gpu_model = load_decoder_model(path, o);
    EXPECT_TRUE(gpu_model.ok()) << gpu_model.status().to_string();
    if (!gpu_model.ok()) return last;
    std::vector<float> got = run(**gpu_model, tokens, n_prefill, n_ctx);
    EXPECT_EQ(got.size(), want.size());
    if (got.size() != want.size()) return last;
    // Prefill rows (bf16 GEMMs and bf16 attention) and decode rows (matvec, f32 or int16
    // activations; bf16 KV cache) separately.
    for (int part = 0; part < 2; ++part) {
      const size_t r0 = part == 0 ? 0 : static_cast<size_t>(n_prefill);
      const size_t r1 = part == 0 ? static_cast<size_t>(n_prefill) : tokens.size();
      std::vector<float> a(want.begin() + static_cast<std::ptrdiff_t>(r0 * nv),
                           want.begin() + static_cast<std::ptrdiff_t>(r1 * nv));
      std::vector<float> b(got.begin() + static_cast<std::ptrdiff_t>(r0 * nv),
                           got.begin() + static_cast<std::ptrdiff_t>(r1 * nv));
      const double err = test::rel_l2(a, b);
      EXPECT_LT(err, tol) << (part == 0 ? "prefill" : "decode") << " rel L2 " << err;
      EXPECT_GT(err, 0.0) << "identical to the CPU to the bit: the GPU path did not run?";
      std::printf("[ %s %s %s ] %s rel L2 %.3g\n", spec.arch.c_str(),
                  std::string(dtype_name(spec.wtype)).c_str(), v.name,
                  part == 0 ? "prefill" : "decode", err);
    }
    last = std::move(got);
  }
  std::filesystem::remove(path);
  return last;
}

TEST_P(LlamaCudaModelTest, MatchesCpuReference) {
  TinySpec spec;
  spec.arch = std::get<0>(GetParam());
  spec.wtype = std::get<1>(GetParam());
  FusionOptions unfused{false, false, false, false};
  unfused.attention = true;  // the GPU has only the fused attention kernels
  const Variant variants[] = {
      {"optimized"},
      {"no graphs, unfused, plain allocator", false, unfused, AllocatorKind::kPlain},
      {"weights converted to bf16", true, FusionOptions{}, AllocatorKind::kCaching, true},
      {"f32 KV cache", true, FusionOptions{}, AllocatorKind::kCaching, false, DType::kF32},
      {"f32 KV cache, unfused", false, unfused, AllocatorKind::kCaching, false, DType::kF32},
  };
  // Q4_K files mix in Q6_K tensors, which the GPU holds as bf16 (one more rounding of every
  // weight of those matrices): a looser bound for them.
  match_cpu_reference(spec, variants, spec.wtype == DType::kQ4_K ? 3e-2 : 2e-2);
}

// The logits of every row of `tokens` teacher-forced through an engine core over `m` (its paged
// arena in the model's KV type), passes of `chunk` tokens (1: every row a decode step).
std::vector<float> core_logits(DecoderModel& m, const std::vector<int32_t>& tokens, int64_t chunk) {
  test::CoreLogitsOptions o;
  o.chunk = chunk;
  o.n_ctx = 64;
  return test::core_logits(m, tokens, o);
}

// strategies.kv_cache.dtype f32: every position through the decode path (a one-token prefill
// is a decode step), f32 and bf16 weights (f32 activations, exact matvecs), against the CPU
// reference: with the keys and values unrounded the logits agree to f32 rounding, and closer
// than with the bf16 cache by far; the same through the engine core's decode steps (its f32
// arena). The engine core's prefill passes (bf16 activations into the GEMMs) over the f32 arena
// (the scalar paged attention) stay within the bf16 bound and no worse than over a bf16 one. The
// describe line names the cache type.
TEST(LlamaCudaModel, F32KvCacheDecodesAtF32Precision) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  for (const std::string arch : {"llama", "gemma3"}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(arch + " " + std::string(dtype_name(t)));
      TinySpec spec;
      spec.arch = arch;
      spec.wtype = t;
      const std::string path = write_tiny_model(spec, 11);
      std::vector<int32_t> tokens(40);
      std::mt19937 rng(5);
      for (int32_t& tk : tokens) {
        tk = static_cast<int32_t>(rng() % static_cast<uint32_t>(spec.n_vocab));
      }
      LoadOptions cpu_opts;
      cpu_opts.cpu.ops.impl = cpu::Impl::kReference;
      auto cpu_model = load_decoder_model(path, cpu_opts);
      ASSERT_TRUE(cpu_model.ok()) << cpu_model.status().to_string();
      const std::vector<float> want = run(**cpu_model, tokens, 1, 64);
      double err[2] = {0.0, 0.0}, core_err[2] = {0.0, 0.0}, prefill_err[2] = {0.0, 0.0};
      // err: the runner's decode steps by hand; core_err: the same through an engine core.
      for (int i = 0; i < 2; ++i) {
        LoadOptions o;
        o.device = Device::cuda(0);
        o.max_batch = 16;
        o.kv_dtype = i == 0 ? DType::kF32 : DType::kBF16;
        auto gpu = load_decoder_model(path, o);
        ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
        EXPECT_NE((*gpu)->describe().find(i == 0 ? "f32 KV cache" : "bf16 KV cache"),
                  std::string::npos)
            << (*gpu)->describe();
        const std::vector<float> got = run(**gpu, tokens, 1, 64);
        ASSERT_EQ(got.size(), want.size());
        err[i] = test::rel_l2(want, got);
        const std::vector<float> steps = core_logits(**gpu, tokens, 1);
        ASSERT_EQ(steps.size(), want.size());
        core_err[i] = test::rel_l2(want, steps);
        const std::vector<float> prefill = core_logits(**gpu, tokens, 16);
        ASSERT_EQ(prefill.size(), want.size());
        prefill_err[i] = test::rel_l2(want, prefill);
      }
      std::printf(
          "[ %s %s ] rel L2, f32 KV cache / bf16: decode steps %.3g / %.3g, engine core steps "
          "%.3g / %.3g, engine core prefill %.3g / %.3g\n",
          arch.c_str(), std::string(dtype_name(t)).c_str(), err[0], err[1], core_err[0],
          core_err[1], prefill_err[0], prefill_err[1]);
      EXPECT_GT(err[0], 0.0);
      EXPECT_LT(err[0], 1e-4);
      EXPECT_LT(err[0] * 10, err[1]);
      EXPECT_GT(core_err[0], 0.0);
      EXPECT_LT(core_err[0], 1e-4);
      EXPECT_LT(core_err[0] * 10, core_err[1]);
      EXPECT_LT(prefill_err[0], 2e-2);
      EXPECT_LE(prefill_err[0], prefill_err[1] * 1.05);
      std::filesystem::remove(path);
    }
  }
  // A cache type the GPU does not hold.
  TinySpec spec;
  const std::string path = write_tiny_model(spec, 12);
  LoadOptions o;
  o.device = Device::cuda(0);
  o.kv_dtype = DType::kF16;
  auto bad = load_decoder_model(path, o);
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported) << bad.status().to_string();
  std::filesystem::remove(path);
}

// Rows of 1024: the Q8_0 / Q4_0 streaming matvec kernel takes every consumer (QKV, gate|up, the
// output) when asked to (kAlways). Its logits against the register kernel's (the same int16
// arithmetic, summed in another order), and both against the CPU reference: 3e-2 (Q8_0's
// prefill through bf16 weights differs by 2.7e-2 at this width, and its decode inherits it).
TEST_F(LlamaCudaModelTest, StreamingMatvecMatchesCpuReference) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    TinySpec spec;
    spec.wtype = t;
    spec.n_layer = 2;
    spec.n_embd = 1024;
    spec.n_ff = 1024;
    spec.n_head = 16;
    spec.n_head_kv = 4;
    const Variant v[] = {{"optimized"}};
    std::vector<float> got[2];
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (i == 0 ? " streaming" : " register"));
      cuda::apply_kernel_config({.matvec_stream = i == 0 ? cuda::MatvecKernel::kAlways
                                                         : cuda::MatvecKernel::kNever});
      got[i] = match_cpu_reference(spec, v, 3e-2);
    }
    cuda::apply_kernel_config({});
    ASSERT_EQ(got[0].size(), got[1].size());
    ASSERT_FALSE(got[0].empty());
    const double d = test::rel_l2(got[0], got[1]);
    EXPECT_LT(d, 1e-3) << dtype_name(t) << ": streaming against register kernel";
    std::printf("[ %s ] streaming against register kernel: rel L2 %.3g\n",
                std::string(dtype_name(t)).c_str(), d);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LlamaCudaModelTest,
                         ::testing::Combine(::testing::Values("llama", "gemma3"),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kQ8_0, DType::kQ4_0,
                                                              DType::kQ4_1, DType::kQ4_K)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

// The weight blocks this file generates, through the device layouts and kernels alone.
TEST(LlamaCudaModel, GeneratedBlocksMatchCpuMatmul) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  auto stream = cuda::Stream::create(0);
  ASSERT_TRUE(stream.ok());
  cudaStream_t st = stream->get();
  std::mt19937 rng(5);
  const int64_t n_out = 96, n_in = 512;
  for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::string bytes = random_matrix(t, n_out, n_in, rng);
    auto w = Tensor::wrap(bytes.data(), bytes.size(), Dims{n_out, n_in}, t, Device::cpu(), nullptr);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    const std::vector<float> x = test::random_floats(static_cast<size_t>(n_in), 9);
    std::vector<float> want(static_cast<size_t>(n_out)), got(static_cast<size_t>(n_out));
    cpu::OpContext ref;
    ref.impl = cpu::Impl::kReference;
    ASSERT_TRUE(cpu::matmul(ref, *w, x.data(), 1, want.data()).ok());
    auto dw = cuda::upload_weight(*w, 0, st);
    ASSERT_TRUE(dw.ok()) << dw.status().to_string();
    auto xd = cuda::DeviceBuffer::create(x.size() * 4, 0, st);
    auto yd = cuda::DeviceBuffer::create(got.size() * 4, 0, st);
    ASSERT_TRUE(xd.ok() && yd.ok());
    ASSERT_EQ(cudaMemcpy(xd->data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(cuda::matvec(*dw, xd->as<float>(), nullptr, yd->as<float>(), st).ok());
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), yd->data(), got.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    const double err = test::rel_l2(want, got);
    std::printf("[ %s layout %s ] matvec rel L2 %.3g\n", std::string(dtype_name(t)).c_str(),
                std::string(dtype_name(dw->dtype)).c_str(), err);
    EXPECT_LT(err, 1e-2);
  }
}

// The runner's one-row decode graphs are captured per attention length bound (1024, 2048, ... up
// to the arena's n_ctx): decode steps across the 1024 and 2048 boundaries replay three graphs;
// their logits against the same steps launched without graphs, whose attention is split for the
// sequence's length instead of the bound: its sums run in another order, and the int16 form of
// its output (Q8_0's Wo) rounds a few values the other way, so the bound is 1e-3, far below what
// a step reading the wrong positions gives.
TEST(LlamaCudaModel, DecodeGraphsPerLengthBound) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  TinySpec spec;
  spec.wtype = DType::kQ8_0;
  const std::string path = write_tiny_model(spec, 31);
  std::vector<int32_t> tokens(2060);
  std::mt19937 rng(9);
  for (int32_t& tk : tokens) tk = static_cast<int32_t>(rng() % static_cast<uint32_t>(spec.n_vocab));
  const int64_t nv = spec.n_vocab, n_ctx = 3000;
  std::vector<float> got[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    LoadOptions o;
    o.device = Device::cuda(0);
    o.cuda.graphs = graphs == 1;
    auto m = load_decoder_model(path, o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    test::OneSequence seq = test::OneSequence::make(**m, n_ctx, 512, 16);
    ASSERT_TRUE(seq.ok());
    std::vector<int32_t> pos(tokens.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    const int32_t row0 = 0;
    for (int64_t p = 0; p < static_cast<int64_t>(tokens.size());) {
      // Prefill up to 1020 and 2040 (no logits, passes of 512), decode steps across 1024 and
      // 2048.
      const bool decode = (p >= 1020 && p < 1030) || p >= 2040;
      if (!decode) {
        const int64_t end = std::min<int64_t>(p + 512, p < 1020 ? 1020 : 2040);
        const auto at = static_cast<size_t>(p), n = static_cast<size_t>(end - p);
        ASSERT_TRUE(seq.forward(std::span(tokens).subspan(at, n), std::span(pos).subspan(at, n),
                                {}, nullptr)
                        .ok());
        p = end;
        continue;
      }
      std::vector<float> l(static_cast<size_t>(nv));
      const auto at = static_cast<size_t>(p);
      ASSERT_TRUE(seq.forward(std::span(tokens).subspan(at, 1), std::span(pos).subspan(at, 1),
                              std::span(&row0, 1), l.data())
                      .ok())
          << "position " << p;
      got[graphs].insert(got[graphs].end(), l.begin(), l.end());
      ++p;
    }
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  ASSERT_EQ(got[0].size(), static_cast<size_t>(30 * nv));
  for (float v : got[1]) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(test::rel_l2(got[0], got[1]), 1e-3);
  std::filesystem::remove(path);
}

// The engine core's decode steps of one sequence run the model's decode pass over the runner's
// paged arena (strategies.kernels.cuda.runner_matvec, on by default): their logits replayed from
// the one-row graphs (the default) against the same steps launched kernel by kernel (cuda_graphs
// off; only the attention's split count may differ) and against the runner's GEMM path
// (runner_matvec off: bf16 activations into every GEMM), the graphs' device sampling against the
// host's choice of the same logits, for Llama and Gemma 3 (sliding windows, post norms) in bf16,
// Q8_0 and Q4_0.
TEST(LlamaCudaModel, EngineCoreOneSequenceDecodeRunsTheDecodeKernels) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  for (const std::string arch : {"llama", "gemma3"}) {
    for (const DType dt : {DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      const std::string what = arch + " " + std::string(dtype_name(dt));
      SCOPED_TRACE(what);
      TinySpec spec;
      spec.arch = arch;
      spec.wtype = dt;
      const std::string path = write_tiny_model(spec, 41);
      std::mt19937 rng(5);
      std::vector<int32_t> prompt(40);
      for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % spec.n_vocab);
      const int64_t n_out = 24;
      // [0] the defaults (runner_matvec, CUDA graphs), [1] runner_matvec off, [2] graphs off.
      std::unique_ptr<DecoderModel> m[3];
      std::vector<std::vector<float>> logits[3];
      std::vector<int32_t> tokens, sampled;
      // Runs 0-2 hand over their logits (and 1, 2 are teacher-forced with run 0's tokens); run 3
      // samples greedily on the device with the defaults.
      for (int i = 0; i < 4; ++i) {
        if (i < 3) {
          LoadOptions o;
          o.device = Device::cuda(0);
          o.cuda.kernels.runner_matvec = i != 1;
          o.cuda.graphs = i != 2;
          auto lm = load_decoder_model(path, o);
          ASSERT_TRUE(lm.ok()) << lm.status().to_string();
          m[i] = std::move(lm).value();
        }
        EngineCoreOptions eo;
        eo.n_ctx = spec.n_ctx;
        eo.scheduler.max_seqs = 4;
        eo.scheduler.max_batched_tokens = spec.n_ctx;
        auto e = EngineCore::create(*m[i % 3], eo, nullptr);
        ASSERT_TRUE(e.ok()) << e.status().to_string();
        RequestParams p;
        p.prompt = prompt;
        p.max_tokens = n_out;
        p.ignore_eos = true;
        p.sampling.temperature = 0.0f;
        p.sampling.repeat_penalty = 1.0f;
        p.want_logits = i < 3;
        if (i == 1 || i == 2) p.forced = tokens;
        p.on_event = [&, i](const RequestEvent& ev) {
          if (ev.tokens.empty()) return;
          if (i < 3) logits[i].emplace_back(ev.logits.begin(), ev.logits.end());
          std::vector<int32_t>& to = i == 0 ? tokens : sampled;
          if (i == 0 || i == 3) to.insert(to.end(), ev.tokens.begin(), ev.tokens.end());
        };
        ASSERT_TRUE((*e)->submit(std::move(p)).ok());
        const Status st = (*e)->run_until_idle();
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
      EXPECT_EQ(sampled, tokens);  // the sampled graphs choose what the host chose
      ASSERT_EQ(logits[2].size(), static_cast<size_t>(n_out));
      ASSERT_EQ(logits[0].size(), static_cast<size_t>(n_out));
      ASSERT_EQ(logits[1].size(), static_cast<size_t>(n_out));
      // Against the same steps launched kernel by kernel (graphs off: the same kernels, the
      // attention's splits sized for the sequence's length instead of the graph's bound).
      double worst_matvec = 0, worst_gemm = 0;
      for (int64_t t = 1; t < n_out; ++t) {
        const auto& a = logits[0][static_cast<size_t>(t)];
        const auto& g = logits[1][static_cast<size_t>(t)];
        const auto& ref = logits[2][static_cast<size_t>(t)];
        for (float v : a) ASSERT_TRUE(std::isfinite(v)) << "step " << t;
        worst_matvec = std::max(worst_matvec, test::rel_l2(a, ref));
        worst_gemm = std::max(worst_gemm, test::rel_l2(g, ref));
      }
      std::printf(
          "[ %s ] decode logits rel L2 against the steps without graphs (worst of %lld steps): "
          "graphs %.2e, runner GEMM %.2e\n",
          what.c_str(), static_cast<long long>(n_out - 1), worst_matvec, worst_gemm);
      EXPECT_LT(worst_matvec, 1e-4);
      // Closer to the decode kernels than the GEMM path is: the matvecs ran in both.
      EXPECT_LT(worst_matvec, worst_gemm);
      EXPECT_LT(worst_gemm, 5e-2);
      std::filesystem::remove(path);
    }
  }
}

TEST(LlamaCudaModel, RunnerRejectsAForeignArenaAndBadTokens) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  TinySpec spec;
  const std::string path = write_tiny_model(spec, 11);
  LoadOptions o;
  o.device = Device::cuda(0);
  auto m = load_decoder_model(path, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  test::OneSequence seq = test::OneSequence::make(**m, 16, 16, 16);
  ASSERT_TRUE(seq.ok());
  const std::vector<int32_t> tok{1}, pos{0}, rows{0};
  std::vector<float> logits(static_cast<size_t>(spec.n_vocab));
  // A host arena of the same shape.
  auto host = kv::HostKvArena::create(seq.arena->spec(), std::vector<int32_t>(1, 1));
  ASSERT_TRUE(host.ok());
  ForwardBatch b;
  const std::vector<int32_t> qs = {0, 1}, len = {1};
  b.tokens = tok;
  b.positions = pos;
  b.query_start = qs;
  b.kv_len = len;
  b.block_tables = seq.table;
  b.table_stride = 1;
  b.logit_rows = rows;
  Status st = seq.runner->forward(b, **host, logits.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("arena"), std::string::npos) << st.to_string();
  const std::vector<int32_t> bad{static_cast<int32_t>(spec.n_vocab)};
  st = seq.forward(bad, pos, rows, logits.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos) << st.to_string();
  EXPECT_TRUE(seq.forward(tok, pos, rows, logits.data()).ok());
  std::filesystem::remove(path);
}

// Decode steps of several sequences at once (the engine core's running batch: batch graphs
// padded to their bucket, the small-batch matvec over Q4_0, the paged attention over each
// sequence's table, Gemma 3's windowed layers past their window) against the CPU reference
// serving the same four requests, the CPU's greedy tokens forced on the GPU, every step's
// logits compared; the CUDA model counts the steps its graphs replayed.
TEST(LlamaCudaModel, BatchedDecodeStepsMatchTheCpuReference) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  const int64_t prompt_len[] = {21, 5, 13, 30}, n_out[] = {14, 11, 8, 5};
  for (const std::string arch : {"llama", "gemma3"}) {
    SCOPED_TRACE(arch);
    TinySpec spec;
    spec.arch = arch;
    spec.wtype = DType::kQ4_0;
    const std::string path = write_tiny_model(spec, 11);
    std::vector<std::vector<int32_t>> tokens(4);
    std::vector<std::vector<std::vector<float>>> logits[2];  // [cpu, cuda][request][step]
    int64_t graph_steps = 0;
    for (int dev = 0; dev < 2; ++dev) {
      LoadOptions o;
      if (dev == 0) {
        o.cpu.ops.impl = cpu::Impl::kReference;
      } else {
        o.device = Device::cuda(0);
      }
      auto m = load_decoder_model(path, o);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EngineCoreOptions eo;
      eo.n_ctx = 64;
      eo.scheduler.max_seqs = 4;
      eo.scheduler.max_batched_tokens = 128;
      auto e = EngineCore::create(**m, eo, nullptr);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      logits[dev].resize(4);
      std::mt19937 rng(5);
      for (size_t i = 0; i < 4; ++i) {
        RequestParams p;
        p.prompt.resize(static_cast<size_t>(prompt_len[i]));
        for (int32_t& t : p.prompt) t = static_cast<int32_t>(rng() % spec.n_vocab);
        p.max_tokens = n_out[i];
        p.ignore_eos = true;
        p.sampling.temperature = 0.0f;
        p.sampling.repeat_penalty = 1.0f;
        p.want_logits = true;
        if (dev == 1) p.forced = tokens[i];
        p.on_event = [&, dev, i](const RequestEvent& ev) {
          if (ev.tokens.empty()) return;
          logits[dev][i].emplace_back(ev.logits.begin(), ev.logits.end());
          if (dev == 0) tokens[i].insert(tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
        };
        ASSERT_TRUE((*e)->submit(std::move(p)).ok());
      }
      const Status st = (*e)->run_until_idle();
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (dev == 1) graph_steps = llama::cuda_graph_steps(**m);
    }
    double worst = 0;
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(logits[0][i].size(), static_cast<size_t>(n_out[i]));
      ASSERT_EQ(logits[1][i].size(), logits[0][i].size());
      for (size_t t = 0; t < logits[0][i].size(); ++t) {
        worst = std::max(worst, test::rel_l2(logits[0][i][t], logits[1][i][t]));
      }
    }
    std::printf("[ %s q4_0 ] batched decode steps against the CPU reference: worst rel L2 %.3g, "
                "%lld steps from graphs\n",
                arch.c_str(), worst, static_cast<long long>(graph_steps));
    EXPECT_LT(worst, 2e-2);
    EXPECT_GT(worst, 0.0);
    // 4 sequences for 4 steps, 3 for 3, 2 for 3 (each bucket's first step eager), 1 for 3.
    EXPECT_GE(graph_steps, 6);
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace rinfer
