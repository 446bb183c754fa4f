// The BERT sample (encoders: all-MiniLM-L6-v2, BERT, MiniLM, ...) from a Hugging Face
// checkpoint: config.json (model_type "bert") and safetensors weights, with or without the
// "bert." prefix of the *ForXxx classes.
//
// The forward pass, one readable reference for every backend:
//   x = LayerNorm(word_emb[id] + pos_emb[position in its sequence] + type_emb[type])
//   per layer:  q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv
//               a = softmax(q k^T / sqrt(head_dim)) v   (per head, within the sequence only)
//               x = LayerNorm(x + a Wo^T + bo)
//               x = LayerNorm(x + gelu(x W1^T + b1) W2^T + b2)
//   hidden = x; pooling (mean over the sequence, or its [CLS] row), then L2 normalization.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/safetensors.h"
#include "models/encoder.h"
#include "ops/cpu/matmul_bf16.h"

namespace rinfer::bert {

struct BertLayer {
  Tensor wq, wk, wv, wo, w1, w2;      // [n_out, n_in]
  Tensor bq, bk, bv, bo, b1, b2;      // f32 [n_out]
  Tensor ln1_g, ln1_b, ln2_g, ln2_b;  // f32 [n_embd]: after attention, after the FFN
};

// A layer's matrices rounded to bf16 in the AMX tile layout (LoadOptions::cpu.bf16_matmuls).
struct BertBf16Layer {
  cpu::PackedBf16 wq, wk, wv, wo, w1, w2;
};

struct BertWeights {
  Tensor word_emb;            // [n_vocab, n_embd]
  Tensor pos_emb;             // [n_positions, n_embd]
  Tensor type_emb;            // [n_token_types, n_embd]
  Tensor emb_ln_g, emb_ln_b;  // f32 [n_embd]
  std::vector<BertLayer> layers;
  std::vector<BertBf16Layer> bf16;  // one per layer with cpu.bf16_matmuls, else empty
};

// Whether a config.json's model_type is one this sample runs ("bert").
bool is_bert_config(const std::string& model_type);

class BertModel : public EncoderModel {
 public:
  // `path`: a directory with config.json + model.safetensors, or a .safetensors file with
  // config.json beside it.
  static Result<std::unique_ptr<BertModel>> load(const std::string& path, const LoadOptions& opts);
  // Random weights of a named shape (random_bert.h), made in memory; `source` names it.
  static Result<std::unique_ptr<BertModel>> load_random(std::string_view shape,
                                                        const std::string& source,
                                                        const LoadOptions& opts);

  std::string_view architecture() const override { return hp_.architecture; }
  std::string describe() const override;
  uint64_t weight_bytes_per_token() const override { return weight_bytes_; }
  const EncoderHParams& hparams() const override { return hp_; }
  std::string builtin_tokenizer_json() const override;
  Result<std::unique_ptr<EncoderRunner>> create_runner(
      const EncoderRunnerOptions& opts) const override;

  const BertWeights& weights() const { return w_; }
  const LoadOptions& load_options() const { return opts_; }

 private:
  BertModel() = default;
  Status bind(const SafetensorsModel& st);
  Status convert();
  Status pack_bf16();

  EncoderHParams hp_;
  BertWeights w_;
  LoadOptions opts_;
  std::shared_ptr<const SafetensorsModel> file_;  // keeps the mapping alive
  uint64_t weight_bytes_ = 0;
  bool random_ = false;  // load_random: the tokenizer is the synthetic vocabulary
};

// The CPU runner (models/bert/bert_runner.cpp).
Result<std::unique_ptr<EncoderRunner>> make_cpu_runner(const BertModel& m,
                                                       const EncoderRunnerOptions& opts);
// The CUDA runner (models/bert/cuda/bert_cuda_runner.cpp; CUDA builds only).
Result<std::unique_ptr<EncoderRunner>> make_cuda_runner(const BertModel& m,
                                                        const EncoderRunnerOptions& opts);

}  // namespace rinfer::bert
