// The encoder task interface (layer 3): a batch of token sequences -> hidden states -> one
// pooled vector per sequence (sentence embeddings). BERT (models/bert) is the first sample; the
// image classifier and the vision encoder take the same form: an immutable model that creates
// runners, each owning its scratch on one device.
//
// A batch lays its sequences out in slots of rows: sequence s owns rows
// [slot_starts[s], slot_starts[s + 1]), of which the first lengths[s] are its tokens and the rest
// padding. Packed batches have no padding (each slot is as long as its sequence); padded ones
// give every slot the longest length (the baseline of dynamic batching). Attention is
// bidirectional within a sequence and never crosses into another one or into padding.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "models/model.h"
#include "models/taps.h"
#include "ops/cpu/ops.h"

namespace rinfer {

struct EncoderHParams {
  std::string architecture;  // "bert"
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_ff = 0;
  int64_t n_positions = 0;    // max_position_embeddings: the longest sequence
  int64_t n_token_types = 0;  // type_vocab_size
  float norm_eps = 1e-12f;
  int64_t head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
};

struct EncoderBatch {
  std::span<const int32_t> tokens;            // [n_rows]; padding rows hold any valid id
  std::span<const int32_t> type_ids;          // [n_rows], or empty: all 0
  std::span<const int32_t> slot_starts;       // [n_seqs + 1], ascending, slot_starts[0] == 0
  std::span<const int32_t> lengths;           // [n_seqs], 1 <= lengths[s] <= its slot's rows
  const std::atomic<bool>* cancel = nullptr;  // read between layers: kCancelled
  // The pass's activations (models/taps.h: embed, attn_out, mlp_norm, mlp_out, block_out, and
  // pooled from embed()), or null: off, at no cost.
  TapSink* taps = nullptr;
  int64_t n_rows() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_seqs() const { return static_cast<int64_t>(lengths.size()); }
};

// What every encoder runner checks of a batch: shapes, slots, lengths within the model's
// positions, ids within the vocabulary and the token types.
Status check_encoder_batch(const EncoderBatch& b, const EncoderHParams& hp, int64_t max_rows);

struct PoolingOptions {
  cpu::PoolKind kind = cpu::PoolKind::kMean;
  bool normalize = true;  // L2
};

struct EncoderRunnerOptions {
  int64_t max_rows = 8192;  // rows per batch (sizes the scratch)
};

class EncoderRunner {
 public:
  virtual ~EncoderRunner() = default;
  virtual const EncoderRunnerOptions& options() const = 0;
  // hidden [n_rows, n_embd]: the last layer's output for every row (padding rows unspecified).
  virtual Status encode(const EncoderBatch& batch, float* hidden) = 0;
  // out [n_seqs, n_embd]: each sequence's rows pooled (padding excluded), then normalized.
  virtual Status embed(const EncoderBatch& batch, const PoolingOptions& pooling, float* out) = 0;
};

class EncoderModel : public ModelSample {
 public:
  ModelTask task() const override { return ModelTask::kEmbedding; }
  virtual const EncoderHParams& hparams() const = 0;
  // The tokenizer.json text of a model that carries its own (random weights: a synthetic
  // vocabulary), or "" when the tokenizer is the file beside the weights.
  virtual std::string builtin_tokenizer_json() const { return ""; }
  virtual Result<std::unique_ptr<EncoderRunner>> create_runner(
      const EncoderRunnerOptions& opts) const = 0;
};

// load_model for callers that need an encoder: errors when the model is something else.
Result<std::unique_ptr<EncoderModel>> load_encoder_model(const std::string& path,
                                                         const LoadOptions& opts);

}  // namespace rinfer
