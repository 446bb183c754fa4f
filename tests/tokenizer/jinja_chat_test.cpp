// The models' own Jinja chat templates through minja, against Python's jinja2 rendering them as
// transformers' apply_chat_template does (tests/tools/gen_chat_template_goldens.py): tools, tool
// calls, tool replies; the content ranges stay exact through the template.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "golden_fixture.h"
#include "tokenizer/chat_template.h"

namespace rinfer {
namespace {

// Ordered: the tools' keys reach the template in the client's order.
const nlohmann::ordered_json& goldens() {
  static const nlohmann::ordered_json g = [] {
    std::ifstream f(test::test_data_path("tokenizer/chat_template_goldens.json"), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return nlohmann::ordered_json::parse(ss.str());
  }();
  return g;
}

std::vector<ChatMessage> messages_from(const nlohmann::ordered_json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) {
    ChatMessage msg;
    msg.role = m.at("role");
    if (m.contains("content") && m["content"].is_string()) msg.content = m["content"];
    if (m.contains("tool_call_id")) msg.tool_call_id = m["tool_call_id"];
    if (m.contains("tool_calls")) {
      for (const auto& c : m["tool_calls"]) {
        msg.tool_calls.push_back(
            {c.at("id"), c.at("function").at("name"), c.at("function").at("arguments").dump()});
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string_view range_text(const RenderedChat& r, size_t i) {
  return std::string_view(r.text).substr(r.content[i].begin, r.content[i].end - r.content[i].begin);
}

TEST(JinjaChat, RendersLikeJinja2WithToolsToolCallsAndToolReplies) {
  const nlohmann::ordered_json& g = goldens();
  ASSERT_GE(g.at("cases").size(), 10u);
  for (const auto& c : g.at("cases")) {
    const std::string label =
        c.at("template").get<std::string>() + " / " + c.at("name").get<std::string>();
    auto t = ChatTemplate::from_jinja(g.at("templates").at(c.at("template")).get<std::string>());
    ASSERT_TRUE(t.ok()) << label << ": " << t.status().to_string();
    EXPECT_EQ(t->name(), "jinja");
    const std::vector<ChatMessage> messages = messages_from(c.at("messages"));
    const std::string tools = c.at("tools").is_null() ? "" : c.at("tools").dump();
    auto r = t->render(messages, c.at("add_generation_prompt").get<bool>(), tools);
    ASSERT_TRUE(r.ok()) << label << ": " << r.status().to_string();
    EXPECT_EQ(r->text, c.at("expected").get<std::string>()) << label;
    // Every non-empty content is a range of the text, in order (these templates insert each
    // content once and verbatim).
    std::vector<std::string_view> contents;
    for (const ChatMessage& m : messages) {
      if (!m.content.empty()) contents.push_back(m.content);
    }
    std::vector<std::string_view> found;
    for (size_t i = 0; i < r->content.size(); ++i) found.push_back(range_text(*r, i));
    // Adjacent contents would merge into one range; none of these conversations has any.
    EXPECT_EQ(found, contents) << label;
  }
}

TEST(JinjaChat, QwenToolsAreNativeAndSmolLM2GetsThePreamble) {
  const nlohmann::ordered_json& g = goldens();
  auto qwen = ChatTemplate::from_jinja(g["templates"]["qwen2.5-coder"].get<std::string>());
  auto smol = ChatTemplate::from_jinja(g["templates"]["smollm2"].get<std::string>());
  ASSERT_TRUE(qwen.ok() && smol.ok());
  EXPECT_TRUE(qwen->native_tools());
  EXPECT_FALSE(smol->native_tools());
  EXPECT_TRUE(smol->renders_tools());
  EXPECT_EQ(qwen->default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const std::string tools =
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  const std::vector<ChatMessage> m = {{"user", "Weather?"}};
  auto r = smol->render(m, true, tools);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->text.find("get_weather"), std::string::npos) << r->text;
  ASSERT_EQ(r->content.size(), 1u);
  EXPECT_EQ(range_text(*r, 0), "Weather?");
}

// A template that changes content some other way (here: upper-cases it): the prompt keeps the
// template's markup with the content verbatim, so the range still holds exactly the user's text.
TEST(JinjaChat, ContentTheTemplateTransformsStaysExactlyTheUsersText) {
  auto t = ChatTemplate::from_jinja(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<ChatMessage> m = {{"user", "hi <|im_end|>"}};
  auto r = t->render(m).value();
  EXPECT_EQ(r.text, "<|im_start|>user\nhi <|im_end|><|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(r.content.size(), 1u);
  EXPECT_EQ(range_text(r, 0), "hi <|im_end|>");
  EXPECT_EQ(r.markers.size(), 2u);
}

TEST(JinjaChat, Errors) {
  auto bad = ChatTemplate::from_jinja("{% for m in messages %}{{ m.content }");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat template"), std::string::npos);
  // A template that raises (Gemma-style role checks) names the template's message.
  auto raises = ChatTemplate::from_jinja(
      "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no replies "
      "here') }}{% endif %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(raises.ok()) << raises.status().to_string();
  std::vector<ChatMessage> m = {{"user", "a"}, {"assistant", "b"}};
  auto r = raises->render(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no replies here"), std::string::npos)
      << r.status().message();
  // Tool-call arguments must be JSON; tools must be an array.
  m = {{"user", "a"}, {"assistant", "", {{"call_1", "f", "{not json"}}}};
  r = raises->render(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("arguments are not JSON"), std::string::npos);
  r = raises->render({{{"user", "a"}}}, true, R"({"type":"function"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tools"), std::string::npos);
  // The families cannot render tools.
  auto chatml = ChatTemplate::from_name("chatml").value();
  r = chatml.render({{{"user", "a"}}}, true, "[]");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot render tools"), std::string::npos);
}

}  // namespace
}  // namespace rinfer
