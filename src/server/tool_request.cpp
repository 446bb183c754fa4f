#include "server/tool_request.h"

#include <fmt/format.h>

#include <set>

namespace rinfer::server {

namespace {

using json = nlohmann::json;

ApiError bad(std::string param, std::string message) {
  return ApiError{400, std::move(message), std::move(param)};
}

// A function name as OpenAI allows it: [a-zA-Z0-9_-], at most 64 characters.
bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<ApiError> parse_tool_list(const json& tools, GenerationRequest* r) {
  if (!tools.is_array()) return bad("tools", "'tools': expected an array of tools");
  if (tools.size() > kMaxTools) {
    return bad("tools", fmt::format("'tools': {} tools; at most {}", tools.size(), kMaxTools));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object()) return bad(where, fmt::format("'{}': expected an object", where));
    auto type = t.find("type");
    if (type == t.end() || *type != "function") {
      return bad(where + ".type", fmt::format("'{}.type': expected \"function\"", where));
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) {
      return bad(where + ".function", fmt::format("'{}.function': expected an object", where));
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !valid_name(name->get<std::string>())) {
      return bad(where + ".function.name",
                 fmt::format("'{}.function.name': expected a name of letters, digits, '_' and "
                             "'-' (at most 64)",
                             where));
    }
    FunctionTool tool;
    tool.name = name->get<std::string>();
    if (!names.insert(tool.name).second) {
      return bad(where + ".function.name",
                 fmt::format("'{}.function.name': '{}' is offered twice", where, tool.name));
    }
    auto desc = fn->find("description");
    if (desc != fn->end() && !desc->is_string() && !desc->is_null()) {
      return bad(where + ".function.description",
                 fmt::format("'{}.function.description': expected a string", where));
    }
    auto params = fn->find("parameters");
    if (params == fn->end() || params->is_null()) {
      tool.parameters = R"({"type": "object", "properties": {}})";
    } else if (!params->is_object()) {
      return bad(
          where + ".function.parameters",
          fmt::format("'{}.function.parameters': expected a JSON schema (an object)", where));
    } else {
      tool.parameters = params->dump();
    }
    r->tools.push_back(std::move(tool));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_choice(const json& c, GenerationRequest* r) {
  if (c.is_string()) {
    const std::string s = c.get<std::string>();
    if (s == "none") {
      r->tool_choice.kind = ToolChoice::Kind::kNone;
    } else if (s == "auto") {
      r->tool_choice.kind = ToolChoice::Kind::kAuto;
    } else if (s == "required") {
      r->tool_choice.kind = ToolChoice::Kind::kRequired;
    } else {
      return bad(
          "tool_choice",
          fmt::format("'tool_choice': expected none, auto, required or "
                      "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got '{}'",
                      s));
    }
    return std::nullopt;
  }
  const json* fn = nullptr;
  if (c.is_object()) {
    auto f = c.find("function");
    if (c.value("type", "") == "function" && f != c.end() && f->is_object()) fn = &*f;
  }
  auto name = fn != nullptr ? fn->find("name") : json::const_iterator();
  if (fn == nullptr || name == fn->end() || !name->is_string()) {
    return bad("tool_choice",
               "'tool_choice': expected none, auto, required or {\"type\": \"function\", "
               "\"function\": {\"name\": ...}}");
  }
  r->tool_choice.kind = ToolChoice::Kind::kFunction;
  r->tool_choice.function = name->get<std::string>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_tools(const json& doc, std::string_view body, GenerationRequest* r) {
  if (auto fns = doc.find("functions"); fns != doc.end() && !(fns->is_array() && fns->empty())) {
    return bad("functions", "'functions' (the legacy form) is not supported: send 'tools'");
  }
  auto tools = doc.find("tools");
  const bool have = tools != doc.end() && !tools->is_null();
  if (have) {
    if (auto e = parse_tool_list(*tools, r)) return e;
  }
  r->tool_choice.kind = r->tools.empty() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
  if (auto c = doc.find("tool_choice"); c != doc.end() && !c->is_null()) {
    if (auto e = parse_choice(*c, r)) return e;
    if (r->tools.empty() && r->tool_choice.kind != ToolChoice::Kind::kNone) {
      return bad("tool_choice", "'tool_choice': no tools are given");
    }
  }
  if (r->tool_choice.kind == ToolChoice::Kind::kFunction) {
    bool found = false;
    for (const FunctionTool& t : r->tools) found = found || t.name == r->tool_choice.function;
    if (!found) {
      return bad("tool_choice",
                 fmt::format("'tool_choice': no tool is named '{}'", r->tool_choice.function));
    }
  }
  if (auto p = doc.find("parallel_tool_calls"); p != doc.end() && !p->is_null()) {
    if (!p->is_boolean())
      return bad("parallel_tool_calls", "'parallel_tool_calls': expected a boolean");
    r->parallel_tool_calls = p->get<bool>();
  }
  if (!r->tools.empty()) {
    // The tools again, their keys in the client's order (the body parsed once already).
    const auto ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (ordered.is_discarded() || !ordered.contains("tools")) {
      return bad("tools", "'tools': could not be read again in order");
    }
    r->tools_json = ordered["tools"].dump();
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tool_calls(const json& calls, const std::string& where,
                                         std::vector<ChatToolCall>* out) {
  if (!calls.is_array()) return bad(where, fmt::format("'{}': expected an array", where));
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string w = fmt::format("{}[{}]", where, i);
    if (!c.is_object()) return bad(w, fmt::format("'{}': expected an object", w));
    ChatToolCall call;
    if (auto id = c.find("id"); id != c.end()) {
      if (!id->is_string()) return bad(w + ".id", fmt::format("'{}.id': expected a string", w));
      call.id = id->get<std::string>();
    }
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) {
      return bad(w + ".function", fmt::format("'{}.function': expected an object", w));
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
      return bad(w + ".function.name", fmt::format("'{}.function.name': expected a string", w));
    }
    call.name = name->get<std::string>();
    auto args = fn->find("arguments");
    if (args == fn->end() || !args->is_string()) {
      return bad(w + ".function.arguments",
                 fmt::format("'{}.function.arguments': expected a string of JSON", w));
    }
    call.arguments = args->get<std::string>();
    const json parsed = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return bad(w + ".function.arguments",
                 fmt::format("'{}.function.arguments': expected a JSON object, as text", w));
    }
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

}  // namespace rinfer::server
