// The BERT sample on the CPU against sentence-transformers (PyTorch): the embeddings of 1,030
// varied inputs (tests/tools/ref_sentence_embeddings.py; 16 of them longer than the 256 tokens
// the model keeps), through the embedding engine with each dynamic batching policy, the fast and
// the reference kernels; and what it does with malformed model directories and batches.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "engine/embedder.h"
#include "minilm_reference.h"
#include "models/bert/bert_model.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = "all-minilm-l6-v2";

// Under the sanitizers (the debug preset, unoptimized SIMD) the encoder is some 30x slower: the
// checks there cover fewer inputs. Every input is checked in the optimized builds.
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
constexpr size_t kSlow = 12;
#else
constexpr size_t kSlow = 1;
#endif

using test::cosine;
using test::Reference;
using test::reference;

std::unique_ptr<Embedder> make_embedder(const std::string& strategies) {
  return test::make_minilm_embedder("cpu", strategies);
}

void expect_matches_reference(const std::string& strategies, size_t count, double min_cos) {
  test::expect_minilm_matches("cpu", strategies, count, min_cos);
}

#define REQUIRE_MODEL()                                  \
  if (!test::reference_model(kModel)) {                  \
    GTEST_SKIP() << test::missing_model_message(kModel); \
  }

TEST(BertSentenceTransformers, PackedBatchesMatchAllThousandInputs) {
  REQUIRE_MODEL();
  expect_matches_reference("{dynamic_batching: {policy: packed, max_seqs: 32}}",
                           kSlow == 1 ? 100000 : 80, 0.9999);
}

TEST(BertSentenceTransformers, PaddedBatchesMatch) {
  REQUIRE_MODEL();
  expect_matches_reference("{dynamic_batching: {policy: padded, max_seqs: 16}}", 400 / kSlow,
                           0.9999);
}

TEST(BertSentenceTransformers, OneAtATimeMatches) {
  REQUIRE_MODEL();
  expect_matches_reference("{dynamic_batching: {policy: single}}", 120 / kSlow, 0.9999);
}

TEST(BertSentenceTransformers, ReferenceKernelsMatch) {
  REQUIRE_MODEL();
  expect_matches_reference(
      "{kernels: {impl: reference}, threads: {count: 1}, dynamic_batching: {policy: packed}}",
      kSlow == 1 ? 24 : 2, 0.9999);
}

TEST(BertSentenceTransformers, Int8WeightsStayClose) {
  REQUIRE_MODEL();
  expect_matches_reference("{quantization: {weights: q8_0}, dynamic_batching: {policy: packed}}",
                           300 / kSlow, 0.995);
}

// bf16 matrices and activations (AMX tiles; their reference, the same bf16 values accumulated in
// double, runs anywhere): within the 0.999 that bf16 is held to on the GPU too.
TEST(BertSentenceTransformers, Bf16MatmulsStayClose) {
  REQUIRE_MODEL();
  expect_matches_reference(
      "{kernels: {impl: reference}, threads: {count: 1}, quantization: {activations: bf16}, "
      "dynamic_batching: {policy: packed}}",
      kSlow == 1 ? 24 : 2, 0.999);
  if (!cpu::amx_bf16_available()) {
    auto r = parse_recipe(
        "model: all-minilm-l6-v2\ndevice: cpu\nscenario: embedding\n"
        "strategies: {quantization: {activations: bf16}}\n",
        "amx.yaml");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto e = Embedder::create(*r);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().to_string().find("AMX-BF16"), std::string::npos) << e.status().to_string();
    return;
  }
  expect_matches_reference(
      "{quantization: {activations: bf16}, dynamic_batching: {policy: packed}}",
      kSlow == 1 ? 100000 : 80, 0.999);
}

TEST(BertBatching, PoliciesAgreeAndKeepInputOrder) {
  REQUIRE_MODEL();
  const Reference& ref = reference();
  const std::vector<std::string> texts(ref.texts.begin() + 500,
                                       ref.texts.begin() + (kSlow == 1 ? 600 : 530));
  auto packed = make_embedder("{dynamic_batching: {policy: packed, max_seqs: 7, max_tokens: 300}}");
  auto padded = make_embedder("{dynamic_batching: {policy: padded, max_seqs: 5}}");
  ASSERT_TRUE(packed && padded);
  EmbedStats sp, sd;
  auto a = packed->embed(texts, &sp);
  auto b = padded->embed(texts, &sd);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(sp.rows, sp.tokens);  // packed: no padding
  EXPECT_GT(sd.rows, sd.tokens);  // padded: some
  EXPECT_GE(sp.batches, static_cast<int64_t>(texts.size() / 7));
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_GE(cosine(a->data() + i * 384, b->data() + i * 384, 384), 0.999999) << i;
  }
}

TEST(BertBatching, EmptyTextsAndInvalidUtf8) {
  REQUIRE_MODEL();
  auto e = make_embedder("{dynamic_batching: {policy: packed}}");
  ASSERT_NE(e, nullptr);
  auto empty = e->embed(std::vector<std::string>{"", "hello"});
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  auto bad = e->embed(std::vector<std::string>{"fine", "also fine", "bad \xc3("});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("input 2"), std::string::npos) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("byte 4"), std::string::npos) << bad.status().to_string();
}

// A model directory made of the real one's files, with one of them replaced.
std::string model_dir_with(const std::string& name, const std::string& file,
                           const std::string& bytes) {
  const fs::path src = *test::reference_model(kModel);
  const fs::path dir = fs::path(test::write_temp_file(name + ".keep", "")).parent_path() / name;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "sentence_bert_config.json"}) {
    fs::copy_file(src / f, dir / f, fs::copy_options::overwrite_existing);
  }
  if (!fs::exists(dir / "model.safetensors")) {
    fs::create_symlink(src / "model.safetensors", dir / "model.safetensors");
  }
  if (!file.empty()) {
    fs::remove(dir / file);
    std::ofstream(dir / file, std::ios::binary) << bytes;
  }
  return dir.string();
}

Status load_error(const std::string& dir) {
  LoadOptions opts;
  auto m = load_encoder_model(dir, opts);
  return m.ok() ? ok_status() : m.status();
}

TEST(BertErrors, MalformedConfigsAreNamed) {
  REQUIRE_MODEL();
  std::string config;
  {
    std::ifstream f(*test::reference_model(kModel) + "/config.json");
    std::stringstream ss;
    ss << f.rdbuf();
    config = ss.str();
  }
  auto with = [&](const std::string& key, const std::string& value) {
    auto j = nlohmann::json::parse(config);
    if (value.empty()) {
      j.erase(key);
    } else {
      j[key] = nlohmann::json::parse(value);
    }
    return j.dump();
  };
  struct Case {
    std::string body, expect;
  };
  const Case cases[] = {
      {with("hidden_size", ""), "hidden_size"},
      {with("hidden_size", "1000000000"), "hidden_size"},
      {with("num_attention_heads", "7"), "not divisible by num_attention_heads 7"},
      {with("num_hidden_layers", "0"), "num_hidden_layers"},
      {with("vocab_size", "-5"), "vocab_size"},
      {with("type_vocab_size", ""), "type_vocab_size"},
      {with("hidden_act", "\"relu\""), "hidden_act"},
      {with("position_embedding_type", "\"relative_key\""), "position_embedding_type"},
      {with("intermediate_size", "1000"), "intermediate.dense.weight"},  // the shapes disagree
      {with("model_type", "\"t5\""), "no model sample for model_type 't5'"},
      {"{\"model_type\": \"bert\"", "config.json"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string dir =
        model_dir_with("bad_config_" + std::to_string(i++), "config.json", c.body);
    Status st = load_error(dir);
    ASSERT_FALSE(st.ok()) << c.body;
    EXPECT_NE(st.to_string().find(c.expect), std::string::npos)
        << st.to_string() << " (expected '" << c.expect << "')";
  }
}

TEST(BertErrors, TruncatedWeightsAndUnsupportedTokenizer) {
  REQUIRE_MODEL();
  std::string head(1 << 20, '\0');
  {
    std::ifstream f(*test::reference_model(kModel) + "/model.safetensors", std::ios::binary);
    f.read(head.data(), static_cast<std::streamsize>(head.size()));
  }
  Status st = load_error(model_dir_with("truncated", "model.safetensors", head));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("model.safetensors"), std::string::npos) << st.to_string();

  const std::string bpe = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  const std::string dir = model_dir_with("bpe_tokenizer", "tokenizer.json", bpe);
  auto r = parse_recipe("model: " + dir + "\ndevice: cpu\nscenario: embedding\n", "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto e = Embedder::create(*r);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("model type 'BPE'"), std::string::npos)
      << e.status().to_string();
  EXPECT_NE(e.status().message().find("tokenizer.json"), std::string::npos);
}

TEST(BertErrors, BadBatchesAreRefused) {
  REQUIRE_MODEL();
  LoadOptions opts;
  auto m = load_encoder_model(*test::reference_model(kModel), opts);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto runner = (*m)->create_runner({600});
  ASSERT_TRUE(runner.ok());
  std::vector<float> out(384 * 2);
  const PoolingOptions pool;
  const std::vector<int32_t> toks{101, 7592, 102}, starts{0, 3}, lens{3};
  EXPECT_TRUE((*runner)->embed({toks, {}, starts, lens}, pool, out.data()).ok());
  const std::vector<int32_t> bad_tok{101, 40000, 102};
  EXPECT_NE(
      (*runner)->embed({bad_tok, {}, starts, lens}, pool, out.data()).message().find("vocabulary"),
      std::string::npos);
  const std::vector<int32_t> long_lens{4};
  EXPECT_FALSE((*runner)->embed({toks, {}, starts, long_lens}, pool, out.data()).ok());
  const std::vector<int32_t> types{0, 2, 0};
  EXPECT_NE(
      (*runner)->embed({toks, types, starts, lens}, pool, out.data()).message().find("token type"),
      std::string::npos);
  std::vector<int32_t> many(513, 1000);
  const std::vector<int32_t> s513{0, 513}, l513{513};
  EXPECT_NE((*runner)->embed({many, {}, s513, l513}, pool, out.data()).message().find("positions"),
            std::string::npos);
  std::vector<int32_t> too_many(601, 1000);
  const std::vector<int32_t> s601{0, 601}, l601{601};
  EXPECT_NE(
      (*runner)->embed({too_many, {}, s601, l601}, pool, out.data()).message().find("max_rows"),
      std::string::npos);
}

}  // namespace
}  // namespace rinfer
