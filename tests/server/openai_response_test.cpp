// The bodies the server writes: the fast per-token chunk is byte for byte the JSON one, and the
// shapes of whole replies, usage and logprobs.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace rinfer::server {
namespace {

TEST(OpenAiResponseTest, TheFastDeltaChunkIsTheJsonOne) {
  for (Endpoint ep : {Endpoint::kChat, Endpoint::kCompletion}) {
    const ResponseIds ids{"chatcmpl-abc\"1", 1796000000, "org/model:v1", ep};
    const DeltaChunkWriter fast(ids);
    for (std::string text :
         {std::string("hello"), std::string(" \"quoted\" \\ back"),
          std::string("line\nbreak\ttab\r\b\f"), std::string("\x01\x1f\x7f"),
          std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string(1, '\0')}) {
      for (int32_t index : {0, 7, 127}) {
        EXPECT_EQ(fast(index, text), stream_chunk(ids, index, text, {}, false, "", false)) << text;
      }
    }
  }
}

TEST(OpenAiResponseTest, InvalidUtf8IsReplacedNotPassedOn) {
  std::string out;
  append_json_string(out,
                     "a\xff"
                     "b\xe2\x82");
  // Each byte that starts no valid sequence is one U+FFFD.
  EXPECT_EQ(out,
            "\"a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_FALSE(nlohmann::json::parse(out).get<std::string>().empty());
  EXPECT_EQ(token_display("\xe2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(OpenAiResponseTest, WholeRepliesCarryUsageAndLogprobs) {
  const ResponseIds ids{"cmpl-1", 5, "m", Endpoint::kCompletion};
  std::vector<TokenLogprob> lps = {{" a", -0.5f, {{" a", -0.5f}, {" b", -1.5f}}},
                                   {"b", -0.25f, {{"b", -0.25f}, {"c", -2.0f}}}};
  const ChoiceText two[] = {{" ab", lps, "length"}, {"zz", {}, "stop"}};
  auto j = nlohmann::json::parse(full_response(ids, two, true, {7, 2, 3}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], " ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], nlohmann::json({" a", "b"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], nlohmann::json({0, 2}));
  EXPECT_DOUBLE_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1]["c"], -2.0);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "zz");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["logprobs"]["tokens"], nlohmann::json::array());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);

  const ResponseIds chat{"chatcmpl-1", 5, "m", Endpoint::kChat};
  const ChoiceText one[] = {{"hi", lps, "stop"}};
  j = nlohmann::json::parse(full_response(chat, one, true, {1, 2, 0}));
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], nlohmann::json({32, 97}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][1]["top_logprobs"][1]["token"], "c");
  const std::string first = stream_chunk(chat, 3, "", {}, false, "", true);
  EXPECT_NE(first.find("\"index\":3,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"),
            std::string::npos)
      << first;
  const std::string usage = stream_usage(chat, {4, 5, 0});
  EXPECT_NE(usage.find("\"choices\":[],\"usage\":{\"prompt_tokens\":4"), std::string::npos)
      << usage;
}

}  // namespace
}  // namespace rinfer::server
