// The text-generation sample: the four standard stages for a decoder-only LLM.
//   load_model   the decoder (by general.architecture), its tokenizer and its chat template
//   preprocess   chat messages -> prompt text (chat template) -> token ids; or raw text -> ids
//   infer        the decoder's runner (DecoderModel::create_runner): batches of sequences over
//                a paged KV arena -> logits or sampled ids
//   postprocess  sampled ids -> text pieces (streaming, never broken UTF-8), end-of-generation
// The engine core (engine/engine_core.h) drives infer and postprocess; sampling and stop strings
// sit between them there.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/model.h"
#include "rinfer/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {

class TextGenerationSample {
 public:
  // `chat_template` (a name: chatml, gemma) overrides the model's; empty = the model's own,
  // and none (raw prompts only) when the file has none. A random-weight source (random:...,
  // models/registry.h) has no tokenizer: token ids in, each id as "<id>" text out.
  static Result<std::unique_ptr<TextGenerationSample>> load_model(const std::string& path,
                                                                  const LoadOptions& opts,
                                                                  std::string_view chat_template);

  DecoderModel& decoder() { return *decoder_; }
  const DecoderModel& decoder() const { return *decoder_; }
  // The tokenizer, or null for a model without one (random weights).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The tokenizer, or an error saying that `what` needs one this model lacks.
  Result<const Tokenizer*> require_tokenizer(std::string_view what) const;
  // The chat template, or nullptr for a model without one (a base model).
  const ChatTemplate* chat_template() const { return chat_ ? &*chat_ : nullptr; }
  // Which template was chosen and why (or why there is none).
  const std::string& chat_template_note() const { return chat_note_; }

  // preprocess: the conversation rendered by the chat template, ending with the assistant's
  // turn opener, tokenized with the template's markers as control tokens. The messages'
  // content is plain text (control-token text a user typed stays text, so a message cannot
  // close its turn or open a system one) unless `allow_special`. `tools_json`: an OpenAI
  // `tools` array (JSON text) for the template to render, or empty. Errors without a template.
  Result<std::vector<int32_t>> preprocess(std::span<const ChatMessage> messages,
                                          bool allow_special = false,
                                          std::string_view tools_json = {}) const;
  // preprocess without a template: BOS as the model wants it, control-token text kept literal.
  Result<std::vector<int32_t>> preprocess_raw(std::string_view text) const;

  // postprocess: a fresh streaming detokenizer for one conversation (without a tokenizer: each
  // id as "<id>", never an end of generation).
  std::unique_ptr<TokenTextStream> postprocess_stream() const;

 private:
  TextGenerationSample() = default;
  std::unique_ptr<DecoderModel> decoder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_;
  std::string chat_note_;
  std::string path_;
};

}  // namespace rinfer
