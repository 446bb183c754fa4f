#include "server/openai_request.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/tool_request.h"
#include "tokenizer/unicode.h"

namespace rinfer::server {

using nlohmann::json;

std::string ApiError::to_json() const {
  nlohmann::ordered_json e = {
      {"message", message},
      {"type", type},
      {"param", param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param)},
      {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)}};
  return nlohmann::ordered_json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

ApiError bad(std::string param, std::string message) {
  return ApiError{400, std::move(message), std::move(param)};
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unknown value";
  }
}

// Nesting deeper than kMaxJsonDepth, found before the parser builds it: the byte offset, or -1.
int64_t too_deep_at(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return static_cast<int64_t>(i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return -1;
}

// Reads the optional fields of one request object; the first error wins.
class Fields {
 public:
  explicit Fields(const json& o) : o_(o) {}
  const std::optional<ApiError>& error() const { return err_; }

  const json* get(const char* key) const {
    auto it = o_.find(key);
    if (it == o_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<float> number(const char* key, double lo, double hi) {
    const json* v = get(key);
    if (v == nullptr || err_) return std::nullopt;
    if (!v->is_number()) return fail(key, fmt::format("expected a number, got {}", type_name(*v)));
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi)) {
      return fail(key, fmt::format("{} is out of range: expected a number in [{}, {}]", d, lo, hi));
    }
    return static_cast<float>(d);
  }

  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) {
    const json* v = get(key);
    if (v == nullptr || err_) return std::nullopt;
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (d != std::floor(d) || !(d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) {
        return fail(key, fmt::format("expected an integer in [{}, {}], got {}", lo, hi, d));
      }
      return static_cast<int64_t>(d);
    }
    if (!v->is_number_integer()) {
      return fail(key, fmt::format("expected an integer, got {}", type_name(*v)));
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return fail(key, fmt::format("{} is out of range [{}, {}]", v->get<uint64_t>(), lo, hi));
    }
    const int64_t n = v->get<int64_t>();
    if (n < lo || n > hi) return fail(key, fmt::format("{} is out of range [{}, {}]", n, lo, hi));
    return n;
  }

  std::optional<bool> boolean(const char* key) {
    const json* v = get(key);
    if (v == nullptr || err_) return std::nullopt;
    if (!v->is_boolean())
      return fail(key, fmt::format("expected true or false, got {}", type_name(*v)));
    return v->get<bool>();
  }

  std::optional<std::string> string(const char* key) {
    const json* v = get(key);
    if (v == nullptr || err_) return std::nullopt;
    if (!v->is_string()) return fail(key, fmt::format("expected a string, got {}", type_name(*v)));
    return v->get<std::string>();
  }

  // A field the server cannot honour unless it has its neutral value.
  void refuse_unless(const char* key, bool neutral, const char* why) {
    if (err_ || get(key) == nullptr || neutral) return;
    err_ = bad(key, fmt::format("'{}' is not supported: {}", key, why));
  }

  std::nullopt_t fail(const char* key, std::string message) {
    if (!err_) err_ = bad(key, fmt::format("'{}': {}", key, message));
    return std::nullopt;
  }

 private:
  const json& o_;
  std::optional<ApiError> err_;
};

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::optional<ApiError> content_of(const json& c, const std::string& where, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) {
    return bad(where, fmt::format("'{}': expected a string or an array of text parts, got {}",
                                  where, type_name(c)));
  }
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string pw = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) {
      return bad(pw, fmt::format("'{}': expected an object, got {}", pw, type_name(part)));
    }
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return bad(pw + ".type", fmt::format("'{}.type': expected a string", pw));
    }
    if (*type != "text") {
      return bad(pw + ".type",
                 fmt::format("'{}.type': '{}' parts are not supported by this model (text only)",
                             pw, type->get<std::string>()));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return bad(pw + ".text", fmt::format("'{}.text': expected a string", pw));
    }
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& body, std::vector<ChatMessage>* out) {
  auto it = body.find("messages");
  if (it == body.end()) return bad("messages", "'messages': missing (required)");
  if (!it->is_array() || it->empty()) {
    return bad("messages", fmt::format("'messages': expected a non-empty array of messages, got {}",
                                       it->is_array() ? "an empty array" : type_name(*it)));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) {
      return bad(where, fmt::format("'{}': expected an object, got {}", where, type_name(m)));
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return bad(where + ".role", fmt::format("'{}.role': expected a string", where));
    }
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      return bad(where + ".role",
                 fmt::format("'{}.role': expected system, developer, user, assistant or tool, "
                             "got '{}'",
                             where, role->get<std::string>()));
    }
    if (msg.role == "assistant") {
      if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
        if (auto e = parse_tool_calls(*calls, where + ".tool_calls", &msg.tool_calls)) return e;
      }
    }
    if (msg.role == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string()) {
        return bad(
            where + ".tool_call_id",
            fmt::format("'{}.tool_call_id': expected the id of the call this answers", where));
      }
      msg.tool_call_id = id->get<std::string>();
    }
    if (auto name = m.find("name"); name != m.end() && name->is_string()) {
      msg.name = name->get<std::string>();
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant's turn that only calls tools has no content.
      if (!msg.tool_calls.empty()) {
        out->push_back(std::move(msg));
        continue;
      }
      return bad(where + ".content", fmt::format("'{}.content': missing (required)", where));
    }
    if (auto e = content_of(*content, where + ".content", &msg.content)) return e;
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

// One prompt: a string or a list of token ids. `where` names it in errors ("prompt",
// "prompt[2]").
std::optional<ApiError> one_prompt(const json& p, const std::string& where, PromptInput* out) {
  if (p.is_string()) {
    out->text = p.get<std::string>();
    if (out->text.empty()) return bad("prompt", fmt::format("'{}': the prompt is empty", where));
    return std::nullopt;
  }
  if (p.is_array() && !p.empty()) {
    for (const json& t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        return bad("prompt",
                   fmt::format("'{}': expected a token id (an integer in [0, {}]), got "
                               "{}",
                               where, INT32_MAX, t.is_number() ? t.dump() : type_name(t)));
      }
      out->ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return std::nullopt;
  }
  return bad("prompt", fmt::format("'{}': expected a string or a list of token ids, got {}", where,
                                   p.is_array() ? "an empty list" : type_name(p)));
}

// "prompt": a string, a list of token ids, a list of strings or a list of token-id lists.
std::optional<ApiError> parse_prompt(const json& body, GenerationRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end()) return bad("prompt", "'prompt': missing (required)");
  const json& p = *it;
  const bool batch = p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array());
  if (!batch) {
    r->prompts.emplace_back();
    return one_prompt(p, "prompt", &r->prompts.back());
  }
  if (static_cast<int64_t>(p.size()) > kMaxChoices) {
    return bad("prompt",
               fmt::format("'prompt': {} prompts; at most {} per request", p.size(), kMaxChoices));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string where = fmt::format("prompt[{}]", i);
    if (p[i].is_string() != p[0].is_string() || (!p[i].is_string() && !p[i].is_array())) {
      return bad("prompt", fmt::format("'{}': expected {} like prompt[0], got {}", where,
                                       p[0].is_string() ? "a string" : "a list of token ids",
                                       type_name(p[i])));
    }
    r->prompts.emplace_back();
    if (auto e = one_prompt(p[i], where, &r->prompts.back())) return e;
  }
  return std::nullopt;
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}}; or the `grammar` extension: an EBNF string.
std::optional<ApiError> parse_response_format(const json& body, GenerationRequest* r) {
  const auto rf = body.find("response_format");
  if (rf != body.end() && !rf->is_null()) {
    if (!rf->is_object()) {
      return bad("response_format",
                 fmt::format("'response_format': expected an object, got {}", type_name(*rf)));
    }
    const auto type = rf->find("type");
    if (type == rf->end() || !type->is_string()) {
      return bad("response_format",
                 "'response_format.type': expected \"text\", \"json_object\" or \"json_schema\"");
    }
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      r->grammar = GrammarSpec{GrammarSpec::Kind::kJsonObject, ""};
    } else if (t == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object()) {
        return bad("response_format",
                   "'response_format.json_schema': expected an object with the schema");
      }
      const auto schema = js->find("schema");
      if (schema == js->end() || !schema->is_object()) {
        return bad("response_format",
                   fmt::format("'response_format.json_schema.schema': expected an object, got {}",
                               schema == js->end() ? "nothing" : type_name(*schema)));
      }
      if (const auto name = js->find("name"); name != js->end() && !name->is_string()) {
        return bad("response_format", "'response_format.json_schema.name': expected a string");
      }
      r->grammar = GrammarSpec{GrammarSpec::Kind::kJsonSchema, schema->dump()};
    } else if (t != "text") {
      return bad("response_format",
                 fmt::format("'response_format.type': \"{}\" is not supported (text, json_object "
                             "and json_schema are)",
                             t));
    }
    r->grammar_param = "response_format";
  }
  const auto g = body.find("grammar");
  if (g != body.end() && !g->is_null()) {
    if (!g->is_string() || g->get<std::string>().empty()) {
      return bad("grammar", "'grammar': expected an EBNF grammar (a non-empty string)");
    }
    if (r->grammar) {
      return bad("grammar",
                 "'grammar' and a JSON response_format both constrain the reply: "
                 "give one");
    }
    r->grammar = GrammarSpec{GrammarSpec::Kind::kEbnf, g->get<std::string>()};
    r->grammar_param = "grammar";
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, GenerationRequest* r) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const json& s : *it) {
      if (!s.is_string()) {
        return bad("stop", fmt::format("'stop': expected strings, got {}", type_name(s)));
      }
      stop.push_back(s.get<std::string>());
    }
  } else {
    return bad("stop", fmt::format("'stop': expected a string or a list of strings, got {}",
                                   type_name(*it)));
  }
  if (stop.size() > kMaxStop) {
    return bad("stop", fmt::format("'stop': {} strings; at most {}", stop.size(), kMaxStop));
  }
  for (const std::string& s : stop) {
    if (s.empty() || s.size() > kMaxStopBytes) {
      return bad("stop", fmt::format("'stop': each string must have 1 to {} bytes", kMaxStopBytes));
    }
  }
  r->stop = std::move(stop);
  return std::nullopt;
}

// The body as a JSON object: valid UTF-8, nesting bounded, parsed, an object.
ApiResult<json> parse_body(std::string_view body) {
  size_t bad_at = 0;
  if (!unicode::is_valid_utf8(body, &bad_at)) {
    return bad("", fmt::format("the body is not valid UTF-8 (at byte {})", bad_at));
  }
  if (const int64_t at = too_deep_at(body); at >= 0) {
    return bad("",
               fmt::format("the body nests deeper than {} levels (at byte {})", kMaxJsonDepth, at));
  }
  json doc;
  try {
    doc = json::parse(body);            // the parser's message says where it failed
  } catch (const json::exception& e) {  // a syntax error, a number that overflows a double
    return bad("", fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) {
    return bad("", fmt::format("the body must be a JSON object, got {}", type_name(doc)));
  }
  return doc;
}

// One token-id input: an array of integers in [0, 2^31).
std::optional<ApiError> token_array(const json& a, const std::string& where,
                                    std::vector<int32_t>* out) {
  for (size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return bad("input", fmt::format("'{}[{}]': expected a token id (an integer >= 0), got {}",
                                      where, i, v.is_number_integer() ? v.dump() : type_name(v)));
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return std::nullopt;
}

}  // namespace

ApiResult<EmbeddingRequest> parse_embedding_request(std::string_view body) {
  auto parsed = parse_body(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& doc = std::get<json>(parsed);
  EmbeddingRequest r;
  Fields f(doc);
  auto model = f.string("model");
  auto format = f.string("encoding_format");
  auto dims = f.integer("dimensions", 1, 1 << 20);
  f.string("user");
  if (f.error()) return *f.error();
  r.model = model.value_or("");  // empty: the one embedding model served (Server)
  if (format && *format != "float" && *format != "base64") {
    return bad("encoding_format",
               fmt::format("'encoding_format': expected float or base64, got '{}'", *format));
  }
  r.base64 = format && *format == "base64";
  r.dimensions = dims;
  auto it = doc.find("input");
  if (it == doc.end() || it->is_null()) return bad("input", "'input': missing (required)");
  const json& in = *it;
  if (in.is_string()) {
    r.texts.push_back(in.get<std::string>());
    return r;
  }
  if (!in.is_array() || in.empty()) {
    return bad("input", fmt::format("'input': expected a string or a non-empty array, got {}",
                                    in.is_array() ? "an empty array" : type_name(in)));
  }
  if (in.size() > kMaxEmbeddingInputs) {
    return bad("input", fmt::format("'input': {} inputs; at most {} per request", in.size(),
                                    kMaxEmbeddingInputs));
  }
  if (in[0].is_number_integer()) {  // one input of token ids
    r.token_ids.emplace_back();
    if (auto e = token_array(in, "input", &r.token_ids.back())) return *e;
    return r;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const json& v = in[i];
    const std::string where = fmt::format("input[{}]", i);
    if (v.is_string() && r.token_ids.empty()) {
      r.texts.push_back(v.get<std::string>());
    } else if (v.is_array() && r.texts.empty()) {
      if (v.empty()) return bad("input", fmt::format("'{}': an empty token array", where));
      r.token_ids.emplace_back();
      if (auto e = token_array(v, where, &r.token_ids.back())) return *e;
    } else {
      return bad("input", fmt::format("'{}': expected {}, got {}", where,
                                      r.token_ids.empty() ? "a string" : "an array of token ids",
                                      type_name(v)));
    }
  }
  return r;
}

ApiResult<GenerationRequest> parse_generation_request(std::string_view body, Endpoint endpoint) {
  auto parsed = parse_body(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& doc = std::get<json>(parsed);
  GenerationRequest r;
  r.endpoint = endpoint;
  Fields f(doc);
  auto model = f.string("model");
  if (f.error()) return *f.error();
  r.model = model.value_or("");  // empty: the one text-generation model served (Server)

  if (endpoint == Endpoint::kChat) {
    if (auto e = parse_messages(doc, &r.messages)) return *e;
  } else {
    if (auto e = parse_prompt(doc, &r)) return *e;
  }
  if (auto e = parse_stop(doc, &r)) return *e;

  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) {
      f.fail("stream_options", fmt::format("expected an object, got {}", type_name(*so)));
    } else {
      Fields sf(*so);
      r.include_usage = sf.boolean("include_usage").value_or(false);
      if (sf.error()) return *sf.error();
    }
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  r.max_tokens = f.integer("max_tokens", 1, kMaxTokens);
  if (endpoint == Endpoint::kChat) {
    if (auto m = f.integer("max_completion_tokens", 1, kMaxTokens)) r.max_tokens = m;
  }
  r.temperature = f.number("temperature", 0.0, 2.0);
  r.top_p = f.number("top_p", 0.0, 1.0);
  if (r.top_p && *r.top_p <= 0.0f)
    f.fail("top_p", fmt::format("{} is out of range: expected a number in (0, 1]", *r.top_p));
  r.min_p = f.number("min_p", 0.0, 0.999999);
  r.presence_penalty = f.number("presence_penalty", -2.0, 2.0);
  r.frequency_penalty = f.number("frequency_penalty", -2.0, 2.0);
  r.repetition_penalty = f.number("repetition_penalty", 0.01, 10.0);
  if (auto k = f.integer("top_k", -1, 1 << 24)) r.top_k = static_cast<int32_t>(*k < 0 ? 0 : *k);
  if (auto s = f.integer("seed", INT64_MIN, INT64_MAX)) r.seed = static_cast<uint64_t>(*s);
  r.ignore_eos = f.boolean("ignore_eos").value_or(false);
  if (endpoint == Endpoint::kChat) {
    r.logprobs = f.boolean("logprobs").value_or(false);
    if (auto k = f.integer("top_logprobs", 0, kMaxTopLogprobs)) {
      if (!r.logprobs && *k > 0) {
        f.fail("top_logprobs", "needs \"logprobs\": true");
      }
      r.top_logprobs = static_cast<int32_t>(*k);
    }
  } else if (auto k = f.integer("logprobs", 0, kMaxTopLogprobs)) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int32_t>(*k);
  }
  if (auto n = f.integer("n", 1, kMaxChoices)) {
    r.n = static_cast<int32_t>(*n);
    const int64_t prompts =
        endpoint == Endpoint::kChat ? 1 : static_cast<int64_t>(r.prompts.size());
    if (prompts * *n > kMaxChoices) {
      f.fail("n", fmt::format("{} prompts times n = {} is {} choices; at most {} per request",
                              prompts, *n, prompts * *n, kMaxChoices));
    }
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = parse_tools(doc, body, &r)) return *e;
  } else if (const json* tools = f.get("tools")) {
    f.refuse_unless("tools", tools->is_null() || (tools->is_array() && tools->empty()),
                    "tools are offered through /v1/chat/completions");
  }
  if (auto e = parse_response_format(doc, &r)) return *e;
  if (r.grammar && (r.tool_choice.kind == ToolChoice::Kind::kRequired ||
                    r.tool_choice.kind == ToolChoice::Kind::kFunction)) {
    return bad("tool_choice",
               "'tool_choice' required or a function constrains the reply to a "
               "tool call: it cannot be combined with " +
                   r.grammar_param);
  }
  const json* bias = f.get("logit_bias");
  f.refuse_unless("logit_bias", bias == nullptr || (bias->is_object() && bias->empty()),
                  "logit biases are not applied");
  if (endpoint == Endpoint::kCompletion) {
    if (const json* echo = f.get("echo"); echo != nullptr) {
      if (!echo->is_boolean()) {
        f.fail("echo", "expected a boolean, got " + type_name(*echo));
      } else {
        r.echo = echo->get<bool>();
        if (r.echo && r.logprobs) {
          f.fail("echo",
                 "with logprobs (the prompt tokens' own logprobs) is not supported yet; "
                 "leave one of them out");
        }
      }
    }
    const json* best_of = f.get("best_of");
    f.refuse_unless("best_of", best_of == nullptr || *best_of == 1, "only best_of = 1");
    const json* suffix = f.get("suffix");
    f.refuse_unless("suffix", suffix == nullptr || (suffix->is_string() && suffix->empty()),
                    "no insertion");
  }
  if (f.error()) return *f.error();
  return r;
}

}  // namespace rinfer::server
