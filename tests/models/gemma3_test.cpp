// Gemma 3 270M (GGUF arch gemma3, Q4_K_M) through the Llama-family sample, against the
// independent numpy float64 forward of tests/tools/ref_gemma3.py: the per-layer table (sliding
// window, RoPE base) read from the metadata, the reference and fast kernels against the
// fixture, KV-cache decode against one pass, chunked prefill across the sliding window against
// one pass, and the residual stream after every layer against the reference's
// (tests/data/gemma3/gemma3_layers.*), each through a one-seat engine core (tests/core_logits.h).
// Skipped when the model is not fetched.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "core_logits.h"
#include "models/llama/llama_model.h"
#include "models/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {
namespace {

using test::rel_l2;
using test::test_data_path;

constexpr const char* kModel = "gemma3-270m-q4_k_m";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string b = ss.str();
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Logits of every row [n, n_vocab], from an empty cache; one_by_one feeds a token per pass.
std::vector<float> logits(DecoderModel& m, const std::vector<int32_t>& ids, bool one_by_one) {
  test::CoreLogitsOptions o;
  o.chunk = one_by_one ? 1 : 0;
  return test::core_logits(m, ids, o);
}

class Gemma3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = test::reference_model(kModel);
    if (!p) GTEST_SKIP() << test::missing_model_message(kModel);
    path_ = *p;
    fx_ = read_json(test_data_path("gemma3/gemma3_logits.json"));
    last_ = read_f32(test_data_path("gemma3/gemma3_last_logits.f32"));
  }

  std::unique_ptr<DecoderModel> load(cpu::Impl impl, ThreadPool* pool, bool q8) {
    LoadOptions opts;
    opts.cpu.ops.impl = impl;
    opts.cpu.ops.pool = pool;
    opts.cpu.ops.quantize_activations = q8;
    auto m = load_decoder_model(path_, opts);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }

  void check(cpu::Impl impl, bool q8, double max_rel, int min_top1) {
    ThreadPool pool(2);
    auto m = load(impl, &pool, q8);
    ASSERT_TRUE(m);
    const std::vector<int32_t> ids = fx_["ids"];
    const std::vector<float> got = logits(*m, ids, false);
    const int64_t v = m->hparams().n_vocab;
    ASSERT_EQ(v, fx_["n_vocab"].get<int64_t>());
    const std::vector<float> last(got.end() - v, got.end());
    const double rel = rel_l2(last, last_);
    EXPECT_LT(rel, max_rel);
    int agree = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t want = fx_["positions"][i]["ids"][0];
      const float* row = got.data() + i * static_cast<size_t>(v);
      const auto have = static_cast<int32_t>(std::max_element(row, row + v) - row);
      agree += want == have;
      if (min_top1 == static_cast<int>(ids.size())) EXPECT_EQ(have, want) << "position " << i;
    }
    EXPECT_GE(agree, min_top1);
    RecordProperty("rel_l2_last", std::to_string(rel));
    RecordProperty("top1_agreement", agree);
    std::printf("rel L2 (last position) %.3g, top-1 agreement %d/%zu\n", rel, agree, ids.size());
  }

  std::string path_;
  nlohmann::json fx_;
  std::vector<float> last_;
};

// ---- tiny synthetic gemma3 (tests/data/gemma3/tiny_gemma3.gguf, always present) -------------
// 6 layers, sliding window 4 on layers 0-4, 14 ids: the window is crossed in prefill and decode.

class TinyGemma3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    fx_ = read_json(test_data_path("gemma3/tiny_gemma3_logits.json"));
    want_ = read_f32(test_data_path("gemma3/tiny_gemma3_logits.f32"));
  }
  std::unique_ptr<DecoderModel> load(cpu::Impl impl, ThreadPool* pool) {
    LoadOptions opts;
    opts.cpu.ops.impl = impl;
    opts.cpu.ops.pool = pool;
    opts.cpu.ops.quantize_activations = false;
    auto m = load_decoder_model(test_data_path("gemma3/tiny_gemma3.gguf"), opts);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  nlohmann::json fx_;
  std::vector<float> want_;
};

TEST_F(TinyGemma3Test, LayerTableFromMetadata) {
  auto m = load(cpu::Impl::kReference, nullptr);
  ASSERT_TRUE(m);
  const DecoderHParams& hp = m->hparams();
  ASSERT_EQ(hp.layer_attn.size(), 6u);
  for (size_t il = 0; il < 6; ++il) {
    EXPECT_EQ(hp.layer_attn[il].window, il == 5 ? 0 : 4) << il;
    EXPECT_FLOAT_EQ(hp.layer_attn[il].rope_base, il == 5 ? 1e6f : 1e4f) << il;
  }
  EXPECT_FLOAT_EQ(hp.embd_scale, std::sqrt(32.0f));
}

TEST_F(TinyGemma3Test, MatchesNumpyPrefillAndDecode) {
  ThreadPool pool(2);
  const std::vector<int32_t> ids = fx_["ids"];
  for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
    auto m = load(impl, &pool);
    ASSERT_TRUE(m);
    ASSERT_EQ(m->hparams().n_vocab, fx_["n_vocab"].get<int64_t>());
    for (bool one_by_one : {false, true}) {
      const std::vector<float> got = logits(*m, ids, one_by_one);
      EXPECT_LT(rel_l2(got, want_), impl == cpu::Impl::kReference ? 1e-5 : 1e-4)
          << (impl == cpu::Impl::kReference ? "reference" : "fast")
          << (one_by_one ? ", decode" : ", prefill");
    }
  }
}

// ---- Gemma 3 270M Q4_K_M ---------------------------------------------------------------------

TEST_F(Gemma3Test, HyperParametersFromMetadata) {
  auto m = load(cpu::Impl::kReference, nullptr, false);
  ASSERT_TRUE(m);
  const DecoderHParams& hp = m->hparams();
  EXPECT_EQ(hp.architecture, "gemma3");
  EXPECT_EQ(hp.n_layer, 18);
  EXPECT_EQ(hp.n_embd, 640);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 1);
  EXPECT_EQ(hp.head_dim, 256);
  EXPECT_EQ(hp.n_ff, 2048);
  EXPECT_TRUE(hp.tied_output);
  EXPECT_TRUE(hp.qk_norm && hp.post_norms && hp.gelu_ffn);
  EXPECT_FLOAT_EQ(hp.embd_scale, std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(hp.attn_scale, 1.0f / 16.0f);
  EXPECT_EQ(hp.rope.mode, cpu::RopeMode::kNeox);
  ASSERT_EQ(hp.layer_attn.size(), 18u);
  for (size_t il = 0; il < 18; ++il) {
    const bool global = il % 6 == 5;
    EXPECT_EQ(hp.layer_attn[il].window, global ? 0 : 512) << il;
    EXPECT_FLOAT_EQ(hp.layer_attn[il].rope_base, global ? 1e6f : 1e4f) << il;
    EXPECT_FLOAT_EQ(hp.layer_attn[il].rope_scale, 1.0f) << il;
  }
}

TEST_F(Gemma3Test, ReferenceKernelsMatchNumpy) {
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "reference kernels on Gemma 3 run in the optimized build only";
#endif
  check(cpu::Impl::kReference, false, 1e-3, 16);  // measured 1.7e-7
}

// f32 activations: measured 4.0e-7.
TEST_F(Gemma3Test, FastKernelsExactActivationsMatchNumpy) {
  check(cpu::Impl::kFast, false, 1e-5, 16);
}

// 8-bit activations (the default fast path): measured 2.2e-2 (SmolLM2: 2.4e-2 to 2.7e-2), top-1
// 16/16.
TEST_F(Gemma3Test, FastKernelsMatchNumpy) { check(cpu::Impl::kFast, true, 5e-2, 15); }

TEST_F(Gemma3Test, KvCacheEqualsRecompute) {
  ThreadPool pool(2);
  auto m = load(cpu::Impl::kFast, &pool, false);
  ASSERT_TRUE(m);
  std::vector<int32_t> ids = fx_["ids"];
  ids.resize(6);
  EXPECT_LT(rel_l2(logits(*m, ids, true), logits(*m, ids, false)), 1e-5);
}

// ---- chunked prefill past the sliding window -----------------------------------------------

// 940 tokens of the GPL-3 text through the engine core in passes of 128 (the local layers'
// window of 512 crossed inside a pass and between passes, their blocks read through the table)
// and in one pass: the logits of the last 140 rows agree.
class Gemma3WindowTest : public Gemma3Test {
 protected:
  static constexpr int64_t kTokens = 940, kFirstRow = 800;

  void SetUp() override {
    Gemma3Test::SetUp();
    if (IsSkipped()) return;
#ifndef NDEBUG
    GTEST_SKIP() << "1000 tokens of Gemma 3 run in the optimized build only (the tiny gemma3 "
                    "crosses its window in tests/engine/engine_core_test.cpp)";
#endif
    auto gguf = GgufFile::open(path_);
    ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
    auto tok = Tokenizer::from_gguf(*gguf);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    std::ifstream f("/usr/share/common-licenses/GPL-3");
    if (!f.good()) GTEST_SKIP() << "/usr/share/common-licenses/GPL-3 is missing";
    std::stringstream ss;
    ss << f.rdbuf();
    auto ids = (*tok)->encode(ss.str(), EncodeOptions{.add_special = true, .parse_special = false});
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    ASSERT_GE(ids->size(), static_cast<size_t>(kTokens));
    ids_.assign(ids->begin(), ids->begin() + kTokens);
  }

  // The logits of rows kFirstRow.. in passes of `chunk` tokens (0: one pass).
  std::vector<float> run(DecoderModel& m, int64_t chunk) {
    EngineCoreOptions co;
    co.n_ctx = 1024;
    co.prefix_caching = false;
    co.scheduler.max_seqs = 1;
    co.scheduler.max_batched_tokens = chunk > 0 ? chunk : kTokens;
    auto core = EngineCore::create(m, co, {});
    EXPECT_TRUE(core.ok()) << core.status().to_string();
    if (!core.ok()) return {};
    const int64_t nv = m.hparams().n_vocab;
    std::vector<float> out(static_cast<size_t>((kTokens - kFirstRow) * nv));
    const Status st = (*core)->score(ids_, kFirstRow, chunk, [&](int64_t row, auto l) {
      std::copy(l.begin(), l.end(), out.begin() + (row - kFirstRow) * nv);
      return ok_status();
    });
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  }

  std::vector<int32_t> ids_;
};

TEST_F(Gemma3WindowTest, ChunkedPrefillAcrossTheWindowEqualsOnePass) {
  ThreadPool pool(2);
  auto m = load(cpu::Impl::kFast, &pool, false);
  ASSERT_TRUE(m);
  const double rel = rel_l2(run(*m, 128), run(*m, 0));
  EXPECT_LT(rel, 1e-5);
  std::printf("940 tokens in passes of 128 against one pass, rows 800-939: rel L2 %.3g\n", rel);
  RecordProperty("chunked_vs_one_pass_rel_l2", std::to_string(rel));
}

// ---- per-layer hidden states against the numpy reference ----------------------------------

// The residual stream after the embedding and after each of the 18 blocks, for the 64 tokens of
// tests/data/gemma3/gemma3_layers.json, against ref_gemma3.py --layers (float64, stored with
// relative error <= 2^-16). Relative L2 per state over all 64 positions, and over positions
// 1..63 (position 0, <bos>, carries activations up to 1e5 that dominate the norm).
struct LayerErrors {
  std::vector<double> all, no_bos;  // [n_layer + 1]
};

// Bounds on every state's relative L2. Measured (cpu-2core, AVX-512):
// - reference kernels, and fast kernels with f32 activations: 4.4e-6 .. 8.9e-6 for every state,
//   the fixture's own rounding (storage_rel_l2 in the JSON: 4.4e-6 .. 8.8e-6); the kernels' error
//   is below it (the logits: 1.7e-7 / 4.0e-7);
// - fast kernels with 8-bit activations: 3.3e-3 .. 6.0e-3 after layers 0-10, growing to 2.3e-2
//   after layer 17 (2.6e-2 at most without <bos>), as the logits' 2.2e-2.
constexpr double kRefTol = 3e-5;
constexpr double kQ8Tol = 5e-2;

class Gemma3LayersTest : public Gemma3Test {
 protected:
  void SetUp() override {
    Gemma3Test::SetUp();
    if (IsSkipped()) return;
    lx_ = read_json(test_data_path("gemma3/gemma3_layers.json"));
    std::ifstream f(test_data_path("gemma3/gemma3_layers.f24"), std::ios::binary);
    ASSERT_TRUE(f.good());
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string b = ss.str();
    n_states_ = lx_["n_states"];
    n_tok_ = lx_["n_tokens"];
    n_embd_ = lx_["n_embd"];
    ASSERT_EQ(b.size(), static_cast<size_t>(n_states_ * n_tok_ * n_embd_ * 3));
    want_.resize(b.size() / 3);
    for (size_t i = 0; i < want_.size(); ++i) {  // 3 high bytes of an f32, little-endian
      const auto* p = reinterpret_cast<const uint8_t*>(b.data() + 3 * i);
      const uint32_t u = (uint32_t{p[0]} << 8) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 24);
      std::memcpy(&want_[i], &u, 4);
    }
  }

  LayerErrors measure(cpu::Impl impl, bool q8) {
    ThreadPool pool(2);
    auto m = load(impl, &pool, q8);
    EXPECT_TRUE(m);
    LayerErrors e;
    if (!m) return e;
    auto* lm = dynamic_cast<llama::LlamaModel*>(m.get());
    EXPECT_NE(lm, nullptr);
    if (lm == nullptr) return e;
    EXPECT_EQ(lm->hparams().n_layer + 1, n_states_);
    std::vector<float> got(want_.size(), NAN);  // [n_states, n_tok, n_embd]
    lm->set_layer_observer(
        [&](int64_t layer, int64_t pos0, const float* x, int64_t n_tokens, int64_t n_embd) {
          ASSERT_EQ(n_embd, n_embd_);
          ASSERT_LE(pos0 + n_tokens, n_tok_);
          std::memcpy(got.data() + ((layer + 1) * n_tok_ + pos0) * n_embd, x,
                      static_cast<size_t>(n_tokens * n_embd) * sizeof(float));
        });
    const std::vector<int32_t> ids = lx_["ids"];
    EXPECT_FALSE(test::core_logits(*m, ids).empty());
    const auto span_rel = [&](int64_t s, int64_t t0) {
      const auto at = static_cast<std::ptrdiff_t>((s * n_tok_ + t0) * n_embd_);
      const auto end = static_cast<std::ptrdiff_t>((s + 1) * n_tok_ * n_embd_);
      return rel_l2(std::vector<float>(got.begin() + at, got.begin() + end),
                    std::vector<float>(want_.begin() + at, want_.begin() + end));
    };
    for (int64_t s = 0; s < n_states_; ++s) {
      e.all.push_back(span_rel(s, 0));
      e.no_bos.push_back(span_rel(s, 1));
    }
    std::string line;
    for (int64_t s = 0; s < n_states_; ++s) {
      line += fmt::format(" {:.2g}/{:.2g}", e.all[static_cast<size_t>(s)],
                          e.no_bos[static_cast<size_t>(s)]);
    }
    std::printf("per-state rel L2 (all / without <bos>), embedding then layers 0-17:%s\n",
                line.c_str());
    return e;
  }

  nlohmann::json lx_;
  int64_t n_states_ = 0, n_tok_ = 0, n_embd_ = 0;
  std::vector<float> want_;  // [n_states, n_tok, n_embd]
};

TEST_F(Gemma3LayersTest, ReferenceKernels) {
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "reference kernels on Gemma 3 run in the optimized build only";
#endif
  const LayerErrors e = measure(cpu::Impl::kReference, false);
  ASSERT_EQ(e.all.size(), 19u);
  EXPECT_LT(e.all[0], 2e-5);  // the embedding: only the storage rounding
  for (size_t s = 0; s < e.all.size(); ++s) {
    EXPECT_LT(e.all[s], kRefTol) << "state " << s;
    EXPECT_LT(e.no_bos[s], kRefTol) << "state " << s;
  }
}

TEST_F(Gemma3LayersTest, FastKernelsExactActivations) {
  const LayerErrors e = measure(cpu::Impl::kFast, false);
  ASSERT_EQ(e.all.size(), 19u);
  for (size_t s = 0; s < e.all.size(); ++s) {
    EXPECT_LT(e.all[s], kRefTol) << "state " << s;
    EXPECT_LT(e.no_bos[s], kRefTol) << "state " << s;
  }
}

TEST_F(Gemma3LayersTest, FastKernels8BitActivations) {
  const LayerErrors e = measure(cpu::Impl::kFast, true);
  ASSERT_EQ(e.all.size(), 19u);
  EXPECT_LT(e.all[0], 2e-5);  // the embedding is not quantized
  for (size_t s = 1; s < e.all.size(); ++s) {
    EXPECT_LT(e.all[s], kQ8Tol) << "state " << s;
    EXPECT_LT(e.no_bos[s], kQ8Tol) << "state " << s;
  }
}

}  // namespace
}  // namespace rinfer
