// A model's own Jinja chat template (`tokenizer.chat_template`), rendered through minja (Google's
// header-only Jinja interpreter, fetched by scripts/install-minja.sh). Used by ChatTemplate; the
// minja headers stay in jinja_chat.cpp.
//
// Message content is tracked through the template: each non-empty content is rendered once as a
// unique placeholder, which shows where the template puts it; the real render is then matched
// against that skeleton (the content verbatim, trimmed, or JSON-escaped, as templates insert it)
// to find the content's byte ranges. When the template does something else with a content (a
// filter that changes it, an escape), the prompt is the real rendering and
// RenderedChat::content_tracked is false.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "rinfer/status.h"

namespace rinfer {

struct ChatMessage;
struct RenderedChat;

class JinjaChat {
 public:
  ~JinjaChat();
  JinjaChat(const JinjaChat&) = delete;
  JinjaChat& operator=(const JinjaChat&) = delete;

  // Parses `source`. `bos` and `eos` are what the template sees as bos_token and eos_token.
  // A syntax error is an invalid_argument naming where minja stopped.
  static Result<std::shared_ptr<const JinjaChat>> compile(std::string_view source, std::string bos,
                                                          std::string eos);

  // Whether the template itself renders `tools` (Qwen2.5, Llama 3.x); otherwise a tools preamble
  // is added to the system message (minja's polyfill), and tool calls and tool replies are
  // rendered as JSON in the message content.
  bool supports_tools() const;

  // `tools_json`: an OpenAI `tools` array as JSON text, or empty. Errors: a template error
  // (raise_exception, a missing field), a tool call's arguments that are not JSON.
  Status render(std::span<const ChatMessage> messages, std::string_view tools_json,
                bool add_generation_prompt, RenderedChat* out) const;

 private:
  struct Impl;
  explicit JinjaChat(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rinfer
