#include "formats/hf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace rinfer {
namespace {

using nlohmann::json;

constexpr const char* kName = "config.json";

// Llama 3.2 1B's config.json (abridged: some generation keys dropped).
constexpr const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 128256
})";

// bert-base-uncased.
constexpr const char* kBertConfig = R"({
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "type_vocab_size": 2,
  "vocab_size": 30522
})";

// The smallest config that parses: every required key, nothing else.
json minimal() {
  return json{{"model_type", "llama"},    {"hidden_size", 512},
              {"num_hidden_layers", 4},   {"intermediate_size", 1024},
              {"num_attention_heads", 8}, {"max_position_embeddings", 2048},
              {"vocab_size", 1000},       {"rms_norm_eps", 1e-6}};
}

Result<HfConfig> parse(const json& j) { return parse_hf_config(j.dump(), kName); }

testing::AssertionResult fails_with(const Result<HfConfig>& r,
                                    std::initializer_list<std::string_view> substrings,
                                    const std::string& prefix = kName) {
  if (r.ok()) return testing::AssertionFailure() << "parsed OK, expected an error";
  const std::string& m = r.status().message();
  if (!m.starts_with(prefix)) {
    return testing::AssertionFailure() << "message does not start with '" << prefix << "': " << m;
  }
  for (auto s : substrings) {
    if (m.find(s) == std::string::npos) {
      return testing::AssertionFailure() << "message lacks '" << s << "': " << m;
    }
  }
  return testing::AssertionSuccess();
}

// minimal() with `key` set to `value`.
json with(const std::string& key, const json& value) {
  json j = minimal();
  j[key] = value;
  return j;
}

json without(const std::string& key) {
  json j = minimal();
  j.erase(key);
  return j;
}

TEST(HfConfig, LlamaStyle) {
  auto r = parse_hf_config(kLlamaConfig, kName);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const HfConfig& c = *r;
  EXPECT_EQ(c.architectures, (std::vector<std::string>{"LlamaForCausalLM"}));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_FALSE(c.absolute_positions);
  EXPECT_EQ(c.raw_json, kLlamaConfig);
}

TEST(HfConfig, Bert) {
  auto r = parse_hf_config(kBertConfig, kName);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const HfConfig& c = *r;
  EXPECT_EQ(c.model_type, "bert");
  EXPECT_EQ(c.architectures, (std::vector<std::string>{"BertForMaskedLM"}));
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_attention_heads, 12);
  EXPECT_EQ(c.num_key_value_heads, 12);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-12);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.absolute_positions);  // so `rinfer info` prints no rope base
  EXPECT_TRUE(c.tie_word_embeddings);  // the PretrainedConfig default
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(HfConfig, Defaults) {
  auto r = parse(minimal());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->architectures.empty());
  EXPECT_EQ(r->num_key_value_heads, 8);  // = num_attention_heads
  EXPECT_EQ(r->head_dim, 64);            // = hidden_size / num_attention_heads
  EXPECT_DOUBLE_EQ(r->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(r->norm_eps, 1e-6);
  EXPECT_FALSE(r->tie_word_embeddings);  // llama defaults to untied
  EXPECT_EQ(r->torch_dtype, "");
  EXPECT_FALSE(r->sliding_window.has_value());

  auto gemma = parse(with("model_type", "gemma"));
  ASSERT_TRUE(gemma.ok());
  EXPECT_TRUE(gemma->tie_word_embeddings);
  auto untied = parse(with("tie_word_embeddings", false));
  ASSERT_TRUE(untied.ok());
  EXPECT_FALSE(untied->tie_word_embeddings);

  // Null optional keys count as absent.
  json nulls = minimal();
  nulls["head_dim"] = nullptr;
  nulls["num_key_value_heads"] = nullptr;
  nulls["sliding_window"] = nullptr;
  nulls["torch_dtype"] = nullptr;
  auto n = parse(nulls);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->head_dim, 64);
  EXPECT_EQ(n->num_key_value_heads, 8);
  EXPECT_FALSE(n->sliding_window.has_value());
}

TEST(HfConfig, ExplicitHeadDimNeedNotDivideHidden) {
  // Gemma 3 270M: 640 / 4 heads would be 160, but head_dim is 256.
  json j = minimal();
  j["hidden_size"] = 640;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 256;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->head_dim, 256);
  EXPECT_EQ(r->num_key_value_heads, 1);
  j["hidden_size"] = 650;  // not divisible by 4, fine with an explicit head_dim
  EXPECT_TRUE(parse(j).ok());
}

TEST(HfConfig, AlternateKeys) {
  json j = without("rms_norm_eps");
  j["layer_norm_epsilon"] = 1e-5;
  j["dtype"] = "float16";
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->norm_eps, 1e-5);
  EXPECT_EQ(r->torch_dtype, "float16");
  EXPECT_DOUBLE_EQ(r->rope_theta, 1e6);
  // rms_norm_eps wins over layer_norm_eps, rope_theta over rope_parameters.
  j["rms_norm_eps"] = 1e-6;
  j["layer_norm_eps"] = 1e-12;
  j["rope_theta"] = 10000;  // an integer is a fine number
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(r->rope_theta, 10000.0);
}

TEST(HfConfig, SlidingWindow) {
  auto r = parse(with("sliding_window", 4096));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sliding_window, 4096);
  // Qwen2 lists a window but turns it off.
  json q = with("sliding_window", 32768);
  q["use_sliding_window"] = false;
  r = parse(q);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->sliding_window.has_value());
  q["use_sliding_window"] = true;
  r = parse(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sliding_window, 32768);
}

TEST(HfConfig, MissingRequiredKeys) {
  for (const char* key : {"model_type", "hidden_size", "num_hidden_layers", "intermediate_size",
                          "num_attention_heads", "max_position_embeddings", "vocab_size"}) {
    const std::string expect = std::string("missing required key '") + key + "'";
    EXPECT_TRUE(fails_with(parse(without(key)), {expect})) << key;
  }
  EXPECT_TRUE(fails_with(parse(without("rms_norm_eps")),
                         {"missing required key 'rms_norm_eps'", "layer_norm_eps"}));
  EXPECT_TRUE(
      fails_with(parse(with("hidden_size", nullptr)), {"missing required key 'hidden_size'"}));
}

TEST(HfConfig, WrongTypes) {
  EXPECT_TRUE(fails_with(parse(with("hidden_size", "2048")),
                         {"key 'hidden_size' is a string, expected an integer"}));
  EXPECT_TRUE(fails_with(parse(with("num_hidden_layers", 4.5)),
                         {"key 'num_hidden_layers' is a non-integer number, expected an integer"}));
  EXPECT_TRUE(
      fails_with(parse(with("vocab_size", 1000.0)), {"'vocab_size'", "expected an integer"}));
  EXPECT_TRUE(fails_with(parse(with("model_type", 3)),
                         {"key 'model_type' is an integer, expected a string"}));
  EXPECT_TRUE(fails_with(parse(with("rope_theta", "1e4")),
                         {"key 'rope_theta' is a string, expected a number"}));
  EXPECT_TRUE(fails_with(parse(with("rms_norm_eps", true)),
                         {"key 'rms_norm_eps' is a boolean, expected a number"}));
  EXPECT_TRUE(fails_with(parse(with("tie_word_embeddings", "true")),
                         {"key 'tie_word_embeddings' is a string, expected a boolean"}));
  EXPECT_TRUE(fails_with(parse(with("architectures", "LlamaForCausalLM")),
                         {"key 'architectures' is a string, expected an array of strings"}));
  EXPECT_TRUE(fails_with(parse(with("architectures", json::array({1}))),
                         {"key 'architectures' is an integer, expected an array of strings"}));
  EXPECT_TRUE(fails_with(parse(with("torch_dtype", 16)),
                         {"key 'torch_dtype' is an integer, expected a string"}));
  EXPECT_TRUE(fails_with(parse(with("sliding_window", json::array())),
                         {"key 'sliding_window' is an array, expected an integer"}));
  EXPECT_TRUE(fails_with(parse(with("head_dim", json::object())),
                         {"key 'head_dim' is an object, expected an integer"}));
  EXPECT_TRUE(fails_with(parse(with("rope_parameters", 5)),
                         {"key 'rope_parameters' is an integer, expected an object"}));
  EXPECT_TRUE(fails_with(parse(with("rope_parameters", {{"rope_theta", "x"}})),
                         {"config.json: rope_parameters: key 'rope_theta' is a string"}));
  EXPECT_TRUE(fails_with(parse(with("use_sliding_window", 1)),
                         {"key 'use_sliding_window' is an integer, expected a boolean"}));
}

TEST(HfConfig, BadValues) {
  EXPECT_TRUE(fails_with(parse(with("hidden_size", 0)), {"'hidden_size' must be positive, got 0"}));
  EXPECT_TRUE(fails_with(parse(with("num_hidden_layers", -2)),
                         {"'num_hidden_layers' must be positive, got -2"}));
  EXPECT_TRUE(fails_with(parse(with("num_key_value_heads", 0)),
                         {"'num_key_value_heads' must be positive"}));
  EXPECT_TRUE(fails_with(parse(with("head_dim", -64)), {"'head_dim' must be positive"}));
  EXPECT_TRUE(fails_with(parse(with("sliding_window", 0)), {"'sliding_window' must be positive"}));
  EXPECT_TRUE(fails_with(parse(with("vocab_size", 9223372036854775808ull)),
                         {"'vocab_size' = 9223372036854775808 is too large"}));
  EXPECT_TRUE(fails_with(parse(with("rope_theta", 0)), {"rope_theta must be a positive number"}));
  EXPECT_TRUE(fails_with(parse(with("rms_norm_eps", -1e-6)),
                         {"'rms_norm_eps' must be a non-negative number"}));
  json j = minimal();
  j["hidden_size"] = 100;
  j["num_attention_heads"] = 12;
  EXPECT_TRUE(fails_with(parse(j), {"hidden_size 100 is not divisible by num_attention_heads 12",
                                    "head_dim is absent"}));
  j = with("num_key_value_heads", 3);
  EXPECT_TRUE(
      fails_with(parse(j), {"num_attention_heads 8 is not a multiple of num_key_value_heads 3"}));
}

TEST(HfConfig, InvalidJson) {
  EXPECT_TRUE(
      fails_with(parse_hf_config(R"({"hidden_size": 2,})", kName), {"not valid JSON at byte 19"}));
  EXPECT_TRUE(fails_with(parse_hf_config("", kName), {"not valid JSON"}));
  EXPECT_TRUE(fails_with(parse_hf_config("{\"a\": \"\xff\"}", kName), {"not valid JSON", "\\xff"}));
  EXPECT_TRUE(
      fails_with(parse_hf_config("[1, 2]", kName), {"config is an array, expected a JSON object"}));
  EXPECT_TRUE(fails_with(parse_hf_config(R"({"a": 1e999})", kName), {"not valid JSON"}));
}

TEST(HfConfig, ReadFromFile) {
  const std::string path = test::write_temp_file("config.json", kBertConfig);
  auto r = read_hf_config(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->hidden_size, 768);
  EXPECT_EQ(r->raw_json, kBertConfig);

  const std::string bad = test::write_temp_file("bad_config.json", R"({"model_type": "bert"})");
  EXPECT_TRUE(fails_with(read_hf_config(bad), {"missing required key 'hidden_size'"}, bad));

  auto missing = read_hf_config("/nonexistent/config.json");
  EXPECT_TRUE(fails_with(missing, {"no such file"}, "/nonexistent/config.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(HfConfig, RealMiniLm) {
  const auto dir = test::reference_model("all-minilm-l6-v2");
  if (!dir) GTEST_SKIP() << test::missing_model_message("all-minilm-l6-v2");
  auto r = read_hf_config((std::filesystem::path(*dir) / "config.json").string());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model_type, "bert");
  EXPECT_EQ(r->hidden_size, 384);
  EXPECT_EQ(r->num_hidden_layers, 6);
  EXPECT_EQ(r->num_attention_heads, 12);
  EXPECT_EQ(r->head_dim, 32);
  EXPECT_EQ(r->intermediate_size, 1536);
  EXPECT_EQ(r->vocab_size, 30522);
  EXPECT_EQ(r->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(r->norm_eps, 1e-12);
}

}  // namespace
}  // namespace rinfer
