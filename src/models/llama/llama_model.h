// The Llama-family decoder sample: the tensor layout that llama.cpp's converter writes for
// Llama 2/3, SmolLM2, Mistral (general.architecture llama or mistral) and Qwen2 (qwen2).
//
// Per layer (pre-norm residual blocks):
//   h = rms_norm(x) * attn_norm
//   q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)     biases: Qwen2
//   q, k = rope(q), rope(k)          normal pairing for llama/mistral GGUF (the converter
//                                    permutes Wq/Wk rows for it), NeoX pairing for qwen2
//   x += attention(q, K, V) Wo^T     grouped-query, causal, over the KV cache
//   h = rms_norm(x) * ffn_norm
//   x += (silu(h Wgate^T) * h Wup^T) Wdown^T
// logits = rms_norm(x) * output_norm  Wout^T, Wout = output.weight or, when the file has none,
// token_embd.weight (tied embeddings).
//
// Gemma 3 (gemma3) runs through the same code with options from the metadata (DecoderHParams):
// x = embd * sqrt(n_embd); per-head RMSNorm of q and k after the projections; the attention and
// MLP outputs are RMSNormed (post_attention_norm, post_ffw_norm) before the residual add; the
// MLP is GeGLU (tanh GELU); RoPE is NeoX with a per-layer base, and local layers attend only to
// the last sliding_window positions (a group of their own in the paged KV layout, kv_spec(),
// whose blocks the engine core releases once the window has left them).
//
// Weights are zero-copy views of the memory-mapped file in their stored dtype (the matmul
// kernels read every GGUF format); only norm weights and biases are converted to f32 at load.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "formats/gguf.h"
#include "models/model.h"
#include "models/op_profile.h"
#include "models/taps.h"

namespace rinfer {
class SafetensorsModel;
}  // namespace rinfer

namespace rinfer::llama {

// Architectures this sample handles (general.architecture).
bool supports_architecture(std::string_view arch);

// Reads and checks the hyper-parameters from the metadata (`<arch>.block_count`, ...).
Result<DecoderHParams> read_hparams(const GgufFile& file);

struct LayerWeights {
  Tensor attn_norm;   // [n_embd] f32
  Tensor wq;          // [n_head * head_dim, n_embd]
  Tensor wk;          // [n_head_kv * head_dim, n_embd]
  Tensor wv;          // [n_head_kv * head_dim, n_embd]
  Tensor wo;          // [n_embd, n_head * head_dim]
  Tensor bq, bk, bv;  // [n_head * head_dim], [kv_dim], [kv_dim] f32, or undefined
  Tensor ffn_norm;    // [n_embd] f32
  Tensor w_gate;      // [n_ff, n_embd]
  Tensor w_up;        // [n_ff, n_embd]
  Tensor w_down;      // [n_embd, n_ff]
  // Gemma 3 only (undefined otherwise):
  Tensor q_norm, k_norm;                 // [head_dim] f32, per-head RMSNorm of Q and K
  Tensor post_attn_norm, post_ffn_norm;  // [n_embd] f32, norms of the block outputs
  // The per-row scales of the matrices an FP8 checkpoint stores as f8_e4m3 codes (value = code *
  // scale[row]), f32 [n_out, 1] under the matrix's name, or of the W8A8 matrices weights: int8
  // makes (f32 [n_out]; the matrix then holds cpu::pack_w8a8's panels); undefined otherwise.
  struct Scales {
    Tensor wq, wk, wv, wo, w_gate, w_up, w_down;
  } scales;
};

// The layer matrices with their scales and names, for code that treats them alike.
struct LayerMatrix {
  Tensor LayerWeights::*w;
  Tensor LayerWeights::Scales::*scale;
  const char* name;
};
inline constexpr LayerMatrix kLayerMatrices[] = {
    {&LayerWeights::wq, &LayerWeights::Scales::wq, "q"},
    {&LayerWeights::wk, &LayerWeights::Scales::wk, "k"},
    {&LayerWeights::wv, &LayerWeights::Scales::wv, "v"},
    {&LayerWeights::wo, &LayerWeights::Scales::wo, "output projection"},
    {&LayerWeights::w_gate, &LayerWeights::Scales::w_gate, "gate"},
    {&LayerWeights::w_up, &LayerWeights::Scales::w_up, "up"},
    {&LayerWeights::w_down, &LayerWeights::Scales::w_down, "down"},
};

// An f8_e4m3 matrix [n_out, n_in] and its scales [n_out, 1] as f32 values (code * scale); a NaN
// code is an error naming `what` and the row.
Result<Tensor> dequantize_f8_rows(const Tensor& codes, const Tensor& scales, std::string_view what);

// The activations of one forward pass, sized once for `rows` tokens.
struct ForwardScratch {
  int64_t rows = 0;
  Tensor x;     // [rows, n_embd]            residual stream
  Tensor h;     // [rows, n_embd]            normed input / block output
  Tensor q;     // [rows, n_head * head_dim] queries
  Tensor attn;  // [rows, n_head * head_dim] attention output
  Tensor gate;  // [rows, n_ff]
  Tensor up;    // [rows, n_ff]
  Tensor k;     // [rows, kv_dim]            new keys, scattered into their arena rows after
  Tensor v;     // [rows, kv_dim]            new values
  static Result<ForwardScratch> create(const DecoderHParams& hp, int64_t rows);
};

// The KV side of the layer loop: where each layer's new keys and values are computed and how
// the layer attends over the paged arena (the CPU runner's PagedAccess).
class KvAccess {
 public:
  virtual ~KvAccess() = default;
  // Where layer il's new keys and values ([nt, kv_dim] each) are written by the projections.
  virtual void new_kv(int64_t il, float** k, float** v) = 0;
  // After RoPE of q and of the new keys: stores them where they belong and writes the
  // attention of q [nt, n_head, head_dim] to attn (same shape).
  virtual Status attend(int64_t il, const float* q, float* attn) = 0;
  // What layer il's attend() moves and computes (the profile's roofline).
  virtual OpCost attend_cost(int64_t il) const = 0;
};

// The load options both loaders (GGUF, Hugging Face) accept: max_batch in range, no bf16
// matmuls (an encoder-only strategy).
Status check_llama_load_options(const LoadOptions& opts);

// The layers that keep their stored format when LoadOptions::weight_format converts: [n_layer]
// flags from keep_precision_layers (negative counts from the last); an index outside the model is
// an error.
Result<std::vector<bool>> kept_layers(int64_t n_layer, std::span<const int64_t> keep);

class LlamaModel final : public DecoderModel {
 public:
  // Binds and validates every tensor (a missing one or a wrong shape is an error naming the
  // tensor, the expected and the actual shape) and allocates the scratch buffers.
  static Result<std::unique_ptr<LlamaModel>> load(std::shared_ptr<const GgufFile> file,
                                                  const LoadOptions& opts);
  // A Hugging Face checkpoint (llama_loader_hf.cpp): `path` is a directory with config.json and
  // model.safetensors (or a sharded model.safetensors.index.json), or a .safetensors / index
  // file with config.json next to it. config.json `architectures`: LlamaForCausalLM,
  // MistralForCausalLM, Qwen2ForCausalLM. HF keeps Wq/Wk unpermuted: RoPE is NeoX.
  static Result<std::unique_ptr<LlamaModel>> load_hf(const std::string& path,
                                                     const LoadOptions& opts);

  std::string_view architecture() const override { return hp_.architecture; }
  std::string describe() const override;
  uint64_t weight_bytes_per_token() const override { return weight_bytes_; }
  const DecoderHParams& hparams() const override { return hp_; }

  // A CPU runner (llama_runner.cpp): multi-sequence batches over a paged host KV arena.
  Result<std::unique_ptr<DecoderRunner>> create_runner(const RunnerOptions& opts) const override;
  // f32, or int8 codes with a scale per 16 values (strategies.kv_cache.dtype).
  Result<kv::KvSpec> kv_spec(int64_t n_ctx, int64_t block_size) const override {
    return kv_spec_of(kv_dtype(), n_ctx, block_size);
  }
  DType kv_dtype() const { return opts_.kv_dtype.value_or(DType::kF32); }

  // The layer loop over nt = tokens.size() rows of `s` (the embedding, every block): leaves the
  // residual stream in s.x. `embeddings` ([nt, n_embd], optional) replaces the token
  // embeddings. pos0 names the first position for the observer and for errors. kCancelled
  // before a layer when `cancel` (may be null) reads true.
  // `ctx`: the model's kernels with per-call settings (OpContext::single_rows). `taps` (may be
  // null): the activations it wants (models/taps.h), every kind but logits. `timer` (may be
  // null) times each op (models/op_profile.h).
  Status run_layers(const cpu::OpContext& ctx, ForwardScratch& s, std::span<const int32_t> tokens,
                    std::span<const float> embeddings, std::span<const int32_t> positions,
                    KvAccess& kv, int64_t pos0, const std::atomic<bool>* cancel,
                    TapSink* taps = nullptr, OpTimer* timer = nullptr) const;
  // The output norm and projection of rows `rows` (ascending) of s.x: logits [rows, n_vocab],
  // handed to `taps` (may be null) as the logits tap; `timer` as run_layers'.
  Status compute_logits(const cpu::OpContext& ctx, ForwardScratch& s, std::span<const int32_t> rows,
                        float* logits, TapSink* taps = nullptr, OpTimer* timer = nullptr) const;
  float attention_scale() const;
  const cpu::OpContext& ops() const { return opts_.cpu.ops; }
  const LoadOptions& load_options() const { return opts_; }

  // Sees the residual stream of every forward chunk: after the embedding (and its scale) with
  // layer -1, then after each block il. x is [n_tokens, n_embd], rows for positions pos0 ...
  // pos0 + n_tokens - 1; valid during the call only. Unset (the default): no cost.
  using LayerObserver = std::function<void(int64_t layer, int64_t pos0, const float* x,
                                           int64_t n_tokens, int64_t n_embd)>;
  void set_layer_observer(LayerObserver observer) { observer_ = std::move(observer); }

  // The bound host weights (views of the model file), for backends that upload them.
  const Tensor& tok_embd() const { return tok_embd_; }
  const Tensor& output_norm() const { return output_norm_; }
  const Tensor& output() const { return output_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Keeps the memory the weights view alive (the mapped file) when the model goes.
  std::shared_ptr<const void> weight_source() const { return file_; }

 private:
  LlamaModel() = default;
  Status bind_weights(const std::shared_ptr<const GgufFile>& file);
  Status bind_hf_weights(const std::shared_ptr<const SafetensorsModel>& st);
  // LoadOptions::weight_format: converts the layer matrices (all but keep_precision_layers) and,
  // with convert_embeddings, the embedding table and output projection (owned copies).
  Status convert_weights();
  // weights: int8 — each layer matrix not in `keep` becomes int8 codes with an f32 scale per
  // row (quantize_rows_int8) in LayerWeights::scales, the codes packed for the W8A8 matmul
  // (cpu::pack_w8a8).
  Status quantize_int8_rows(const std::vector<bool>& keep);

  std::shared_ptr<const void> file_;  // what the weights view: a GgufFile or a SafetensorsModel
  LoadOptions opts_;
  DecoderHParams hp_;
  uint64_t weight_bytes_ = 0;

  Tensor tok_embd_;     // [n_vocab, n_embd]
  Tensor output_norm_;  // [n_embd] f32
  Tensor output_;       // [n_vocab, n_embd] (== tok_embd_ when tied)
  std::vector<LayerWeights> layers_;

  LayerObserver observer_;
};

}  // namespace rinfer::llama
