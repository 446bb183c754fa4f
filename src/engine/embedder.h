// The embedding engine of scenario `embedding`: an encoder sample (models/encoder.h) with its
// WordPiece tokenizer, one runner, and the recipe's dynamic batching
// (strategies.dynamic_batching) and embedding settings (pooling, normalization, max length).
//
//   texts -> preprocess (tokenizer, truncated to max_length) -> batches (single | padded |
//   packed) -> infer (the runner) -> postprocess (pooling, L2 normalization) -> vectors in input
//   order.
// embed() is thread-safe (calls are serialized on the one runner).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "models/encoder.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"
#include "tokenizer/wordpiece.h"

namespace rinfer {

struct EmbedStats {
  int64_t texts = 0;
  int64_t tokens = 0;     // tokens of the inputs, [CLS] and [SEP] included
  int64_t rows = 0;       // rows computed (tokens + padding)
  int64_t truncated = 0;  // inputs cut to max_length
  int64_t batches = 0;    // forward passes
  double tokenize_s = 0.0;
  double forward_s = 0.0;  // forward passes, pooling included
};

// Called after each batch with the inputs done so far and the total.
using EmbedProgress = std::function<void(int64_t done, int64_t total)>;

class Embedder {
 public:
  // Validates the recipe (scenario embedding, strategies, device), resolves and loads the model,
  // its tokenizer.json, and the max length.
  static Result<std::unique_ptr<Embedder>> create(const RecipeConfig& recipe);

  // [texts.size(), dim()] in input order. An invalid UTF-8 text is an error naming its index and
  // byte; an empty text embeds [CLS] [SEP]. cancel (may be null) is read between batches and
  // layers.
  Result<std::vector<float>> embed(std::span<const std::string> texts, EmbedStats* stats = nullptr,
                                   const EmbedProgress& progress = {},
                                   const std::atomic<bool>* cancel = nullptr);

  // The same for inputs already tokenized (tokenize(), wrap_ids()).
  Result<std::vector<float>> embed_encoded(std::span<const TokenEncoding> enc,
                                           EmbedStats* stats = nullptr,
                                           const EmbedProgress& progress = {},
                                           const std::atomic<bool>* cancel = nullptr);

  // One input's vector [dim()] from a forward pass of it alone, its activations handed to
  // `taps` (models/taps.h): rinfer diff.
  Result<std::vector<float>> embed_tapped(const TokenEncoding& enc, TapSink& taps);
  // The token ids of each text as the model sees them (truncated).
  Result<std::vector<TokenEncoding>> tokenize(std::span<const std::string> texts) const;
  // Word-piece ids given directly (no [CLS] / [SEP]): wrapped in them and truncated like a
  // text's. An id outside the vocabulary is an error naming it.
  Result<TokenEncoding> wrap_ids(std::span<const int32_t> ids) const;

  int64_t dim() const { return model_->hparams().n_embd; }
  int64_t max_length() const { return max_length_; }
  const RecipeConfig& recipe() const { return recipe_; }
  const std::string& model_path() const { return model_path_; }
  const EncoderModel& model() const { return *model_; }
  const WordPieceTokenizer& tokenizer() const { return *tokenizer_; }
  // A few lines: model, tokenizer, device, strategies, pooling.
  std::string describe() const;

 private:
  Embedder() = default;
  Status run_batch(std::span<const TokenEncoding> enc, std::span<const size_t> order, bool padded,
                   float* out, EmbedStats& st, const std::atomic<bool>* cancel,
                   TapSink* taps = nullptr);

  RecipeConfig recipe_;
  std::string model_path_;
  int64_t max_length_ = 0;
  std::unique_ptr<ThreadPool> pool_;  // before the model that uses it
  std::unique_ptr<EncoderModel> model_;
  std::unique_ptr<EncoderRunner> runner_;
  std::unique_ptr<WordPieceTokenizer> tokenizer_;
  PoolingOptions pooling_;
  std::mutex mu_;
  // One batch's inputs and outputs, reused.
  std::vector<int32_t> tokens_, types_, starts_, lengths_;
  std::vector<float> out_;
};

}  // namespace rinfer
