// The Hugging Face (config.json + safetensors) loader of the Llama-family sample: a tiny random
// model written as an HF checkpoint and as the GGUF llama.cpp's converter makes from it (Wq/Wk
// permuted for the adjacent-pair RoPE) must give the same logits; bad checkpoints give errors
// naming the tensor or key.
#include <gtest/gtest.h>

#include <filesystem>

#include "core_logits.h"
#include "models/llama/llama_model.h"
#include "models/model.h"
#include "models/text_generation.h"
#include "tiny_hf_model.h"

namespace rinfer {
namespace {

using test::TinySpec;

const std::vector<int32_t> kIds = {1, 17, 299, 42, 0, 150, 7};  // 7 tokens

std::vector<float> logits_of(const std::string& path, cpu::Impl impl = cpu::Impl::kFast) {
  LoadOptions opts;
  opts.cpu.ops.impl = impl;
  auto m = load_decoder_model(path, opts);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  return test::core_logits(**m, kIds);
}

struct Case {
  const char* name;
  TinySpec spec;
  bool bf16;
  double tol;
};

class HfVsGgufTest : public ::testing::TestWithParam<Case> {};

TEST_P(HfVsGgufTest, SameLogits) {
  const Case& c = GetParam();
  const test::TinyWeights w = test::make_tiny_weights(c.spec, c.bf16);
  const std::string hf =
      test::write_hf_model(std::string("hf_") + c.name, w, test::tiny_config(c.spec), c.bf16);
  const std::string gguf = test::write_gguf_model(std::string("gguf_") + c.name, c.spec, w);

  for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
    const std::vector<float> a = logits_of(hf, impl), b = logits_of(gguf, impl);
    ASSERT_EQ(a.size(), kIds.size() * static_cast<size_t>(c.spec.n_vocab));
    ASSERT_EQ(a.size(), b.size());
    const double err = test::rel_l2(a, b);
    EXPECT_LT(err, c.tol) << c.name << (impl == cpu::Impl::kFast ? " fast" : " reference");
    // Not a trivial agreement: the logits vary (the model is random, not zeros).
    const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
    EXPECT_GT(*hi - *lo, 1.0f);
  }

  // The HF model as loaded: NeoX RoPE, stored dtype kept (zero-copy), tied as configured.
  auto m = llama::LlamaModel::load_hf(hf, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const DecoderHParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.architecture, c.spec.arch);
  EXPECT_EQ(hp.rope.mode, cpu::RopeMode::kNeox);
  EXPECT_EQ(hp.n_layer, c.spec.n_layer);
  EXPECT_EQ(hp.n_head_kv, c.spec.n_head_kv);
  EXPECT_EQ(hp.head_dim, c.spec.head_dim());
  EXPECT_EQ(hp.n_ctx_train, c.spec.n_ctx);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, static_cast<float>(c.spec.rope_theta));
  EXPECT_EQ(hp.tied_output, c.spec.tied);
  EXPECT_EQ(hp.attn_bias, c.spec.bias);
  const DType stored = c.bf16 ? DType::kBF16 : DType::kF32;
  EXPECT_EQ((*m)->tok_embd().dtype(), stored);
  EXPECT_EQ((*m)->layers()[1].wq.dtype(), stored);
  EXPECT_EQ((*m)->output_norm().dtype(), DType::kF32);  // vectors converted
  EXPECT_EQ((*m)->layers()[0].attn_norm.dtype(), DType::kF32);
  EXPECT_EQ((*m)->output().data(), c.spec.tied ? (*m)->tok_embd().data() : (*m)->output().data());
  if (!c.spec.tied) EXPECT_NE((*m)->output().data(), (*m)->tok_embd().data());
  EXPECT_NE((*m)->weight_source(), nullptr);
}

TinySpec spec(std::string arch, bool tied, bool bias, uint64_t seed) {
  TinySpec s;
  s.arch = std::move(arch);
  s.tied = tied;
  s.bias = bias;
  s.seed = seed;
  return s;
}

TinySpec with_rope(TinySpec s, double theta, double linear) {
  s.rope_theta = theta;
  s.rope_linear = linear;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, HfVsGgufTest,
    ::testing::Values(Case{"llama_untied_f32", spec("llama", false, false, 1), false, 1e-5},
                      Case{"llama_tied_f32", spec("llama", true, false, 2), false, 1e-5},
                      Case{"llama_untied_bf16", spec("llama", false, false, 3), true, 1e-5},
                      Case{"llama_tied_bf16", spec("llama", true, false, 4), true, 1e-5},
                      Case{"mistral_f32", spec("mistral", false, false, 5), false, 1e-5},
                      Case{"qwen2_bias_f32", spec("qwen2", false, true, 6), false, 1e-5},
                      Case{"qwen2_bias_tied_bf16", spec("qwen2", true, true, 7), true, 1e-5},
                      Case{"llama_theta_linear", with_rope(spec("llama", false, false, 8), 5e5, 2),
                           false, 1e-5}),
    [](const auto& info) { return std::string(info.param.name); });

// The permutation is what makes them equal: the same unpermuted weights in a qwen2 GGUF (NeoX,
// no permutation) agree too, but a llama GGUF without the permutation (normal pairing on HF rows,
// what a loader that forgot NeoX would compute) does not.
TEST(HfLoader, PermutationIsWhatMakesThemEqual) {
  const TinySpec s = spec("llama", false, false, 11);
  const test::TinyWeights w = test::make_tiny_weights(s, false);
  const std::vector<float> hf =
      logits_of(test::write_hf_model("perm_hf", w, test::tiny_config(s), false));
  TinySpec as_qwen = s;
  as_qwen.arch = "qwen2";
  EXPECT_LT(test::rel_l2(hf, logits_of(test::write_gguf_model("perm_qwen", as_qwen, w))), 1e-5);
  const std::vector<float> wrong =
      logits_of(test::write_gguf_model("perm_none", s, w, /*permute_qk=*/false));
  EXPECT_GT(test::rel_l2(hf, wrong), 1e-2);
}

TEST(HfLoader, LoadsFromTheSafetensorsFileAndShardedIndex) {
  TinySpec s = spec("llama", false, false, 12);
  const test::TinyWeights w = test::make_tiny_weights(s, false);
  const std::string dir = test::write_hf_model("paths", w, test::tiny_config(s), false);
  const std::vector<float> ref = logits_of(dir);
  EXPECT_LT(test::rel_l2(logits_of(dir + "/model.safetensors"), ref), 1e-7);

  // Two shards and an index, as save_pretrained writes large models.
  const std::string sharded = test::fresh_dir("sharded");
  test::write_file(sharded + "/config.json", test::tiny_config(s).dump());
  test::TinyWeights a, b;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, t] : w) {
    const bool first = name.find("layers.1.") == std::string::npos;
    (first ? a : b)[name] = t;
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  test::write_file(sharded + "/model-00001-of-00002.safetensors",
                   test::safetensors_bytes(a, false));
  test::write_file(sharded + "/model-00002-of-00002.safetensors",
                   test::safetensors_bytes(b, false));
  test::write_file(sharded + "/model.safetensors.index.json",
                   nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  EXPECT_LT(test::rel_l2(logits_of(sharded), ref), 1e-7);
}

// ---- errors -----------------------------------------------------------------------------------

std::string load_error(const std::string& path) {
  auto m = load_model(path, LoadOptions{});
  return m.ok() ? std::string("loaded") : m.status().message();
}

std::string model_with(const std::string& name, const test::TinyWeights& w,
                       const nlohmann::json& cfg) {
  return test::write_hf_model(name, w, cfg, false);
}

class HfErrors : public ::testing::Test {
 protected:
  TinySpec s_ = spec("llama", false, false, 21);
  test::TinyWeights w_ = test::make_tiny_weights(s_, false);
  nlohmann::json cfg_ = test::tiny_config(s_);
};

TEST_F(HfErrors, MissingTensorIsNamedWithItsShape) {
  w_.erase("model.layers.1.mlp.up_proj.weight");
  const std::string msg = load_error(model_with("missing", w_, cfg_));
  EXPECT_NE(msg.find("tensor 'model.layers.1.mlp.up_proj.weight' is missing (expected shape "
                     "[96, 64])"),
            std::string::npos)
      << msg;
}

TEST_F(HfErrors, WrongShapeNamesExpectedAndActual) {
  w_["model.layers.0.self_attn.k_proj.weight"] = w_["model.layers.0.self_attn.q_proj.weight"];
  const std::string msg = load_error(model_with("shape", w_, cfg_));
  EXPECT_NE(msg.find("model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has "
                     "shape [64, 64], expected [32, 64]"),
            std::string::npos)
      << msg;
}

TEST_F(HfErrors, Qwen2NeedsItsBiases) {
  TinySpec q = spec("qwen2", false, true, 22);
  test::TinyWeights w = test::make_tiny_weights(q, false);
  w.erase("model.layers.0.self_attn.k_proj.bias");
  const std::string msg = load_error(model_with("qwen_bias", w, test::tiny_config(q)));
  EXPECT_NE(msg.find("'model.layers.0.self_attn.k_proj.bias' is missing (expected shape [32])"),
            std::string::npos)
      << msg;
}

TEST_F(HfErrors, UnusedTensorIsAnError) {
  w_["model.layers.0.self_attn.o_proj.bias"] = test::TinyTensor{{64}, std::vector<float>(64, 0.5f)};
  const std::string msg = load_error(model_with("unused", w_, cfg_));
  EXPECT_NE(msg.find("tensor 'model.layers.0.self_attn.o_proj.bias' [64] is not used"),
            std::string::npos)
      << msg;
}

TEST_F(HfErrors, UnsupportedRopeScalingIsNamed) {
  cfg_["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  const std::string msg = load_error(model_with("llama3_rope", w_, cfg_));
  EXPECT_NE(msg.find("config.json: rope_scaling type 'llama3' is not supported (none, linear)"),
            std::string::npos)
      << msg;
  cfg_["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  const std::string msg2 = load_error(model_with("yarn_rope", w_, cfg_));
  EXPECT_NE(msg2.find("rope_scaling type 'yarn' is not supported"), std::string::npos) << msg2;
}

TEST_F(HfErrors, BadConfigJson) {
  const std::string dir = model_with("bad_json", w_, cfg_);
  test::write_file(dir + "/config.json", "{\"hidden_size\": 64,");
  std::string msg = load_error(dir);
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("loaded"), std::string::npos);

  cfg_.erase("num_attention_heads");
  msg = load_error(model_with("no_heads", w_, cfg_));
  EXPECT_NE(msg.find("num_attention_heads"), std::string::npos) << msg;

  cfg_ = test::tiny_config(s_);
  cfg_["architectures"] = {"GPT2LMHeadModel"};
  msg = load_error(model_with("gpt2", w_, cfg_));
  // The registry finds no sample for it (config.json's model_type and architectures named).
  EXPECT_NE(msg.find("no model sample"), std::string::npos) << msg;
  EXPECT_NE(msg.find("architectures [GPT2LMHeadModel]"), std::string::npos) << msg;

  cfg_ = test::tiny_config(s_);
  cfg_["vocab_size"] = 301;  // the embedding table has 300 rows
  msg = load_error(model_with("vocab", w_, cfg_));
  EXPECT_NE(msg.find("'model.embed_tokens.weight' has shape [300, 64], expected [301, 64]"),
            std::string::npos)
      << msg;

  cfg_ = test::tiny_config(s_);
  cfg_["mlp_bias"] = true;
  msg = load_error(model_with("mlp_bias", w_, cfg_));
  EXPECT_NE(msg.find("'mlp_bias': true is not supported"), std::string::npos) << msg;
}

TEST_F(HfErrors, MissingFiles) {
  const std::string dir = model_with("no_config", w_, cfg_);
  std::filesystem::remove(dir + "/config.json");
  std::string msg = load_error(dir + "/model.safetensors");
  EXPECT_NE(msg.find("no config.json"), std::string::npos) << msg;

  const std::string empty = test::fresh_dir("empty_dir");
  msg = load_error(empty);
  EXPECT_NE(msg.find("holds no model.safetensors"), std::string::npos) << msg;
}

// Text generation needs the tokenizer; without tokenizer.json the error says so (the decoder
// alone loads).
TEST_F(HfErrors, TextGenerationWithoutTokenizerIsAClearError) {
  const std::string dir = model_with("no_tokenizer", w_, cfg_);
  ASSERT_TRUE(load_decoder_model(dir, LoadOptions{}).ok());
  auto s = TextGenerationSample::load_model(dir, LoadOptions{}, "");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no tokenizer.json in '" + dir + "'"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace rinfer
