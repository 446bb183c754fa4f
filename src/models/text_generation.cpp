#include "models/text_generation.h"

#include "core/error.h"
#include "formats/gguf.h"
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

}  // namespace

Result<std::unique_ptr<TextGenerationSample>> TextGenerationSample::load_model(
    const std::string& path, const LoadOptions& opts, std::string_view chat_template) {
  std::unique_ptr<TextGenerationSample> s(new TextGenerationSample());
  RINFER_ASSIGN_OR_RETURN(s->decoder_, load_decoder_model(path, opts));
  auto tok = Tokenizer::load(path);
  if (!tok.ok()) return tok.status().with_context("loading the tokenizer");
  s->tokenizer_ = std::move(tok).value();
  if (s->tokenizer_->vocab_size() > s->decoder_->hparams().n_vocab) {
    return data_loss("{}: the tokenizer has {} tokens but the model's vocabulary is {}", path,
                     s->tokenizer_->vocab_size(), s->decoder_->hparams().n_vocab);
  }
  // The template: the override, else the file's (tokenizer.chat_template), else none.
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  auto chat = ChatTemplate::for_model(file.value(), chat_template, &s->chat_note_);
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

Result<std::vector<int32_t>> TextGenerationSample::preprocess(
    std::span<const ChatMessage> messages) const {
  if (!chat_) {
    return invalid_argument(
        "this model has no chat template: use --raw, or set chat_template "
        "(chatml, gemma) in the recipe");
  }
  RINFER_ASSIGN_OR_RETURN(std::string text, chat_->apply(messages, true));
  return tokenizer_->encode(text, EncodeOptions{.add_special = true, .parse_special = true});
}

Result<std::vector<int32_t>> TextGenerationSample::preprocess_raw(std::string_view text) const {
  return tokenizer_->encode(text, EncodeOptions{.add_special = true, .parse_special = false});
}

std::unique_ptr<TokenTextStream> TextGenerationSample::postprocess_stream() const {
  return std::make_unique<StreamingText>(*tokenizer_);
}

}  // namespace rinfer
