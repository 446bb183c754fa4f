// Structured output (engine/grammar.h over XGrammar): token sequences drawn from random logits
// through a grammar's masks always form text the grammar accepts (JSON that parses and
// validates, an EBNF language), with SmolLM2's real vocabulary; bad schemas and grammars are
// clear errors; and the engine core applies a constraint to a real model's greedy reply.
#include "engine/grammar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/llm_engine.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

constexpr const char* kModel = "smollm2-135m-instruct-q4_1";

// SmolLM2's tokenizer, loaded once (null without the model).
const Tokenizer* smollm2_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    auto path = test::reference_model(kModel);
    if (!path) return nullptr;
    auto t = Tokenizer::load(*path);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? std::move(t).value() : nullptr;
  }();
  return tok.get();
}

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green \"quoted\""]}},
    "score": {"type": "number"},
    "nested": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
  },
  "required": ["name", "age", "nested"]
})";

TEST(TokenMaskTest, ClearsExactlyTheTokensWhoseBitIsClear) {
  for (const size_t n : {1, 31, 32, 70, 1001}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::vector<uint32_t> bits(static_cast<size_t>(token_mask_words(static_cast<int64_t>(n))));
    for (uint32_t& w : bits) w = rng() % 3 == 0 ? 0xFFFFFFFFu : static_cast<uint32_t>(rng());
    std::vector<float> row(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      row[i] = 0.5f + static_cast<float>(rng() % 1000) / 100.0f;
      want[i] = ((bits[i / 32] >> (i % 32)) & 1u) != 0 ? row[i] : -INFINITY;
    }
    apply_token_mask(bits, row);
    EXPECT_EQ(row, want) << n;
  }
}

class GrammarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = smollm2_tokenizer();
    if (tok_ == nullptr) GTEST_SKIP() << test::missing_model_message(kModel);
    auto c = GrammarCompiler::create(*tok_, tok_->vocab_size());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    compiler_ = std::move(c).value();
  }

  // Draws tokens from random logits (biased towards the tokens that close strings, objects and
  // arrays, so replies end) through the constraint's masks until an end-of-generation token;
  // returns the text before it.
  std::string draw(const TokenConstraint& c, uint64_t seed) {
    auto state = c.start();
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(tok_->vocab_size()));
    std::vector<int32_t> ids;
    for (int step = 0; step < 3000; ++step) {
      for (size_t i = 0; i < row.size(); ++i) {
        const std::string_view t = tok_->token_text(static_cast<int32_t>(i));
        const bool closes = t.find_first_of("\"}],") != std::string_view::npos;
        row[i] = noise(rng) + (closes ? 4.0f : 0.0f);
      }
      // The bitmask the device path takes masks the row as the host path does.
      std::vector<uint32_t> bits(static_cast<size_t>(token_mask_words(tok_->vocab_size())));
      EXPECT_TRUE(state->fill(bits).ok());
      std::vector<float> via_bits = row;
      apply_token_mask(bits, via_bits);
      EXPECT_TRUE(state->mask(row).ok());
      EXPECT_EQ(std::memcmp(via_bits.data(), row.data(), row.size() * sizeof(float)), 0);
      const auto best = std::max_element(row.begin(), row.end()) - row.begin();
      const auto id = static_cast<int32_t>(best);
      EXPECT_TRUE(std::isfinite(row[static_cast<size_t>(id)])) << "no token allowed";
      EXPECT_TRUE(state->accept(id).ok());
      if (tok_->is_end_of_generation(id)) return tok_->decode(ids).value();
      ids.push_back(id);
    }
    ADD_FAILURE() << "no end after 3000 tokens: " << tok_->decode(ids).value();
    return {};
  }

  const Tokenizer* tok_ = nullptr;
  std::unique_ptr<GrammarCompiler> compiler_;
};

TEST_F(GrammarTest, RandomDrawsThroughASchemaAlwaysValidate) {
  auto c = compiler_->compile({GrammarSpec::Kind::kJsonSchema, kSchema});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const std::string text = draw(**c, seed);
    SCOPED_TRACE(text);
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object());
    for (const auto& [k, v] : j.items()) {
      EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "score" || k == "nested") << k;
    }
    ASSERT_TRUE(j.contains("name") && j.contains("age") && j.contains("nested"));
    EXPECT_TRUE(j["name"].is_string());
    EXPECT_TRUE(j["age"].is_number_integer());
    EXPECT_TRUE(j["nested"]["ok"].is_boolean());
    if (j.contains("score")) EXPECT_TRUE(j["score"].is_number());
    if (j.contains("tags")) {
      for (const auto& t : j["tags"]) {
        EXPECT_TRUE(t == "red" || t == "green \"quoted\"") << t;
      }
    }
  }
}

TEST_F(GrammarTest, JsonObjectAndEbnf) {
  auto obj = compiler_->compile({GrammarSpec::Kind::kJsonObject, ""});
  ASSERT_TRUE(obj.ok()) << obj.status().to_string();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::string text = draw(**obj, seed);
    EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_object()) << text;
  }
  auto yes_no =
      compiler_->compile({GrammarSpec::Kind::kEbnf, R"(root ::= "yes" | "no" | "maybe")"});
  ASSERT_TRUE(yes_no.ok()) << yes_no.status().to_string();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::string text = draw(**yes_no, seed);
    EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe") << text;
  }
  // The same grammar again comes from the cache.
  auto again = compiler_->compile({GrammarSpec::Kind::kEbnf, R"(root ::= "yes" | "no" | "maybe")"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), yes_no->get());
}

TEST_F(GrammarTest, BadSchemasAndGrammarsAreClearErrors) {
  auto s = compiler_->compile({GrammarSpec::Kind::kJsonSchema, R"({"type": "object", )"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("JSON schema"), std::string::npos) << s.status().message();
  auto t = compiler_->compile({GrammarSpec::Kind::kJsonSchema, R"({"type": "nope"})"});
  ASSERT_FALSE(t.ok());
  // XGrammar's words, without its time stamp and source location.
  EXPECT_EQ(t.status().message(), "the JSON schema is not usable: Unsupported type \"nope\"");
  auto g = compiler_->compile({GrammarSpec::Kind::kEbnf, "root ::= missing_rule"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("grammar does not parse"), std::string::npos)
      << g.status().message();
  // A state refuses a token its grammar does not allow, and a row of the wrong size.
  auto yes = compiler_->compile({GrammarSpec::Kind::kEbnf, R"(root ::= "yes")"});
  ASSERT_TRUE(yes.ok());
  auto st = (*yes)->start();
  const auto x = tok_->encode("x", {.add_special = false}).value();
  EXPECT_FALSE(st->accept(x[0]).ok());
  std::vector<float> short_row(10, 0.0f);
  EXPECT_FALSE(st->mask(short_row).ok());
}

TEST(GrammarEngineTest, TheEngineCoreConstrainsARealReply) {
  if (!test::reference_model(kModel)) GTEST_SKIP() << test::missing_model_message(kModel);
  auto recipe = load_recipe(test::source_dir() + "/recipes/llm-chat/smollm2-135m/optimized.yaml");
  ASSERT_TRUE(recipe.ok()) << recipe.status().to_string();
  recipe->sampling.temperature = 0.0f;
  recipe->max_tokens = 120;
  auto engine = LlmEngine::create(*recipe);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  LlmEngine& e = **engine;
  auto grammars = e.grammars();
  ASSERT_TRUE(grammars.ok()) << grammars.status().to_string();
  auto c = (*grammars)->compile({GrammarSpec::Kind::kJsonSchema, R"({
    "type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"]})"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::vector<ChatMessage> chat = {{"user", "Name the capital of France as JSON."}};
  auto prompt = e.sample().preprocess(chat);
  ASSERT_TRUE(prompt.ok());
  auto r = e.generate(*prompt, nullptr, nullptr, *c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->finish, FinishReason::kEndOfGeneration) << r->text;
  const auto j = nlohmann::json::parse(r->text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->text;
  EXPECT_TRUE(j["city"].is_string() && j["country"].is_string()) << r->text;
  EXPECT_EQ(j.size(), 2u) << r->text;
}

}  // namespace
}  // namespace rinfer
