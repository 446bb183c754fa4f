// Tool calls found in replies as they stream (every form, split at every byte), the grammar of a
// forced call, and the request's tool fields.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace rinfer::server {
namespace {

struct Parsed {
  std::string text;
  std::vector<ParsedToolCall> calls;
};

// The reply fed in pieces of `step` bytes.
Parsed parse(std::string_view reply, size_t step,
             std::vector<std::string> names = {"get_weather", "get_time"}) {
  ToolCallParser p(std::move(names));
  Parsed out;
  auto take = [&](ToolCallParser::Out o) {
    out.text += o.text;
    for (auto& c : o.calls) out.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < reply.size(); i += step) take(p.feed(reply.substr(i, step)));
  take(p.finish());
  return out;
}

struct Case {
  std::string reply;
  std::string text;                // what stays text
  std::vector<std::string> calls;  // name + " " + arguments
};

TEST(ToolCallParser, EveryFormAtEverySplit) {
  const std::vector<Case> cases = {
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>",
       "",
       {"get_weather {\"city\":\"Paris\"}"}},
      {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
       "</tool_call>",
       "Let me check.",
       {"get_weather {\"city\":\"Paris\"}", "get_time {}"}},
      // A stop before the closing tag still makes a call.
      {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}", "", {"get_time {}"}},
      // Arguments as a string of JSON, and "parameters" (Llama 3.x).
      {"<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}"
       "</tool_call>",
       "",
       {"get_time {\"tz\":\"UTC\"}"}},
      {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
       "",
       {"get_weather {\"city\":\"Oslo\"}"}},
      // A fenced call, as Qwen2.5-Coder writes one unasked; text after it stays.
      {"```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Rome\"}\n}\n```\n"
       "Done.",
       "Done.",
       {"get_weather {\"city\":\"Rome\"}"}},
      {"{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {}}]}", "", {"get_time {}"}},
      // Not calls: text, kept byte for byte.
      {"Plain text, no calls.\n", "Plain text, no calls.\n", {}},
      {"  {\"name\": \"rm_rf\", \"arguments\": {}}",
       "  {\"name\": \"rm_rf\", \"arguments\": {}}",
       {}},
      {"```python\nprint('{}')\n```", "```python\nprint('{}')\n```", {}},
      {"```json\n{\"a\": 1}\n```", "```json\n{\"a\": 1}\n```", {}},
      {"a <tool_call> b </tool_call> c", "a <tool_call> b </tool_call> c", {}},
      {"x <tool_ca", "x <tool_ca", {}},
      {"{\"partial\": ", "{\"partial\": ", {}},
  };
  for (const Case& c : cases) {
    for (size_t step = 1; step <= c.reply.size(); ++step) {
      const Parsed p = parse(c.reply, step);
      ASSERT_EQ(p.text, c.text) << c.reply << " (step " << step << ")";
      ASSERT_EQ(p.calls.size(), c.calls.size()) << c.reply << " (step " << step << ")";
      for (size_t i = 0; i < c.calls.size(); ++i) {
        EXPECT_EQ(p.calls[i].name + " " + p.calls[i].arguments, c.calls[i]) << c.reply;
        EXPECT_TRUE(p.calls[i].id.starts_with("call_")) << p.calls[i].id;
        EXPECT_EQ(p.calls[i].id.size(), 29u);
      }
    }
  }
}

TEST(ToolCallParser, TextStreamsAsItComes) {
  ToolCallParser p({"get_weather"});
  EXPECT_EQ(p.feed("Hello").text, "Hello");
  EXPECT_EQ(p.feed(" there <tool").text, " there");  // the opener's prefix is held
  EXPECT_EQ(p.feed("box> more").text, " <toolbox> more");
  // A code fence that is not JSON streams from its first line.
  ToolCallParser q({"get_weather"});
  EXPECT_EQ(q.feed("``").text, "");
  EXPECT_EQ(q.feed("`cpp\nint x;").text, "```cpp\nint x;");
}

TEST(ToolCallGrammar, OneCallInTheTemplatesFormat) {
  const std::vector<FunctionTool> tools = {
      {"get_weather", R"({"type":"object","properties":{"city":{"type":"string"}}})"},
      {"get_time", R"({"type":"object","properties":{}})"}};
  GrammarSpec g = tool_call_grammar(ToolCallFormat::kHermes, tools,
                                    ToolChoice{ToolChoice::Kind::kRequired, ""});
  EXPECT_EQ(g.kind, GrammarSpec::Kind::kJsonSchema);
  EXPECT_EQ(g.prefix, "<tool_call>\n");
  EXPECT_EQ(g.suffix, "\n</tool_call>");
  EXPECT_TRUE(g.spaced);
  auto schema = nlohmann::json::parse(g.text);
  ASSERT_EQ(schema["anyOf"].size(), 2u);
  EXPECT_EQ(schema["anyOf"][1]["properties"]["name"]["const"], "get_time");
  g = tool_call_grammar(ToolCallFormat::kJson, tools,
                        ToolChoice{ToolChoice::Kind::kFunction, "get_time"});
  EXPECT_TRUE(g.prefix.empty());
  schema = nlohmann::json::parse(g.text);
  EXPECT_EQ(schema["properties"]["tool_calls"]["items"]["properties"]["name"]["const"], "get_time");
  EXPECT_EQ(schema["properties"]["tool_calls"]["maxItems"], 1);
}

GenerationRequest request(const ApiResult<GenerationRequest>& r) {
  if (const auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<GenerationRequest>(r);
}

std::string error_of(const ApiResult<GenerationRequest>& r) {
  const auto* e = std::get_if<ApiError>(&r);
  return e == nullptr ? std::string("(no error)") : e->param + ": " + e->message;
}

TEST(ToolRequest, ToolsChoicesAndHistory) {
  const std::string body = R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "tool_choice": "required"})";
  const GenerationRequest r = request(parse_generation_request(body, Endpoint::kChat));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[1].content.empty());
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kRequired);
  // The tools keep the client's key order for the template.
  EXPECT_TRUE(r.tools_json.starts_with(
      R"([{"type":"function","function":{"name":"get_weather","description")"))
      << r.tools_json;
  // Defaults: auto with tools, none without.
  EXPECT_EQ(request(parse_generation_request(
                        R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type":
                        "function", "function": {"name": "f"}}]})",
                        Endpoint::kChat))
                .tool_choice.kind,
            ToolChoice::Kind::kAuto);
  EXPECT_EQ(request(parse_generation_request(R"({"messages": [{"role": "user", "content": "x"}]})",
                                             Endpoint::kChat))
                .tool_choice.kind,
            ToolChoice::Kind::kNone);
}

TEST(ToolRequest, ErrorsNameTheField) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string tool = R"({"type": "function", "function": {"name": "f"}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{" + user + R"(, "tools": {}})", "tools:"},
      {"{" + user + R"(, "tools": [{"type": "retrieval"}]})", "tools[0].type"},
      {"{" + user + R"(, "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {"{" + user + ", \"tools\": [" + tool + ", " + tool + "]}", "offered twice"},
      {"{" + user +
           R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})",
       "tools[0].function.parameters"},
      {"{" + user + ", \"tools\": [" + tool + R"(], "tool_choice": "always"})", "tool_choice"},
      {"{" + user + ", \"tools\": [" + tool +
           R"(], "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "no tool is named 'g'"},
      {"{" + user + R"(, "tool_choice": "required"})", "no tools are given"},
      {"{" + user + ", \"tools\": [" + tool +
           R"(], "tool_choice": "required", "response_format": {"type": "json_object"}})",
       "cannot be combined"},
      {"{" + user + R"(, "functions": [{"name": "f"}]})", "functions"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "tool_call_id"},
      {R"({"messages": [{"role": "assistant", "content": null}]})", "content"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
         "arguments": "not json"}}]}]})",
       "arguments"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
       "function.name"},
  };
  for (const auto& [body, want] : cases) {
    const std::string e = error_of(parse_generation_request(body, Endpoint::kChat));
    EXPECT_NE(e.find(want), std::string::npos) << body << "\n  -> " << e;
  }
}

}  // namespace
}  // namespace rinfer::server
