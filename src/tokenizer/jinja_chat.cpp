#include "tokenizer/jinja_chat.h"

#include <minja/chat-template.hpp>
#include <minja/minja.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/strings.h"
#include "tokenizer/chat_template.h"

namespace rinfer {

namespace {

using ojson = nlohmann::ordered_json;

// A content placeholder: U+E000, the message index, U+E001 (private-use code points).
constexpr std::string_view kOpen = "\xEE\x80\x80";
constexpr std::string_view kClose = "\xEE\x80\x81";

std::string placeholder(size_t i) {
  return std::string(kOpen) + std::to_string(i) + std::string(kClose);
}

// The messages as the template sees them (OpenAI's shapes; tool-call arguments as objects, as
// the templates of Qwen2.5 and Llama 3.x expect). `content(i)` gives message i's content.
template <typename ContentFn>
Result<ojson> messages_json(std::span<const ChatMessage> messages, ContentFn content) {
  ojson out = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    ojson msg = {{"role", m.role}};
    if (m.content.empty() && !m.tool_calls.empty()) {
      msg["content"] = nullptr;
    } else {
      msg["content"] = content(i);
    }
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        const ChatToolCall& call = m.tool_calls[c];
        ojson args = ojson::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
        if (args.is_discarded()) {
          return invalid_argument("message {}: tool call {} ('{}'): arguments are not JSON", i, c,
                                  call.name);
        }
        ojson tc = {{"id", call.id},
                    {"type", "function"},
                    {"function", {{"name", call.name}, {"arguments", std::move(args)}}}};
        calls.push_back(std::move(tc));
      }
      msg["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) msg["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) msg["name"] = m.name;
    out.push_back(std::move(msg));
  }
  return out;
}

// The skeleton's pieces: literal text, or message i's content.
struct Piece {
  bool content = false;
  std::string_view literal;
  size_t message = 0;
};

std::vector<Piece> split_skeleton(std::string_view s, size_t n_messages) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t open = s.find(kOpen, pos);
    while (open != std::string_view::npos) {
      const size_t digits = open + kOpen.size();
      size_t end = digits;
      while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
      if (end > digits && s.substr(end, kClose.size()) == kClose) {
        const size_t index = std::stoul(std::string(s.substr(digits, end - digits)));
        if (index < n_messages) break;
      }
      open = s.find(kOpen, open + 1);
    }
    if (open == std::string_view::npos) {
      pieces.push_back({false, s.substr(pos), 0});
      break;
    }
    if (open > pos) pieces.push_back({false, s.substr(pos, open - pos), 0});
    const size_t digits = open + kOpen.size();
    const size_t end = s.find(kClose, digits);
    pieces.push_back({true, {}, std::stoul(std::string(s.substr(digits, end - digits)))});
    pos = end + kClose.size();
  }
  return pieces;
}

void add_range(RenderedChat& out, size_t begin, size_t end) {
  if (end <= begin) return;
  if (!out.content.empty() && out.content.back().end == begin) {
    out.content.back().end = end;
  } else {
    out.content.push_back({begin, end});
  }
}

// Finds the contents of `real` where the skeleton puts them. False when the template did
// something else with a content than insert it verbatim, trimmed or JSON-escaped.
bool track(std::span<const Piece> pieces, std::span<const ChatMessage> messages,
           const std::string& real, RenderedChat& out) {
  size_t pos = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Piece& piece = pieces[p];
    if (!piece.content) {
      if (real.compare(pos, piece.literal.size(), piece.literal) != 0) return false;
      pos += piece.literal.size();
      continue;
    }
    const std::string& c = messages[piece.message].content;
    const std::string escaped = ojson(c).dump();
    const std::string_view forms[] = {c, trim_space(c),
                                      std::string_view(escaped).substr(1, escaped.size() - 2)};
    const bool last = p + 1 == pieces.size();
    const std::string_view next = last || pieces[p + 1].content ? "" : pieces[p + 1].literal;
    bool matched = false;
    for (std::string_view form : forms) {
      if (real.compare(pos, form.size(), form) != 0) continue;
      const size_t after = pos + form.size();
      if (last ? after != real.size() : real.compare(after, next.size(), next) != 0) continue;
      add_range(out, pos, after);
      pos = after;
      matched = true;
      break;
    }
    if (!matched) return false;
  }
  return pos == real.size();
}

}  // namespace

struct JinjaChat::Impl {
  std::unique_ptr<minja::chat_template> tmpl;
};

JinjaChat::JinjaChat(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JinjaChat::~JinjaChat() = default;

Result<std::shared_ptr<const JinjaChat>> JinjaChat::compile(std::string_view source,
                                                            std::string bos, std::string eos) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->tmpl = std::make_unique<minja::chat_template>(std::string(source), bos, eos);
  } catch (const std::exception& e) {
    return invalid_argument("chat template: {}", e.what());
  }
  return std::shared_ptr<const JinjaChat>(new JinjaChat(std::move(impl)));
}

bool JinjaChat::supports_tools() const { return impl_->tmpl->original_caps().supports_tools; }

Status JinjaChat::render(std::span<const ChatMessage> messages, std::string_view tools_json,
                         bool add_generation_prompt, RenderedChat* out) const {
  minja::chat_template_inputs inputs;
  inputs.add_generation_prompt = add_generation_prompt;
  if (!tools_json.empty()) {
    inputs.tools = ojson::parse(tools_json, nullptr, /*allow_exceptions=*/false);
    if (inputs.tools.is_discarded() || !inputs.tools.is_array()) {
      return invalid_argument("tools: not a JSON array");
    }
  }
  std::string real, skeleton;
  try {
    RINFER_ASSIGN_OR_RETURN(inputs.messages,
                            messages_json(messages, [&](size_t i) { return messages[i].content; }));
    real = impl_->tmpl->apply(inputs);
    RINFER_ASSIGN_OR_RETURN(inputs.messages, messages_json(messages, [&](size_t i) {
                              return messages[i].content.empty() ? std::string() : placeholder(i);
                            }));
    skeleton = impl_->tmpl->apply(inputs);
  } catch (const std::exception& e) {
    return invalid_argument("chat template: {}", e.what());
  }
  const std::vector<Piece> pieces = split_skeleton(skeleton, messages.size());
  out->content.clear();
  out->content_tracked = track(pieces, messages, real, *out);
  if (!out->content_tracked) out->content.clear();
  out->text = std::move(real);
  return ok_status();
}

}  // namespace rinfer
