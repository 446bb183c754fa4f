// Perplexity: the scoring against a hand computation on the tiny model, argument checks, and a
// regression pin for SmolLM2-135M Q4_1 on /usr/share/common-licenses/GPL-3.
#include "engine/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {
namespace {

struct Rig {
  std::unique_ptr<DecoderModel> model;
  KvCache cache;
};

Rig load(const std::string& path, ThreadPool* pool, int64_t n_ctx) {
  LoadOptions o;
  o.ops.impl = cpu::Impl::kFast;
  o.ops.pool = pool;
  auto m = load_decoder_model(path, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  const DecoderHParams& hp = (*m)->hparams();
  return {std::move(m).value(), KvCache::create(hp.n_layer, n_ctx, hp.kv_dim()).value()};
}

TEST(PerplexityTest, MatchesAHandComputationOnTheTinyModel) {
  Rig r = load(test::test_data_path("llama/tiny_llama.gguf"), nullptr, 32);
  std::vector<int32_t> tokens(70);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 96);
  PerplexityOptions o;
  o.n_ctx = 32;
  o.chunk = 7;  // uneven chunks on purpose
  o.bos = 1;
  auto p = compute_perplexity(*r.model, r.cache, tokens, o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->windows, 2);             // 70 tokens: two whole windows of 32
  EXPECT_EQ(p->scored_tokens, 2 * 15);  // positions 16..30 predict 17..31

  // By hand: each window in one pass, all logits, the same positions.
  double sum = 0;
  const int64_t v = r.model->hparams().n_vocab;
  for (int w = 0; w < 2; ++w) {
    std::vector<int32_t> win(tokens.begin() + w * 32, tokens.begin() + (w + 1) * 32);
    win[0] = 1;
    std::vector<int32_t> pos(32), rows(32);
    std::iota(pos.begin(), pos.end(), 0);
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> logits(32 * v);
    r.cache.clear();
    ASSERT_TRUE(r.model->infer({win, pos, rows}, r.cache, logits.data()).ok());
    for (int i = 16; i < 31; ++i) {
      const float* l = logits.data() + i * v;
      double z = 0, mx = *std::max_element(l, l + v);
      for (int64_t j = 0; j < v; ++j) z += std::exp(l[j] - mx);
      sum += std::log(z) - (l[win[i + 1]] - mx);
    }
  }
  EXPECT_NEAR(p->ppl, std::exp(sum / 30), 1e-3 * p->ppl);
  EXPECT_GT(p->ppl_stderr, 0);

  o.max_windows = 1;
  auto one = compute_perplexity(*r.model, r.cache, tokens, o);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->windows, 1);
}

TEST(PerplexityTest, RejectsShortTextsAndOversizedWindows) {
  Rig r = load(test::test_data_path("llama/tiny_llama.gguf"), nullptr, 32);
  std::vector<int32_t> tokens(20, 3);
  PerplexityOptions o;
  o.n_ctx = 32;
  auto p = compute_perplexity(*r.model, r.cache, tokens, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("shorter than one window"), std::string::npos);
  o.n_ctx = 64;
  tokens.resize(200, 3);
  p = compute_perplexity(*r.model, r.cache, tokens, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("exceeds the KV cache"), std::string::npos);
}

// Measured with the fast kernels (8-bit activations): 17.7508 in optimized builds. The
// reference kernels give 17.6866 (docs/engine.md). 2 windows of 512 tokens, second halves scored.
constexpr double kGpl3Perplexity = 17.7508;

TEST(PerplexityTest, SmolLm2OnGpl3IsPinned) {
  const auto path = test::reference_model("smollm2-135m-instruct-q4_1");
  if (!path) GTEST_SKIP() << test::missing_model_message("smollm2-135m-instruct-q4_1");
#ifndef __OPTIMIZE__
  GTEST_SKIP() << "2 windows of 512 tokens take minutes in an unoptimized build; this runs in "
                  "the optimized build (ctest --preset default), where it takes about a second";
#endif
  std::ifstream f("/usr/share/common-licenses/GPL-3");
  if (!f) GTEST_SKIP() << "/usr/share/common-licenses/GPL-3 not found";
  std::stringstream ss;
  ss << f.rdbuf();
  auto gguf = GgufFile::open(*path);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::from_gguf(*gguf);
  ASSERT_TRUE(tok.ok());
  auto ids = (*tok)->encode(ss.str(), EncodeOptions{.add_special = false, .parse_special = false});
  ASSERT_TRUE(ids.ok());
  ThreadPool pool(2);
  Rig r = load(*path, &pool, 512);
  PerplexityOptions o;
  o.n_ctx = 512;
  o.max_windows = 2;
  auto p = compute_perplexity(*r.model, r.cache, *ids, o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->scored_tokens, 510);
  EXPECT_NEAR(p->ppl, kGpl3Perplexity, 0.01 * kGpl3Perplexity);
  RecordProperty("perplexity", std::to_string(p->ppl));
}

}  // namespace
}  // namespace rinfer
