// The OpenAI request bodies: what parses, and the 400 that names the field for what does not.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace rinfer::server {
namespace {

std::string chat_msgs(const std::string& fields) {
  return std::string(R"({"messages": [{"role": "user", "content": "hi"}], )") + fields + "}";
}

GenerationRequest ok(const std::string& body, Endpoint ep = Endpoint::kChat) {
  auto r = parse_generation_request(body, ep);
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->message;
    return {};
  }
  return std::get<GenerationRequest>(r);
}

ApiError err(const std::string& body, Endpoint ep = Endpoint::kChat) {
  auto r = parse_generation_request(body, ep);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " parsed but should not";
  return {};
}

// `model` may be left out (the server then takes the one model of the endpoint's kind it
// serves); present, it must be a string.
TEST(OpenAiRequestTest, ModelMayBeLeftOut) {
  const GenerationRequest g = ok(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(g.model, "");
  auto e = parse_embedding_request(R"({"input": "hi"})");
  ASSERT_TRUE(std::holds_alternative<EmbeddingRequest>(e));
  EXPECT_EQ(std::get<EmbeddingRequest>(e).model, "");
  const ApiError bad = err(R"({"model": 3, "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(bad.param, "model");
}

TEST(OpenAiRequestTest, ParsesAChatRequestWithEveryField) {
  const GenerationRequest r = ok(R"({"model": "smol", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
      "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 10,
      "max_completion_tokens": 12, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.1,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": -3, "stop": ["\n", "END"],
      "logprobs": true, "top_logprobs": 3, "n": 1, "user": "ignored", "tools": []})");
  EXPECT_EQ(r.model, "smol");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 12);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(*r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*r.top_p, 0.9f);
  EXPECT_EQ(*r.top_k, 20);
  EXPECT_FLOAT_EQ(*r.min_p, 0.1f);
  EXPECT_FLOAT_EQ(*r.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(*r.frequency_penalty, -0.5f);
  EXPECT_EQ(*r.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(*r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
}

TEST(OpenAiRequestTest, ParsesCompletionPrompts) {
  GenerationRequest r = ok(R"({"model": "m", "prompt": "Once upon", "stop": "x", "logprobs": 2})",
                           Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once upon");
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(*r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  r = ok(R"({"model": "m", "prompt": ["one"]})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "one");
  r = ok(R"({"model": "m", "prompt": [1, 2, 3]})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(r.prompts[0].text.empty());
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.temperature.has_value());
}

TEST(OpenAiRequestTest, ParsesResponseFormatsAndGrammars) {
  GenerationRequest r = ok(chat_msgs(R"("response_format": {"type": "text"})"));
  EXPECT_FALSE(r.grammar.has_value());
  r = ok(chat_msgs(R"("response_format": {"type": "json_object"})"));
  ASSERT_TRUE(r.grammar.has_value());
  EXPECT_EQ(r.grammar->kind, GrammarSpec::Kind::kJsonObject);
  EXPECT_EQ(r.grammar_param, "response_format");
  r = ok(chat_msgs(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
      "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})"));
  ASSERT_TRUE(r.grammar.has_value());
  EXPECT_EQ(r.grammar->kind, GrammarSpec::Kind::kJsonSchema);
  EXPECT_EQ(nlohmann::json::parse(r.grammar->text)["properties"]["a"]["type"], "integer");
  r = ok(R"({"prompt": "x", "grammar": "root ::= \"yes\""})", Endpoint::kCompletion);
  ASSERT_TRUE(r.grammar.has_value());
  EXPECT_EQ(r.grammar->kind, GrammarSpec::Kind::kEbnf);
  EXPECT_EQ(r.grammar->text, "root ::= \"yes\"");
  EXPECT_EQ(r.grammar_param, "grammar");
}

TEST(OpenAiRequestTest, ParsesPromptBatchesAndChoices) {
  GenerationRequest r = ok(R"({"prompt": ["a", "bc", "d"], "n": 2})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[1].text, "bc");
  EXPECT_EQ(r.n, 2);
  r = ok(R"({"prompt": [[5, 6], [7]], "n": 64})", Endpoint::kCompletion);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{7}));
  r = ok(R"({"messages": [{"role": "user", "content": "hi"}], "n": 128})");
  EXPECT_EQ(r.n, 128);
}

struct Bad {
  std::string body;
  std::string param;
  std::string needle;
  Endpoint ep = Endpoint::kChat;
};

class OpenAiBadRequestTest : public ::testing::TestWithParam<Bad> {};

TEST_P(OpenAiBadRequestTest, Is400NamingTheField) {
  const Bad& b = GetParam();
  const ApiError e = err(b.body, b.ep);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, b.param) << e.message;
  EXPECT_NE(e.message.find(b.needle), std::string::npos) << e.message;
  // The error serializes to OpenAI's shape.
  EXPECT_NE(e.to_json().find(R"("error":{"message":)"), std::string::npos);
}

constexpr const char* kMsgs = R"("messages": [{"role": "user", "content": "hi"}])";

std::string chat(const std::string& fields) {
  return std::string(R"({"model": "m", )") + kMsgs + (fields.empty() ? "" : ", " + fields) + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Bodies, OpenAiBadRequestTest,
    ::testing::Values(
        Bad{"", "", "not valid JSON"}, Bad{"{", "", "not valid JSON"},
        Bad{"[1]", "", "must be a JSON object, got an array"},
        Bad{chat(R"("temperature": 1e400)"), "", "number overflow"},
        Bad{"{\"model\": \"m\xff\"}", "", "not valid UTF-8 (at byte 12)"},
        Bad{std::string(100, '[') + std::string(100, ']'), "", "nests deeper than 64"},
        Bad{R"({"model": 3})", "model", "'model': expected a string, got an integer"},
        Bad{R"({"model": "m"})", "messages", "'messages': missing"},
        Bad{R"({"model": "m", "messages": []})", "messages", "non-empty array"},
        Bad{R"({"model": "m", "messages": [3]})", "messages[0]", "expected an object"},
        Bad{R"({"model": "m", "messages": [{"role": "robot", "content": "x"}]})",
            "messages[0].role", "got 'robot'"},
        Bad{R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})",
            "messages[0].tool_call_id", "the id of the call"},
        Bad{R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content", "missing"},
        Bad{R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
            "messages[0].content[0].type", "text only"},
        Bad{chat(R"("temperature": "hot")"), "temperature", "expected a number, got a string"},
        Bad{chat(R"("temperature": 2.5)"), "temperature", "out of range"},
        Bad{chat(R"("top_p": 0)"), "top_p", "(0, 1]"},
        Bad{chat(R"("max_tokens": 0)"), "max_tokens", "out of range [1,"},
        Bad{chat(R"("max_tokens": 1.5)"), "max_tokens", "expected an integer"},
        Bad{chat(R"("max_tokens": 1e300)"), "max_tokens", "expected an integer"},
        Bad{chat(R"("max_tokens": 99999999999999999999)"), "max_tokens", "got 1e+20"},
        Bad{chat(R"("presence_penalty": -3)"), "presence_penalty", "out of range"},
        Bad{chat(R"("frequency_penalty": null, "stream": "yes")"), "stream",
            "expected true or false"},
        Bad{chat(R"("stop": 5)"), "stop", "a string or a list of strings"},
        Bad{chat(R"("stop": [""])"), "stop", "1 to 256 bytes"},
        Bad{chat(
                R"("stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])"),
            "stop", "at most 16"},
        Bad{chat(R"("n": 0)"), "n", "out of range [1, 128]"},
        Bad{chat(R"("n": 129)"), "n", "out of range [1, 128]"},
        Bad{R"({"prompt": ["a", "b", "c"], "n": 43})", "n", "3 prompts times n = 43 is 129",
            Endpoint::kCompletion},
        Bad{chat(R"("top_logprobs": 3)"), "top_logprobs", "needs \"logprobs\": true"},
        Bad{chat(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs", "out of range"},
        Bad{chat(R"("tools": [{"type": "function"}])"), "tools[0].function", "expected an object"},
        Bad{chat(R"("response_format": {"type": "json"})"), "response_format",
            "\"json\" is not supported (text, json_object and json_schema are)"},
        Bad{chat(R"("response_format": "json_object")"), "response_format",
            "expected an object, got a string"},
        Bad{chat(R"("response_format": {"type": "json_schema"})"), "response_format",
            "'response_format.json_schema': expected an object"},
        Bad{chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})"),
            "response_format",
            "'response_format.json_schema.schema': expected an object, got "
            "nothing"},
        Bad{chat(R"("grammar": "")"), "grammar", "expected an EBNF grammar"},
        Bad{chat(R"("grammar": "root ::= \"a\"", "response_format": {"type": "json_object"})"),
            "grammar", "give one"},
        Bad{chat(R"("logit_bias": {"1": 5})"), "logit_bias", "not supported"},
        Bad{chat(R"("stream_options": 1)"), "stream_options", "expected an object"},
        Bad{R"({"model": "m"})", "prompt", "'prompt': missing", Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": ""})", "prompt", "empty", Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": ["a", [1]]})", "prompt",
            "'prompt[1]': expected a string like prompt[0], got an array", Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": [[1], "a"]})", "prompt",
            "'prompt[1]': expected a list of token ids like prompt[0]", Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": ["a", ""]})", "prompt", "'prompt[1]': the prompt is empty",
            Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": [[1], []]})", "prompt",
            "'prompt[1]': expected a string or "
            "a list of token ids, got an empty list",
            Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": [1, -2]})", "prompt",
            "'prompt': expected a token id (an integer in [0, 2147483647]), got -2",
            Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": [[1], [2, "x"]]})", "prompt",
            "'prompt[1]': expected a "
            "token id",
            Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": "x", "echo": true, "logprobs": 1})", "echo",
            "with logprobs", Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": "x", "echo": 1})", "echo", "expected a boolean",
            Endpoint::kCompletion},
        Bad{R"({"model": "m", "prompt": "x", "logprobs": 50})", "logprobs", "out of range",
            Endpoint::kCompletion}));

}  // namespace
}  // namespace rinfer::server
