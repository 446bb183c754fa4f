#include "server/openai_response.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"

namespace rinfer::server {

using nlohmann::ordered_json;

namespace {

std::string dump(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

ordered_json bytes_of(std::string_view s) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
ordered_json chat_logprobs(std::span<const TokenLogprob> lps) {
  ordered_json content = ordered_json::array();
  for (const TokenLogprob& t : lps) {
    ordered_json top = ordered_json::array();
    for (const auto& [tok, lp] : t.top) {
      top.push_back({{"token", token_display(tok)}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
    }
    content.push_back({{"token", token_display(t.token)},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
ordered_json completion_logprobs(std::span<const TokenLogprob> lps, int64_t offset) {
  ordered_json tokens = ordered_json::array(), values = ordered_json::array(),
               tops = ordered_json::array(), offsets = ordered_json::array();
  for (const TokenLogprob& t : lps) {
    tokens.push_back(token_display(t.token));
    values.push_back(t.logprob);
    ordered_json top = ordered_json::object();
    for (const auto& [tok, lp] : t.top) top[token_display(tok)] = lp;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.token.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

ordered_json finish_json(std::string_view finish) {
  return finish.empty() ? ordered_json(nullptr) : ordered_json(std::string(finish));
}

ordered_json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ordered_json head(const ResponseIds& ids, const char* object) {
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
}

// A choice's logprobs and finish_reason, set after its index, text or message.
void close_choice(ordered_json& choice, bool chat, std::span<const TokenLogprob> logprobs,
                  bool want_logprobs, std::string_view finish) {
  choice["logprobs"] = !want_logprobs ? ordered_json(nullptr)
                       : chat         ? chat_logprobs(logprobs)
                                      : completion_logprobs(logprobs, 0);
  choice["finish_reason"] = finish_json(finish);
}

}  // namespace

std::string token_display(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    size_t len = 1;
    if (unicode::decode_utf8(bytes, i, &len) < 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
    } else {
      out.append(bytes.substr(i, len));
    }
    i += len;
  }
  return out;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default: out += fmt::format("\\u{:04x}", c);
      }
      ++i;
      continue;
    }
    size_t len = 1;
    if (unicode::decode_utf8(s, i, &len) < 0) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  out += '"';
}

DeltaChunkWriter::DeltaChunkWriter(const ResponseIds& ids) {
  const bool chat = ids.endpoint == Endpoint::kChat;
  head_ = "data: {\"id\":";
  append_json_string(head_, ids.id);
  head_ += chat ? ",\"object\":\"chat.completion.chunk\"" : ",\"object\":\"text_completion\"";
  head_ += fmt::format(",\"created\":{},\"model\":", ids.created);
  append_json_string(head_, ids.model);
  head_ += ",\"choices\":[{\"index\":";
  mid_ = chat ? ",\"delta\":{\"content\":" : ",\"text\":";
  tail_ = chat ? "},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
               : ",\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}

std::string DeltaChunkWriter::operator()(int32_t index, std::string_view text) const {
  std::string out;
  out.reserve(head_.size() + mid_.size() + text.size() + tail_.size() + 16);
  out += head_;
  out += std::to_string(index);
  out += mid_;
  append_json_string(out, text);
  out += tail_;
  return out;
}

std::string stream_chunk(const ResponseIds& ids, int32_t index, std::string_view text,
                         std::span<const TokenLogprob> logprobs, bool want_logprobs,
                         std::string_view finish, bool first) {
  const bool chat = ids.endpoint == Endpoint::kChat;
  ordered_json choice;
  choice["index"] = index;
  if (chat) {
    ordered_json delta = ordered_json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish.empty())) delta["content"] = std::string(text);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = std::string(text);
  }
  close_choice(choice, chat, logprobs, want_logprobs, finish);
  ordered_json j = head(ids, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ordered_json::array({std::move(choice)});
  return fmt::format("data: {}\n\n", dump(j));
}

namespace {

ordered_json tool_call_json(const ParsedToolCall& c) {
  return {{"id", c.id},
          {"type", "function"},
          {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

std::string stream_tool_calls(const ResponseIds& ids, int32_t index,
                              std::span<const ParsedToolCall> calls, size_t first_index,
                              bool first) {
  ordered_json list = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    ordered_json c = {{"index", first_index + i}};
    c.update(tool_call_json(calls[i]));
    list.push_back(std::move(c));
  }
  ordered_json delta = ordered_json::object();
  if (first) delta["role"] = "assistant";
  delta["tool_calls"] = std::move(list);
  ordered_json choice = {{"index", index}, {"delta", std::move(delta)}};
  close_choice(choice, true, {}, false, "");
  ordered_json j = head(ids, "chat.completion.chunk");
  j["choices"] = ordered_json::array({std::move(choice)});
  return fmt::format("data: {}\n\n", dump(j));
}

std::string stream_usage(const ResponseIds& ids, const Usage& usage) {
  ordered_json j =
      head(ids, ids.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ordered_json::array();
  j["usage"] = usage_json(usage);
  return fmt::format("data: {}\n\n", dump(j));
}

std::string stream_error(const ApiError& e) { return fmt::format("data: {}\n\n", e.to_json()); }

std::string full_response(const ResponseIds& ids, std::span<const ChoiceText> choices,
                          bool want_logprobs, const Usage& usage) {
  const bool chat = ids.endpoint == Endpoint::kChat;
  ordered_json list = ordered_json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceText& c = choices[i];
    ordered_json choice;
    choice["index"] = i;
    if (chat) {
      ordered_json message = {{"role", "assistant"}, {"content", std::string(c.text)}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        ordered_json calls = ordered_json::array();
        for (const ParsedToolCall& t : c.tool_calls) calls.push_back(tool_call_json(t));
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = std::string(c.text);
    }
    close_choice(choice, chat, c.logprobs, want_logprobs, c.finish);
    list.push_back(std::move(choice));
  }
  ordered_json j = head(ids, chat ? "chat.completion" : "text_completion");
  j["choices"] = std::move(list);
  j["usage"] = usage_json(usage);
  return dump(j);
}

}  // namespace rinfer::server
