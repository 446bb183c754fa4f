// The model registry's table (models/registry.h): every family loads through it (the llama
// family from GGUF, from a Hugging Face checkpoint and from random:<shape>; bert and convnet from
// the packages' reference models when they are in the cache), sources nobody claims and tasks
// that do not match are errors that name what was read, and random-weight models are
// deterministic, finite and run by the engine core on the CPU.
#include "models/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/classifier.h"
#include "engine/embedder.h"
#include "engine/engine_core.h"
#include "engine/llm_engine.h"
#include "formats/model_info.h"
#include "core_logits.h"
#include "models/encoder.h"
#include "models/image_classifier.h"
#include "models/llama/shapes.h"
#include "recipe/recipe.h"
#include "test_util.h"
#include "tokenizer/wordpiece.h"
#include "tiny_hf_model.h"

namespace rinfer {
namespace {

const ModelFamily& family_named(std::string_view name) {
  for (const ModelFamily& f : model_families()) {
    if (f.name == name) return f;
  }
  ADD_FAILURE() << "no family " << name;
  return model_families().front();
}

ModelMetadata meta(std::string format, std::string arch, std::vector<std::string> classes = {}) {
  return ModelMetadata{std::move(format), std::move(arch), std::move(classes)};
}

TEST(ModelRegistry, EachFamilyClaimsItsMetadataAndNoOther) {
  ASSERT_EQ(model_families().size(), 3u);
  struct Case {
    ModelMetadata m;
    const char* family;  // nullptr: nobody
  };
  const Case cases[] = {
      {meta("gguf", "llama"), "llama"},
      {meta("gguf", "qwen2"), "llama"},
      {meta("gguf", "gemma3"), "llama"},
      {meta("gguf", "mistral"), "llama"},
      {meta("gguf", "mamba"), nullptr},
      {meta("gguf", "bert"), nullptr},
      {meta("safetensors", "llama", {"LlamaForCausalLM"}), "llama"},
      {meta("safetensors", "qwen2", {"Qwen2ForCausalLM"}), "llama"},
      {meta("safetensors", "llama", {"LlamaForSequenceClassification"}), nullptr},
      {meta("safetensors", "bert", {"BertModel"}), "bert"},
      {meta("safetensors", "t5", {"T5Model"}), nullptr},
      {meta("pytorch", ""), "convnet"},
      {meta("random", "llama3-8b"), "llama"},
      {meta("random", "smollm2"), "llama"},
      {meta("random", "tiny"), "llama"},
      {meta("random", "gpt-17"), nullptr},
      {meta("random", "resnet-50"), "convnet"},
      {meta("random", "minilm-l6"), "bert"},
      {meta("random", "bert-base"), "bert"},
      {meta("random", "resnet-51"), nullptr},
  };
  for (const Case& c : cases) {
    const ModelFamily* f = find_family(c.m);
    if (c.family == nullptr) {
      EXPECT_EQ(f, nullptr) << c.m.format << " " << c.m.architecture << " claimed by " << f->name;
    } else {
      ASSERT_NE(f, nullptr) << c.m.format << " " << c.m.architecture;
      EXPECT_EQ(f->name, c.family) << c.m.format << " " << c.m.architecture;
    }
  }
  EXPECT_EQ(family_named("llama").task, ModelTask::kTextGeneration);
  EXPECT_EQ(family_named("bert").task, ModelTask::kEmbedding);
  EXPECT_EQ(family_named("convnet").task, ModelTask::kClassification);
}

TEST(ModelRegistry, CheckTaskNamesTheFamilyOrTheTable) {
  EXPECT_TRUE(check_task(meta("gguf", "llama"), ModelTask::kTextGeneration).ok());
  const Status enc = check_task(meta("safetensors", "bert", {"BertModel"}),
                                ModelTask::kTextGeneration);
  EXPECT_EQ(enc.code(), StatusCode::kUnsupported);
  EXPECT_NE(enc.message().find("the bert family's models are for embedding, not text generation"),
            std::string::npos)
      << enc.message();
  const Status none = check_task(meta("gguf", "mamba"), ModelTask::kTextGeneration);
  EXPECT_NE(none.message().find("no model sample for architecture 'mamba'"), std::string::npos)
      << none.message();
  // The table is listed, each family with what it matches.
  for (const char* name : {"llama: GGUF llama", "bert: config.json model_type bert", "convnet: "}) {
    EXPECT_NE(none.message().find(name), std::string::npos) << none.message();
  }
  // rinfer info's verdict goes through the same table.
  ModelInfo info;
  info.format = "safetensors";
  info.architecture = "bert";
  info.classes = {"BertModel"};
  info.tokenizer = "wordpiece";
  EXPECT_FALSE(check_text_generation(info).ok());
  info.architecture = "llama";
  info.classes = {"LlamaForCausalLM"};
  EXPECT_TRUE(check_text_generation(info).ok()) << check_text_generation(info).message();
}

TEST(ModelRegistry, LoadsTheLlamaFamilyFromGgufAndHuggingFace) {
  auto gguf = load_model(test::test_data_path("llama/tiny_llama.gguf"), LoadOptions{});
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  EXPECT_EQ((*gguf)->task(), ModelTask::kTextGeneration);
  EXPECT_EQ((*gguf)->architecture(), "llama");

  auto gemma = load_model(test::test_data_path("gemma3/tiny_gemma3.gguf"), LoadOptions{});
  ASSERT_TRUE(gemma.ok()) << gemma.status().to_string();
  EXPECT_EQ((*gemma)->architecture(), "gemma3");

  test::TinySpec s;
  const std::string dir =
      test::write_hf_model("registry_hf", test::make_tiny_weights(s, false), test::tiny_config(s),
                           false);
  auto hf = load_model(dir, LoadOptions{});
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*hf)->task(), ModelTask::kTextGeneration);
  EXPECT_EQ(static_cast<DecoderModel&>(**hf).hparams().n_vocab, s.n_vocab);
}

TEST(ModelRegistry, LoadsTheBertAndConvnetFamiliesFromTheReferenceModels) {
  const char* bert = "all-minilm-l6-v2";
  const char* net = "mobilenet-v2";
  if (!test::reference_model(bert) || !test::reference_model(net)) {
    GTEST_SKIP() << test::missing_model_message(test::reference_model(bert) ? net : bert);
  }
  auto enc = load_model(*test::reference_model(bert), LoadOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  EXPECT_EQ((*enc)->task(), ModelTask::kEmbedding);
  EXPECT_TRUE(load_encoder_model(*test::reference_model(bert), LoadOptions{}).ok());

  // A state dict without the recipe's network description is refused with what to do.
  auto bare = load_model(*test::reference_model(net), LoadOptions{});
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("classifier.network"), std::string::npos)
      << bare.status().message();
  auto r = load_recipe(test::source_dir() + "/recipes/image-classification/" + net +
                       "/optimized.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  LoadOptions o;
  o.network = conv_net_spec(r->classifier.network);
  auto cls = load_model(*test::reference_model(net), o);
  ASSERT_TRUE(cls.ok()) << cls.status().to_string();
  EXPECT_EQ((*cls)->task(), ModelTask::kClassification);
  EXPECT_EQ(static_cast<ImageClassifierModel&>(**cls).n_classes(), 1000);
  // The task-specific loaders refuse another task's model.
  auto wrong = load_decoder_model(*test::reference_model(bert), LoadOptions{});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("cannot generate text"), std::string::npos);
}

// random:resnet-50 goes through the table to the convnet family (no file, no Python): with the
// recipe's network it is a 1000-class classifier; a dtype other than f32 is refused.
TEST(ModelRegistry, RandomResNet50LoadsThroughTheTable) {
  auto r = load_recipe(test::source_dir() + "/recipes/image-classification/resnet-50/"
                                            "optimized.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "random:resnet-50");
  LoadOptions o;
  o.network = conv_net_spec(r->classifier.network);
  auto cls = load_model("random:resnet-50", o);
  ASSERT_TRUE(cls.ok()) << cls.status().to_string();
  EXPECT_EQ((*cls)->task(), ModelTask::kClassification);
  EXPECT_EQ(static_cast<ImageClassifierModel&>(**cls).n_classes(), 1000);
  EXPECT_TRUE(load_model("random:resnet-50:f32", o).ok());
  auto q = load_model("random:resnet-50:q8_0", o);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("f32 weights"), std::string::npos) << q.status().message();
}

// random:minilm-l6 goes through the table to the bert family: all-MiniLM-L6-v2's shape, a
// synthetic WordPiece vocabulary of its size (BERT's special ids, characters as pieces), and an
// embedding recipe that embeds texts into finite unit vectors (the same ones every load).
TEST(ModelRegistry, RandomMiniLmEmbedsTextsThroughTheTable) {
  auto enc = load_encoder_model("random:minilm-l6", LoadOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const EncoderHParams& hp = (*enc)->hparams();
  EXPECT_EQ(hp.n_layer, 6);
  EXPECT_EQ(hp.n_embd, 384);
  EXPECT_EQ(hp.n_ff, 1536);
  EXPECT_EQ(hp.n_vocab, 30522);
  auto tok = WordPieceTokenizer::parse((*enc)->builtin_tokenizer_json(), "synthetic");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->vocab_size(), 30522);
  auto ids = (*tok)->encode("Hi!", 16);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->ids.size(), 5u);  // [CLS] h ##i ! [SEP]
  EXPECT_EQ(ids->ids.front(), 101);
  EXPECT_EQ(ids->ids.back(), 102);
  EXPECT_EQ((*tok)->piece(ids->ids[1]), "h");
  EXPECT_EQ((*tok)->piece(ids->ids[2]), "##i");
  auto q = load_model("random:minilm-l6:q8_0", LoadOptions{});
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("drawn in f32"), std::string::npos) << q.status().message();

  const std::string path = test::write_temp_file(
      "random_minilm.yaml",
      "model: random:minilm-l6\ndevice: cpu\nscenario: embedding\nstrategies:\n"
      "  threads: {count: 1}\n");
  auto recipe = load_recipe(path);
  ASSERT_TRUE(recipe.ok()) << recipe.status().to_string();
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    auto e = Embedder::create(*recipe);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    const std::vector<std::string> texts{"A man is eating food.", "The sky is blue."};
    auto v = (*e)->embed(texts);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    ASSERT_EQ(v->size(), 2u * 384u);
    for (int k = 0; k < 2; ++k) {
      double norm = 0;
      for (int i = 0; i < 384; ++i) {
        const float x = (*v)[static_cast<size_t>(k * 384 + i)];
        ASSERT_TRUE(std::isfinite(x));
        norm += double(x) * x;
      }
      EXPECT_NEAR(norm, 1.0, 1e-4);
    }
    EXPECT_NE(std::vector<float>(v->begin(), v->begin() + 384),
              std::vector<float>(v->begin() + 384, v->end()));
    runs.push_back(std::move(v).value());
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(ModelRegistry, UnclaimedSourcesAreNamedErrors) {
  // A GGUF of an architecture nobody handles.
  test::TinySpec s;
  s.arch = "mamba";
  const std::string p =
      test::write_gguf_model("registry_mamba", s, test::make_tiny_weights(s, false), false);
  auto m = load_model(p, LoadOptions{});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(m.status().message().find(p + ": no model sample for architecture 'mamba'"),
            std::string::npos)
      << m.status().message();
  // Random sources: an unknown shape, an unknown type.
  auto shape = load_model("random:gpt-17", LoadOptions{});
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("random shape 'gpt-17'"), std::string::npos)
      << shape.status().message();
  auto type = load_model("random:tiny:q9_9", LoadOptions{});
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("unknown weight type 'q9_9'"), std::string::npos)
      << type.status().message();
  // A file that is none of the formats.
  const std::string junk = test::write_temp_file("registry_junk.bin", "not a model at all");
  EXPECT_FALSE(load_model(junk, LoadOptions{}).ok());
}

// Logits of the last row of one forward pass over `tokens` on a fresh cache.
std::vector<float> last_logits(DecoderModel& m, const std::vector<int32_t>& tokens) {
  const std::vector<float> all = test::core_logits(m, tokens);
  const auto v = static_cast<std::ptrdiff_t>(m.hparams().n_vocab);
  if (all.size() < static_cast<size_t>(v)) return {};
  return std::vector<float>(all.end() - v, all.end());
}

TEST(ModelRegistry, RandomShapesLoadOnTheCpuDeterministically) {
  auto hp = llama::named_shape("tiny");
  ASSERT_TRUE(hp.ok());
  const std::vector<int32_t> tokens = {3, 141, 59, 265, 358, 97};
  std::vector<float> first;
  for (const char* src : {"random:tiny:f32", "random:tiny:f32", "random:tiny", "random:tiny:q8_0"}) {
    auto m = load_decoder_model(src, LoadOptions{});
    ASSERT_TRUE(m.ok()) << src << ": " << m.status().to_string();
    EXPECT_EQ((*m)->hparams().n_layer, hp->n_layer);
    EXPECT_EQ((*m)->hparams().n_vocab, hp->n_vocab);
    const std::vector<float> l = last_logits(**m, tokens);
    double norm = 0;
    for (float x : l) {
      ASSERT_TRUE(std::isfinite(x)) << src;
      norm += static_cast<double>(x) * x;
    }
    EXPECT_GT(norm, 1e-3) << src << ": the logits vary";
    if (first.empty()) {
      first = l;
      continue;
    }
    // The same seed gives the same weights; bf16 and q8_0 stay close to the f32 draw.
    double diff = 0, ref = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      diff += (l[i] - first[i]) * (l[i] - first[i]);
      ref += first[i] * first[i];
    }
    const double rel = std::sqrt(diff / ref);
    EXPECT_LT(rel, std::string(src) == "random:tiny:f32" ? 1e-7 : 0.05) << src;
  }
}

TEST(ModelRegistry, RandomRecipeRunsThroughTheEngineCoreWithIdsAsText) {
  const std::string path = test::write_temp_file(
      "registry_random.yaml",
      "scenario: llm-chat\nmodel: random:tiny:f32\ndevice: cpu\n"
      "sampling: {temperature: 0, seed: 1, max_tokens: 5}\n");
  auto r = load_recipe(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  LlmEngineOptions eo;
  auto e = LlmEngine::create(*r, eo);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_NE((*e)->core(), nullptr);
  EXPECT_EQ((*e)->sample().tokenizer(), nullptr);
  EXPECT_NE((*e)->describe().find("tokenizer none"), std::string::npos) << (*e)->describe();
  EXPECT_FALSE((*e)->sample().preprocess_raw("hello").ok());
  const std::vector<int32_t> prompt = {5, 6, 7};
  auto res = (*e)->generate(prompt, nullptr);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  ASSERT_EQ(res->tokens.size(), 5u);
  std::string want;
  for (int32_t t : res->tokens) want += "<" + std::to_string(t) + ">";
  EXPECT_EQ(res->text, want);

  // An unknown shape names the recipe's key.
  const std::string bad = test::write_temp_file(
      "registry_random_bad.yaml", "scenario: llm-chat\nmodel: random:nope\ndevice: cpu\n");
  auto rb = load_recipe(bad);
  ASSERT_TRUE(rb.ok());
  auto eb = LlmEngine::create(*rb, eo);
  ASSERT_FALSE(eb.ok());
  EXPECT_NE(eb.status().message().find("registry_random_bad.yaml:2"), std::string::npos)
      << eb.status().message();
}

}  // namespace
}  // namespace rinfer
