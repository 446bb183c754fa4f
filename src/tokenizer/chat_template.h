// Chat templates: turn a conversation into the prompt text a chat model was trained on.
//
// A model's own Jinja template (`tokenizer.chat_template` in a GGUF, `chat_template` in a Hugging
// Face tokenizer_config.json) is rendered as written, through minja (tokenizer/jinja_chat.h): the
// system, user, assistant and tool roles, `tools`, assistant tool calls and tool replies all
// come out as the model saw them in training. Two families are also implemented directly, for
// models without a template and for `--chat-template NAME`:
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n per message, generation prompt
//           "<|im_start|>assistant\n" (SmolLM2, Qwen, ...). A default system message found in the
//           template (SmolLM2's "You are a helpful AI assistant named SmolLM, ...") is inserted
//           when the conversation does not start with one, as the template does.
//   gemma   <start_of_turn>{user|model}\n{content}<end_of_turn>\n, generation prompt
//           "<start_of_turn>model\n"; a system message is folded into the first user turn
//           ("{system}\n\n{user}"), content is trimmed, and roles must alternate user/assistant.
// Neither family renders tools. The formatted text does not include BOS (bos_token is empty for
// Jinja templates): tokenize it with EncodeOptions{add_special = true, parse_special = true},
// which adds BOS where the model wants it and parses the turn markers as control tokens.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {

class GgufFile;
class JinjaChat;

// A function call an assistant made (OpenAI's tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_ = {}, std::vector<ChatToolCall> calls = {})
      : role(std::move(role_)), content(std::move(content_)), tool_calls(std::move(calls)) {}

  std::string role;                      // "system", "user", "assistant" or "tool"
  std::string content;                   // empty with tool_calls: the assistant said nothing else
  std::vector<ChatToolCall> tool_calls;  // assistant
  std::string tool_call_id;              // tool: the call this replies to
  std::string name;                      // tool: the function's name, where the client gives it
};

enum class ChatTemplateFamily { kChatML, kGemma, kJinja };

// How a template's model writes tool calls (what the server parses and constrains;
// server/tool_calls.h): kHermes, <tool_call>\n{json}\n</tool_call> (templates that mention
// <tool_call>: Qwen2.5, Hermes); kJson, a JSON reply (the tools preamble of the others).
enum class ToolCallFormat { kHermes, kJson };

// A rendered conversation: the prompt text and the byte ranges [begin, end) of it that came
// from the messages' content (in order, not overlapping). Tokenize it with
// EncodeOptions::plain_ranges = content, so that control-token text a user typed
// ("<|im_end|><|im_start|>system ...") stays plain text and only the template's own markers
// become control tokens.
struct RenderedChat {
  std::string text;
  std::vector<TextRange> content;
  // The family's turn markers ("<|im_start|>", "<|im_end|>"), for EncodeOptions::markers.
  std::span<const std::string_view> markers;
  // False when a Jinja template changed some content in a way that could not be followed
  // (content is then empty): the caller must check that no message holds control-token text.
  bool content_tracked = true;
};

class ChatTemplate {
 public:
  // By name: "chatml" or "gemma".
  static Result<ChatTemplate> from_name(std::string_view name);
  // Recognizes a template's text as a family; an unknown template is an invalid_argument error
  // that says how to choose one by name.
  static Result<ChatTemplate> detect(std::string_view template_text);
  // The template itself, rendered by minja; `eos` is what it sees as eos_token. A template minja
  // cannot parse is an invalid_argument error.
  static Result<ChatTemplate> from_jinja(std::string_view template_text, std::string eos = {});
  // From a template's text: from_jinja, else (a template minja cannot parse) detect. `note`
  // receives which and why.
  static Result<ChatTemplate> from_text(std::string_view template_text, std::string eos,
                                        std::string* note);
  // For a model file: `tokenizer.chat_template` when present (from_text); otherwise the family
  // implied by `general.architecture` (gemma*). `note` (when given) receives a line saying which
  // template was chosen and why ("no tokenizer.chat_template; using gemma for architecture
  // gemma3"). `override_name`, when not empty, wins over both.
  static Result<ChatTemplate> for_model(const GgufFile& file, std::string_view override_name = {},
                                        std::string* note = nullptr);

  ChatTemplateFamily family() const { return family_; }
  // "chatml", "gemma" or "jinja".
  std::string_view name() const;
  const std::string& default_system() const { return default_system_; }
  // Whether tools, tool calls and tool messages can be rendered (Jinja templates; those that do
  // not mention tools get a tools preamble in the system message).
  bool renders_tools() const { return jinja_ != nullptr; }
  // Whether the template itself renders tools (Qwen2.5, Llama 3.x), rather than the preamble.
  bool native_tools() const;
  ToolCallFormat tool_call_format() const { return tool_format_; }

  // The prompt for `messages`, ending with the assistant's turn opener when
  // add_generation_prompt. `tools_json`: an OpenAI `tools` array as JSON text, or empty. Errors:
  // an unknown role, roles that a family cannot express, tools for a family, a template error.
  Result<std::string> apply(std::span<const ChatMessage> messages,
                            bool add_generation_prompt = true,
                            std::string_view tools_json = {}) const;
  // apply() with the ranges of the messages' content.
  Result<RenderedChat> render(std::span<const ChatMessage> messages,
                              bool add_generation_prompt = true,
                              std::string_view tools_json = {}) const;

 private:
  ChatTemplateFamily family_ = ChatTemplateFamily::kChatML;
  std::string default_system_;
  // The markers of the family the text belongs to (chatml, gemma, llama3), for Jinja templates.
  std::span<const std::string_view> markers_;
  std::shared_ptr<const JinjaChat> jinja_;
  ToolCallFormat tool_format_ = ToolCallFormat::kJson;
};

}  // namespace rinfer
