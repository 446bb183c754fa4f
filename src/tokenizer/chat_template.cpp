#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "core/strings.h"
#include "formats/gguf.h"
#include "tokenizer/jinja_chat.h"

namespace rinfer {

namespace {

// A template's literal "<|im_start|>system\n...<|im_end|>": the default system message, where
// "\n" may be a real newline or the two characters of a Jinja escape. Every occurrence is tried
// in order: Qwen2.5's template opens system turns with Jinja expressions first (the tools
// preamble, the user's own system message) and states its default in the third.
std::string find_default_system(std::string_view t) {
  for (std::string_view opener : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    for (size_t b = t.find(opener); b != std::string_view::npos; b = t.find(opener, b + 1)) {
      const size_t start = b + opener.size();
      const size_t e = t.find("<|im_end|>", start);
      if (e == std::string_view::npos) break;
      std::string_view body = t.substr(start, e - start);
      // Only a literal message: anything with Jinja syntax (message['content']) is not a default.
      if (body.find("{{") != std::string_view::npos || body.find("{%") != std::string_view::npos ||
          body.find('\'') != std::string_view::npos || body.find('"') != std::string_view::npos ||
          body.find('+') != std::string_view::npos) {
        continue;
      }
      return std::string(body);
    }
  }
  return {};
}

constexpr std::string_view kChatMLMarkers[] = {"<|im_start|>", "<|im_end|>"};
constexpr std::string_view kGemmaMarkers[] = {"<start_of_turn>", "<end_of_turn>"};
constexpr std::string_view kLlama3Markers[] = {"<|start_header_id|>", "<|end_header_id|>",
                                               "<|eot_id|>", "<|eom_id|>"};

std::span<const std::string_view> markers_in(std::string_view text) {
  if (text.find("<|im_start|>") != std::string_view::npos) return kChatMLMarkers;
  if (text.find("<start_of_turn>") != std::string_view::npos) return kGemmaMarkers;
  if (text.find("<|start_header_id|>") != std::string_view::npos) return kLlama3Markers;
  return {};
}

}  // namespace

std::string_view ChatTemplate::name() const {
  switch (family_) {
    case ChatTemplateFamily::kGemma: return "gemma";
    case ChatTemplateFamily::kJinja: return "jinja";
    case ChatTemplateFamily::kChatML: break;
  }
  return "chatml";
}

bool ChatTemplate::native_tools() const { return jinja_ != nullptr && jinja_->supports_tools(); }

Result<ChatTemplate> ChatTemplate::from_jinja(std::string_view text, std::string eos) {
  RINFER_ASSIGN_OR_RETURN(std::shared_ptr<const JinjaChat> jinja,
                          JinjaChat::compile(text, std::string(), std::move(eos)));
  ChatTemplate t;
  t.family_ = ChatTemplateFamily::kJinja;
  t.jinja_ = std::move(jinja);
  t.markers_ = markers_in(text);
  if (text.find("<tool_call>") != std::string_view::npos) t.tool_format_ = ToolCallFormat::kHermes;
  if (text.find("<|im_start|>") != std::string_view::npos) {
    t.default_system_ = find_default_system(text);
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::from_text(std::string_view text, std::string eos,
                                             std::string* note) {
  auto jinja = from_jinja(text, std::move(eos));
  if (jinja.ok()) {
    if (note != nullptr) *note = "using the model's chat template (Jinja)";
    return jinja;
  }
  auto family = detect(text);
  if (family.ok() && note != nullptr) {
    *note = "using chat template '" + std::string(family->name()) +
            "' (the model's Jinja template does not parse: " + jinja.status().message() + ")";
  }
  return family;
}

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name) {
  ChatTemplate t;
  if (name == "chatml") {
    t.family_ = ChatTemplateFamily::kChatML;
  } else if (name == "gemma") {
    t.family_ = ChatTemplateFamily::kGemma;
  } else {
    return invalid_argument("unknown chat template '{}' (known: chatml, gemma)", name);
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::detect(std::string_view text) {
  ChatTemplate t;
  if (text.find("<|im_start|>") != std::string_view::npos) {
    t.family_ = ChatTemplateFamily::kChatML;
    t.default_system_ = find_default_system(text);
    return t;
  }
  if (text.find("<start_of_turn>") != std::string_view::npos) {
    t.family_ = ChatTemplateFamily::kGemma;
    return t;
  }
  std::string head(text.substr(0, 60));
  for (char& c : head) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return invalid_argument(
      "unrecognized chat template (starts with \"{}{}\"); choose one with --chat-template "
      "chatml|gemma",
      head, text.size() > 60 ? "..." : "");
}

Result<ChatTemplate> ChatTemplate::for_model(const GgufFile& file, std::string_view override_name,
                                             std::string* note) {
  if (!override_name.empty()) {
    if (note != nullptr)
      *note = "using chat template '" + std::string(override_name) + "' (chosen)";
    return from_name(override_name);
  }
  if (auto text = file.get_string("tokenizer.chat_template")) {
    // eos_token as the template sees it: the text of tokenizer.ggml.eos_token_id.
    std::string eos;
    const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
    const std::optional<uint64_t> eos_id = file.get_uint("tokenizer.ggml.eos_token_id");
    if (tokens != nullptr && eos_id && *eos_id < tokens->array_strings().size()) {
      eos = std::string(tokens->array_strings()[*eos_id]);
    }
    auto t = from_text(*text, std::move(eos), note);
    if (!t.ok()) return t.status().with_context(file.path());
    return t;
  }
  const std::string_view arch = file.get_string("general.architecture").value_or("");
  if (arch.starts_with("gemma")) {
    if (note != nullptr) {
      *note = "no tokenizer.chat_template; using gemma for architecture " + std::string(arch);
    }
    return from_name("gemma");
  }
  return invalid_argument(
      "{}: no tokenizer.chat_template and no known template for architecture '{}'; choose one "
      "with --chat-template chatml|gemma",
      file.path(), arch);
}

Result<std::string> ChatTemplate::apply(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt,
                                        std::string_view tools_json) const {
  RINFER_ASSIGN_OR_RETURN(RenderedChat r, render(messages, add_generation_prompt, tools_json));
  return std::move(r.text);
}

Result<RenderedChat> ChatTemplate::render(std::span<const ChatMessage> messages,
                                          bool add_generation_prompt,
                                          std::string_view tools_json) const {
  const bool tools = jinja_ != nullptr;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string& r = m.role;
    if (r != "system" && r != "user" && r != "assistant" && !(tools && r == "tool")) {
      return invalid_argument(
          "message {}: unknown role '{}' ({})", i, r,
          tools ? "system, user, assistant or tool" : "system, user or assistant");
    }
    if (!tools && !m.tool_calls.empty()) {
      return invalid_argument(
          "message {}: chat template '{}' cannot render tool calls (the model's own Jinja "
          "template can: leave chat_template unset)",
          i, name());
    }
  }
  if (!tools && !tools_json.empty()) {
    return invalid_argument(
        "tools: chat template '{}' cannot render tools (the model's own Jinja template can: "
        "leave chat_template unset)",
        name());
  }
  RenderedChat out;
  if (jinja_ != nullptr) {
    out.markers = markers_;
    RINFER_RETURN_IF_ERROR(jinja_->render(messages, tools_json, add_generation_prompt, &out));
    return out;
  }
  out.markers = family_ == ChatTemplateFamily::kChatML
                    ? std::span<const std::string_view>(kChatMLMarkers)
                    : std::span<const std::string_view>(kGemmaMarkers);
  std::string& text = out.text;
  // Appends message content, recording its range (markup is appended to `text` directly).
  auto content = [&out](std::string_view c) {
    if (c.empty()) return;
    const size_t begin = out.text.size();
    out.text += c;
    if (!out.content.empty() && out.content.back().end == begin) {
      out.content.back().end = out.text.size();
    } else {
      out.content.push_back({begin, out.text.size()});
    }
  };
  if (family_ == ChatTemplateFamily::kChatML) {
    if (!default_system_.empty() && (messages.empty() || messages[0].role != "system")) {
      text += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    }
    for (const auto& m : messages) {
      text += "<|im_start|>" + m.role + "\n";
      content(m.content);
      text += "<|im_end|>\n";
    }
    if (add_generation_prompt) text += "<|im_start|>assistant\n";
    return out;
  }
  // Gemma.
  size_t first = 0;
  std::string_view system;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if (m.role == "system") {
      return invalid_argument("message {}: gemma takes a system message only first", i);
    }
    if ((m.role == "user") != expect_user) {
      return invalid_argument(
          "message {}: gemma conversation roles must alternate user/assistant/user/...", i);
    }
    text += "<start_of_turn>";
    text += m.role == "assistant" ? "model" : "user";
    text += "\n";
    if (i == first && first == 1) {
      content(system);
      text += "\n\n";
    }
    content(trim_space(m.content));
    text += "<end_of_turn>\n";
  }
  if (add_generation_prompt) text += "<start_of_turn>model\n";
  return out;
}

}  // namespace rinfer
