// Chat templates: turn a conversation into the prompt text a chat model was trained on.
//
// There is no Jinja engine: a model's `tokenizer.chat_template` is recognized by its text as one
// of the known families, which are implemented here directly.
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n per message, generation prompt
//           "<|im_start|>assistant\n" (SmolLM2, Qwen, ...). A default system message found in the
//           template (SmolLM2's "You are a helpful AI assistant named SmolLM, ...") is inserted
//           when the conversation does not start with one, as the template does.
//   gemma   <start_of_turn>{user|model}\n{content}<end_of_turn>\n, generation prompt
//           "<start_of_turn>model\n"; a system message is folded into the first user turn
//           ("{system}\n\n{user}"), content is trimmed, and roles must alternate user/assistant.
// The formatted text does not include BOS: tokenize it with EncodeOptions{add_special = true,
// parse_special = true}, which adds BOS where the model wants it (Gemma) and parses the turn
// markers as control tokens.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {

class GgufFile;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatTemplateFamily { kChatML, kGemma };

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
};

class ChatTemplate {
 public:
  // By name: "chatml" or "gemma".
  static Result<ChatTemplate> from_name(std::string_view name);
  // Recognizes a template's text; an unknown template is an invalid_argument error that says how
  // to choose one by name.
  static Result<ChatTemplate> detect(std::string_view template_text);
  // For a model file: `tokenizer.chat_template` when present; otherwise the family implied by
  // `general.architecture` (gemma*). `note` (when given) receives a line saying which template
  // was chosen and why ("no tokenizer.chat_template; using gemma for architecture gemma3").
  // `override_name`, when not empty, wins over both.
  static Result<ChatTemplate> for_model(const GgufFile& file, std::string_view override_name = {},
                                        std::string* note = nullptr);

  ChatTemplateFamily family() const { return family_; }
  std::string_view name() const;
  const std::string& default_system() const { return default_system_; }

  // The prompt for `messages`, ending with the assistant's turn opener when
  // add_generation_prompt. Errors: an unknown role, roles that a family cannot express.
  Result<std::string> apply(std::span<const ChatMessage> messages,
                            bool add_generation_prompt = true) const;
  // apply() with the ranges of the messages' content.
  Result<RenderedChat> render(std::span<const ChatMessage> messages,
                              bool add_generation_prompt = true) const;

 private:
  ChatTemplateFamily family_ = ChatTemplateFamily::kChatML;
  std::string default_system_;
};

}  // namespace rinfer
