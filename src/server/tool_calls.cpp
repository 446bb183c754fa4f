#include "server/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "core/strings.h"

namespace rinfer::server {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

// {"name": ..., "arguments"|"parameters": {...} or a string of JSON} as a call, or false.
bool to_call(const ojson& j, ParsedToolCall* call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ojson a = ojson::object();
  if (args != j.end()) {
    a = *args;
    if (a.is_string()) a = ojson::parse(a.get<std::string>(), nullptr, false);
    if (!a.is_object()) return false;
  }
  call->id = call_id();
  call->name = name->get<std::string>();
  call->arguments = a.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return true;
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

// Trailing whitespace is held: if a call follows, it is not content.
// Whitespace right after a call is dropped too.
void ToolCallParser::emit(std::string_view text, Out& out) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    if (!after_call_) space_ += text;
    return;
  }
  if (after_call_) {
    text.remove_prefix(text.find_first_not_of(" \t\r\n"));
    after_call_ = false;
  }
  const size_t last = text.find_last_not_of(" \t\r\n");
  out.text += space_;
  out.text += text.substr(0, last + 1);
  space_ = text.substr(last + 1);
}

// `json`: {"name", "arguments"} or {"tool_calls": [...]}. With known_names_only, only calls of
// offered tools count (a reply that merely is JSON stays text).
bool ToolCallParser::call_from(std::string_view json, bool known_names_only, Out& out) {
  const ojson j = ojson::parse(trim_space(json), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  std::vector<ParsedToolCall> found;
  auto one = [&](const ojson& c) {
    ParsedToolCall call;
    if (!to_call(c, &call)) return false;
    if (known_names_only && std::find(names_.begin(), names_.end(), call.name) == names_.end()) {
      return false;
    }
    found.push_back(std::move(call));
    return true;
  };
  if (auto list = j.find("tool_calls"); list != j.end()) {
    if (!list->is_array() || list->empty()) return false;
    for (const ojson& c : *list) {
      if (!one(c)) return false;
    }
  } else if (!one(j)) {
    return false;
  }
  for (ParsedToolCall& c : found) out.calls.push_back(std::move(c));
  calls_ += static_cast<int>(found.size());
  space_.clear();  // whitespace before a call is not content
  after_call_ = true;
  return true;
}

void ToolCallParser::scan(Out& out) {
  while (true) {
    if (!in_call_) {
      const size_t open = pending_.find(kOpen);
      if (open == std::string::npos) {
        const size_t keep = partial_suffix(pending_, kOpen);
        emit(std::string_view(pending_).substr(0, pending_.size() - keep), out);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      emit(std::string_view(pending_).substr(0, open), out);
      pending_.erase(0, open + kOpen.size());
      in_call_ = true;
    }
    const size_t close = pending_.find(kClose);
    if (close == std::string::npos) return;
    const std::string body = pending_.substr(0, close);
    pending_.erase(0, close + kClose.size());
    in_call_ = false;
    if (!call_from(body, /*known_names_only=*/false, out)) {
      emit(std::string(kOpen) + body + std::string(kClose), out);  // not a call: text
    }
  }
}

ToolCallParser::Out ToolCallParser::feed(std::string_view delta) {
  Out out;
  pending_ += delta;
  if (lead_ == Lead::kUndecided) {
    // How the reply starts: JSON or a fence may be a whole-reply call (held), anything else is
    // text with possible <tool_call> blocks.
    const size_t b = pending_.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return out;
    const std::string_view t = std::string_view(pending_).substr(b);
    if (t[0] == '{') {
      lead_ = Lead::kJson;
    } else if (t.starts_with("```") || std::string_view("```").starts_with(t)) {
      const size_t eol = t.find('\n');
      const std::string_view line = trim_space(t.substr(0, eol));
      if (eol == std::string_view::npos) {
        if (std::string_view("```json").starts_with(line)) return out;  // the line is not whole
        lead_ = Lead::kText;
      } else if (line == "```" || line == "```json") {
        const std::string_view body = trim_space(t.substr(eol + 1));
        if (body.empty()) return out;
        lead_ = body[0] == '{' ? Lead::kFence : Lead::kText;
      } else {
        lead_ = Lead::kText;
      }
    } else {
      lead_ = Lead::kText;
    }
  }
  if (lead_ == Lead::kFence) {
    // The fence's end decides: a call, then text after it; or all of it text.
    const size_t open = pending_.find("```");
    const size_t body = pending_.find('\n', open);
    const size_t close = pending_.find("```", body);
    if (close == std::string::npos) return out;
    const std::string rest = pending_.substr(close + 3);
    if (call_from(std::string_view(pending_).substr(body + 1, close - body - 1), true, out)) {
      pending_ = rest;
    }
    lead_ = Lead::kText;
  }
  if (lead_ == Lead::kText) scan(out);
  return out;
}

ToolCallParser::Out ToolCallParser::finish() {
  Out out;
  switch (lead_) {
    case Lead::kJson:
      if (!call_from(pending_, true, out)) emit(pending_, out);
      break;
    case Lead::kFence: {  // the reply ended inside the fence
      const size_t body = pending_.find('\n');
      if (!call_from(std::string_view(pending_).substr(body + 1), true, out)) emit(pending_, out);
      break;
    }
    case Lead::kText:
      if (in_call_) {
        // The reply ended inside a call (a stop before the closing tag): a call if it parses.
        if (!call_from(pending_, false, out)) emit(std::string(kOpen) + pending_, out);
        in_call_ = false;
      } else {
        emit(pending_, out);
      }
      break;
    case Lead::kUndecided: emit(pending_, out); break;
  }
  pending_.clear();
  if (calls_ == 0) out.text += space_;
  space_.clear();
  return out;
}

GrammarSpec tool_call_grammar(ToolCallFormat format, const std::vector<FunctionTool>& tools,
                              const ToolChoice& choice) {
  ojson options = ojson::array();
  for (const FunctionTool& t : tools) {
    if (choice.kind == ToolChoice::Kind::kFunction && t.name != choice.function) continue;
    ojson call = {{"type", "object"},
                  {"properties",
                   {{"name", {{"const", t.name}}},
                    {"arguments", ojson::parse(t.parameters, nullptr, false)}}},
                  {"required", {"name", "arguments"}}};
    options.push_back(std::move(call));
  }
  ojson one = options.size() == 1 ? options[0] : ojson{{"anyOf", options}};
  GrammarSpec spec;
  spec.kind = GrammarSpec::Kind::kJsonSchema;
  spec.spaced = true;
  if (format == ToolCallFormat::kHermes) {
    spec.text = one.dump();
    spec.prefix = std::string(kOpen) + "\n";
    spec.suffix = "\n" + std::string(kClose);
  } else {
    ojson wrapper = {
        {"type", "object"},
        {"properties",
         {{"tool_calls", {{"type", "array"}, {"items", one}, {"minItems", 1}, {"maxItems", 1}}}}},
        {"required", {"tool_calls"}}};
    spec.text = wrapper.dump();
  }
  return spec;
}

}  // namespace rinfer::server
