// The models' own Jinja chat templates through minja, against Python's jinja2 rendering them as
// transformers' apply_chat_template does (tests/tools/gen_chat_template_goldens.py): tools, tool
// calls, tool replies; the content ranges stay exact through the template.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "formats/gguf.h"
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

// A golden's template, from its source: a reference model's GGUF or the templates kept beside
// minja; empty when the model is not in the cache.
std::string template_of(const std::string& source) {
  if (source.starts_with("minja:")) {
    std::ifstream f(std::string(RINFER_MINJA_TEMPLATES) + "/" + source.substr(6), std::ios::binary);
    EXPECT_TRUE(f.good()) << source << ": run scripts/install-minja.sh";
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  auto path = test::reference_model(source.substr(5));
  if (!path) return {};
  auto file = GgufFile::open(*path);
  if (!file.ok()) return {};
  return std::string(file->get_string("tokenizer.chat_template").value_or(""));
}

TEST(JinjaChat, RendersLikeJinja2WithToolsToolCallsAndToolReplies) {
  const nlohmann::ordered_json& g = goldens();
  ASSERT_GE(g.at("cases").size(), 15u);
  size_t ran = 0;
  for (const auto& c : g.at("cases")) {
    const std::string name = c.at("template").get<std::string>();
    const std::string label = name + " / " + c.at("name").get<std::string>();
    const std::string text = template_of(g.at("sources").at(name).get<std::string>());
    if (text.empty()) continue;  // the model is not in the cache
    auto t = ChatTemplate::from_jinja(text);
    ASSERT_TRUE(t.ok()) << label << ": " << t.status().to_string();
    EXPECT_EQ(t->name(), "jinja");
    const std::vector<ChatMessage> messages = messages_from(c.at("messages"));
    const std::string tools = c.at("tools").is_null() ? "" : c.at("tools").dump();
    auto r = t->render(messages, c.at("add_generation_prompt").get<bool>(), tools);
    ASSERT_TRUE(r.ok()) << label << ": " << r.status().to_string();
    EXPECT_EQ(r->text, c.at("expected").get<std::string>()) << label;
    ++ran;
    // Every non-empty content is a range of the text, in order: verbatim, trimmed (Llama 3.1's
    // system and user turns) or JSON-escaped (its tool replies).
    EXPECT_TRUE(r->content_tracked) << label;
    std::vector<std::string_view> contents;
    for (const ChatMessage& m : messages) {
      if (!m.content.empty()) contents.push_back(m.content);
    }
    // Adjacent contents would merge into one range; none of these conversations has any.
    ASSERT_EQ(r->content.size(), contents.size()) << label;
    for (size_t i = 0; i < contents.size(); ++i) {
      const std::string escaped = nlohmann::json(contents[i]).dump();
      const std::string_view got = range_text(*r, i);
      const std::string_view trimmed = contents[i].substr(
          contents[i].find_first_not_of(" \n"),
          contents[i].find_last_not_of(" \n") - contents[i].find_first_not_of(" \n") + 1);
      EXPECT_TRUE(got == contents[i] || got == trimmed ||
                  got == std::string_view(escaped).substr(1, escaped.size() - 2))
          << label << ": range " << i << " is '" << got << "'";
    }
  }
  EXPECT_GE(ran, 4u);  // Llama 3.1's are always there (scripts/install-minja.sh)
}

TEST(JinjaChat, QwenToolsAreNativeAndSmolLM2GetsThePreamble) {
  const nlohmann::ordered_json& g = goldens();
  const std::string qwen_text = template_of(g["sources"]["qwen2.5-coder"].get<std::string>());
  const std::string smol_text = template_of(g["sources"]["smollm2"].get<std::string>());
  if (qwen_text.empty() || smol_text.empty()) {
    GTEST_SKIP() << test::missing_model_message("qwen2.5-coder-1.5b-instruct-q4_k_m");
  }
  auto qwen = ChatTemplate::from_jinja(qwen_text);
  auto smol = ChatTemplate::from_jinja(smol_text);
  ASSERT_TRUE(qwen.ok() && smol.ok());
  EXPECT_EQ(qwen->tool_call_format(), ToolCallFormat::kHermes);
  EXPECT_EQ(smol->tool_call_format(), ToolCallFormat::kJson);
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

// A template that changes content some other way (here: upper-cases it): the prompt is the
// template's, and the content is marked as not tracked (the caller then refuses control-token
// text in messages).
TEST(JinjaChat, ContentTheTemplateTransformsIsMarkedUntracked) {
  auto t = ChatTemplate::from_jinja(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<ChatMessage> m = {{"user", "hi there"}};
  auto r = t->render(m).value();
  EXPECT_EQ(r.text, "<|im_start|>user\nHI THERE<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(r.content_tracked);
  EXPECT_TRUE(r.content.empty());
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
