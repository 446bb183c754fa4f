#include "models/text_generation.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "formats/gguf.h"
#include "models/registry.h"
#include "tokenizer/streaming_decoder.h"

namespace rinfer {

namespace {

class StreamingText final : public TokenTextStream {
 public:
  explicit StreamingText(const Tokenizer& t) : tokenizer_(t), decoder_(t, /*skip_special=*/true) {}
  bool is_end_of_generation(int32_t token) const override {
    return tokenizer_.is_end_of_generation(token);
  }
  std::string push(int32_t token) override { return decoder_.push(token); }
  std::string finish() override { return decoder_.finish(); }

 private:
  const Tokenizer& tokenizer_;
  StreamingDecoder decoder_;
};

// Text for a model without a tokenizer: "<id>" per token, never an end.
class IdText final : public TokenTextStream {
 public:
  bool is_end_of_generation(int32_t) const override { return false; }
  std::string push(int32_t token) override { return "<" + std::to_string(token) + ">"; }
  std::string finish() override { return {}; }
};

// A Hugging Face checkpoint (a directory, or a .safetensors / index file in one): the folder
// that holds config.json, tokenizer.json and tokenizer_config.json; empty for a GGUF file.
std::string hf_model_dir(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  if (path.ends_with(".safetensors") || path.ends_with(".safetensors.index.json")) {
    const fs::path parent = fs::path(path).parent_path();
    return parent.empty() ? std::string(".") : parent.string();
  }
  return {};
}

// tokenizer_config.json's "chat_template" (a string), or empty when absent or unreadable.
std::string hf_chat_template_text(const std::string& dir) {
  auto text = read_regular_file((std::filesystem::path(dir) / "tokenizer_config.json").string());
  if (!text.ok()) return {};
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};
  auto it = j.find("chat_template");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Result<std::unique_ptr<TextGenerationSample>> TextGenerationSample::load_model(
    const std::string& path, const LoadOptions& opts, std::string_view chat_template) {
  std::unique_ptr<TextGenerationSample> s(new TextGenerationSample());
  RINFER_ASSIGN_OR_RETURN(s->decoder_, load_decoder_model(path, opts));
  s->path_ = path;
  if (is_random_source(path)) {
    if (!chat_template.empty()) {
      return invalid_argument("{}: random weights have no tokenizer for a chat template", path);
    }
    s->chat_note_ = "random weights: no tokenizer (token ids in, ids as text out)";
    return s;
  }
  const std::string hf_dir = hf_model_dir(path);
  const std::string hf_json =
      hf_dir.empty() ? std::string() : (std::filesystem::path(hf_dir) / "tokenizer.json").string();
  std::error_code ec;
  if (!hf_dir.empty() && !std::filesystem::exists(hf_json, ec)) {
    return not_found(
        "{}: no tokenizer.json in '{}': text generation needs the model's tokenizer (the "
        "decoder alone loads, e.g. for `rinfer parity` on token ids)",
        path, hf_dir);
  }
  auto tok = hf_dir.empty() ? Tokenizer::load(path) : Tokenizer::from_hf_json(hf_json);
  if (!tok.ok()) return tok.status().with_context("loading the tokenizer");
  s->tokenizer_ = std::move(tok).value();
  if (s->tokenizer_->vocab_size() > s->decoder_->hparams().n_vocab) {
    return data_loss("{}: the tokenizer has {} tokens but the model's vocabulary is {}", path,
                     s->tokenizer_->vocab_size(), s->decoder_->hparams().n_vocab);
  }
  // The template: the override, else the file's (tokenizer.chat_template; for a Hugging Face
  // model tokenizer_config.json's chat_template), else none.
  Result<ChatTemplate> chat = invalid_argument("no chat_template in tokenizer_config.json");
  if (hf_dir.empty()) {
    auto file = GgufFile::open(path);
    if (!file.ok()) return file.status();
    chat = ChatTemplate::for_model(file.value(), chat_template, &s->chat_note_);
  } else if (!chat_template.empty()) {
    chat = ChatTemplate::from_name(chat_template);
  } else if (const std::string text = hf_chat_template_text(hf_dir); !text.empty()) {
    const int32_t eos = s->tokenizer_->eos();
    chat = ChatTemplate::from_text(
        text, eos >= 0 ? std::string(s->tokenizer_->token_text(eos)) : std::string(),
        &s->chat_note_);
  }
  if (chat.ok()) {
    s->chat_ = std::move(chat).value();
    if (s->chat_note_.empty()) {
      s->chat_note_ = std::string("chat template ") + std::string(s->chat_->name());
    }
  } else if (!chat_template.empty()) {
    return chat.status();  // a bad override is the user's error
  } else {
    s->chat_note_ = "no usable chat template (" + chat.status().message() + "): raw prompts";
  }
  return s;
}

Result<const Tokenizer*> TextGenerationSample::require_tokenizer(std::string_view what) const {
  if (tokenizer_ == nullptr) {
    return invalid_argument("{}: {} needs a tokenizer, and this model has none (random weights "
                            "take token ids)",
                            path_, what);
  }
  return tokenizer_.get();
}

Result<std::vector<int32_t>> TextGenerationSample::preprocess(std::span<const ChatMessage> messages,
                                                              bool allow_special,
                                                              std::string_view tools_json) const {
  if (!chat_) {
    return invalid_argument(
        "this model has no chat template: use --raw, or set chat_template "
        "(chatml, gemma) in the recipe");
  }
  RINFER_ASSIGN_OR_RETURN(RenderedChat chat, chat_->render(messages, true, tools_json));
  EncodeOptions o{.add_special = true, .parse_special = true};
  if (!allow_special) {
    o.plain_ranges = chat.content;
    o.markers = chat.markers;
    if (!chat.content_tracked) {
      // The template changed some content in a way that could not be followed: no message may
      // hold text that would parse as a control token.
      for (size_t i = 0; i < messages.size(); ++i) {
        RINFER_ASSIGN_OR_RETURN(
            std::vector<int32_t> ids,
            tokenizer_->encode(messages[i].content,
                               EncodeOptions{.add_special = false, .parse_special = true}));
        for (int32_t id : ids) {
          if (tokenizer_->is_control(id) || tokenizer_->is_end_of_generation(id)) {
            return invalid_argument(
                "message {}: its content holds the control token '{}', and this chat template "
                "changes content in a way that cannot keep it plain text",
                i, tokenizer_->token_text(id));
          }
        }
      }
    }
  }
  return tokenizer_->encode(chat.text, o);
}

Result<std::vector<int32_t>> TextGenerationSample::preprocess_raw(std::string_view text) const {
  RINFER_RETURN_IF_ERROR(require_tokenizer("a text prompt").status());
  return tokenizer_->encode(text, EncodeOptions{.add_special = true, .parse_special = false});
}

std::unique_ptr<TokenTextStream> TextGenerationSample::postprocess_stream() const {
  if (tokenizer_ == nullptr) return std::make_unique<IdText>();
  return std::make_unique<StreamingText>(*tokenizer_);
}

}  // namespace rinfer
