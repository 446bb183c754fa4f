// The standard interface shared by every model sample (layer 3).
//
// A sample runs one model family through four stages:
//   load_model   model file -> weights bound to the architecture, validated (dims come only from
//                the file; the architecture is chosen by its metadata, never by a name switch)
//   preprocess   request -> model inputs (chat messages -> token ids; later: images -> pixels)
//   infer        model inputs -> raw outputs (logits of the requested rows; later: embeddings,
//                class scores)
//   postprocess  raw outputs -> answer (sampled token -> text piece; later: normalized
//                embedding, top-k labels)
//
// ModelSample is the part every sample has (what it is, what it reads). Each task adds its
// own infer() signature on top: DecoderModel below is the one for text generation, where infer
// runs a batch of tokens through the transformer against a KV cache. The text stages around
// it (chat template + tokenizer, streaming detokenizer + stop strings) live in
// models/text_generation.h. EncoderModel (models/encoder.h) is the task interface of encoders
// (BERT embeddings; the image classifier and vision encoder take its form); load_model's
// registry (models/registry.h) picks the sample from the file's metadata.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "kv/kv_spec.h"
#include "models/forward_batch.h"
#include "ops/cpu/ops.h"
#include "rinfer/status.h"
#include "strategies/strategy_config.h"

namespace rinfer {

struct ModelInfo;
struct CalibrationStats;

struct SamplingParams;
namespace kv {
class KvArena;
}  // namespace kv

enum class ModelTask : uint8_t {
  kTextGeneration,  // decoder-only LLM: logits for the next token
  kEmbedding,       // sentence embeddings (EncoderModel)
  kClassification,  // class scores (later)
};
std::string_view model_task_name(ModelTask task);

// What the CPU kernels need: the op context, and how encoders multiply their matrices.
struct CpuLoadOptions {
  cpu::OpContext ops;  // kernels (reference | fast), the thread pool, int8 activations
  // Matrices rounded to bf16 at load and multiplied on AMX tiles with bf16 activations
  // (strategies.quantization.activations: bf16; encoders on a CPU with AMX-BF16).
  bool bf16_matmuls = false;
};

// What the CUDA models need beyond the generic part.
struct CudaLoadOptions {
  bool graphs = true;  // decode steps replayed from a CUDA graph (strategies.cuda_graphs)
  // Each decode row's token sampled on the device (strategies.device_sampling; the runner's
  // forward_sampled and decode_ahead). Off: the logits go to the host every step and the host
  // Sampler picks the token (the baseline).
  bool device_sampling = true;
  AllocatorKind allocator = AllocatorKind::kCaching;  // device memory (strategies.allocator)
  // The kernels' switches (strategies.kernels.cuda), applied by each CUDA runner at creation.
  cuda::KernelConfig kernels;
};

// The part of a recipe's network description the checkpoint cannot give: the strides of the
// blocks, the activation, the padding rule and the batch norms' epsilon.
enum class ConvPadding : uint8_t {
  kSymmetric,  // PyTorch's: k / 2 on every side
  kSame,       // TensorFlow's "same" (EfficientNet-Lite): out = ceil(in / stride)
};
std::string_view conv_padding_name(ConvPadding p);

struct ConvNetSpec {
  std::string family;            // "inverted_residual" (MobileNetV2, EfficientNet) | "resnet"
  std::vector<int64_t> strides;  // one per block, in order
  Activation activation = Activation::kRelu6;
  ConvPadding padding = ConvPadding::kSymmetric;
  float bn_eps = 1e-5f;
};

// How to load and run a model: a generic part and the parts of each backend. The thread pool
// (cpu.ops.pool) is created once by the caller (the engine) and must outlive the model.
struct LoadOptions {
  Device device;            // cpu or cuda:N (CUDA builds)
  int64_t max_batch = 512;  // tokens per forward chunk: sizes the scratch buffers, allocated once
  // Weight format at load (strategies.quantization.weights):
  // nullopt keeps each tensor's stored dtype; otherwise matrices are converted (bf16, f16,
  // q8_0, q4_0, q4_1, ...).
  std::optional<DType> weight_format;
  // Layers that keep their stored (higher) precision when weight_format converts: indices into
  // the blocks; -1 means the last. Token embedding and output projection never convert unless
  // convert_embeddings.
  std::vector<int64_t> keep_precision_layers;
  bool convert_embeddings = false;
  // strategies.quantization.smoothing: the activation statistics of `rinfer calibrate`
  // (formats/calibration.h) and their file, for messages; the int8 conversion smooths the
  // matrices that read the normed residual stream with them. Null: no smoothing.
  std::shared_ptr<const CalibrationStats> smoothing;
  std::string smoothing_file;
  FusionOptions fusion;
  // The KV cache's element type (strategies.kv_cache.dtype): nullopt is the device's default,
  // bf16 on CUDA and f32 on the CPU (whose cache is f32 only); CUDA also takes f32.
  std::optional<DType> kv_dtype;
  CpuLoadOptions cpu;    // read by the CPU models (and for the thread pool by every loader)
  CudaLoadOptions cuda;  // read by the CUDA models
  // An image classifier's network description (the recipe's classifier.network): what its
  // checkpoint, a bare state dict, cannot say. Read by the convnet family only.
  std::optional<ConvNetSpec> network;
};

class ModelSample {
 public:
  virtual ~ModelSample() = default;

  virtual ModelTask task() const = 0;
  // The metadata's general.architecture ("llama", "qwen2", ...).
  virtual std::string_view architecture() const = 0;
  // One line: "llama, 30 layers, n_embd 576, 9 heads (3 kv) ..., 98.4 MB of weights".
  virtual std::string describe() const = 0;
  // Bytes of weights read by one forward pass of one token (every matrix once, the output
  // projection included): the memory traffic that bounds decode speed.
  virtual uint64_t weight_bytes_per_token() const = 0;
};

// ---- text generation ------------------------------------------------------------------------

// Hyper-parameters of a decoder-only transformer, all read from the model file.
struct DecoderHParams {
  std::string architecture;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;  // the context length the model was trained for
  float norm_eps = 1e-5f;
  cpu::RopeParams rope;
  bool tied_output = false;  // no output.weight: the token embedding is the output projection
  bool attn_bias = false;    // Q/K/V biases (Qwen2)

  // Gemma-style options (all off for Llama/Qwen2), read from the metadata and tensor list.
  float embd_scale = 1.0f;  // token embeddings are multiplied by this (Gemma: sqrt(n_embd))
  bool qk_norm = false;     // per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm)
  bool post_norms = false;  // RMSNorm of the attention and MLP outputs before the residual add
  bool gelu_ffn = false;    // GeGLU (tanh GELU) instead of SwiGLU
  float attn_scale = 0.0f;  // attention score scale; 0: 1/sqrt(head_dim)
  // Per layer: the sliding window (0: full causal attention) and the RoPE base. Empty: every
  // layer is global with rope.freq_base.
  struct LayerAttn {
    int64_t window = 0;
    float rope_base = 10000.0f;
    float rope_scale = 1.0f;  // linear RoPE scaling (Gemma 3: global layers only)
  };
  std::vector<LayerAttn> layer_attn;

  int64_t kv_dim() const { return n_head_kv * head_dim; }  // floats per position per layer
};

// Executes multi-sequence forward batches of one DecoderModel on one device: the mutable half of
// a model (scratch buffers sized once for max_tokens rows; on CUDA, streams and graphs). The
// model's weights are shared and read-only, so several runners can serve one model.
struct RunnerOptions {
  int64_t max_tokens = 512;  // rows per forward batch (sizes the scratch)
  int64_t max_seqs = 256;    // sequences per forward batch
};

class DecoderRunner {
 public:
  virtual ~DecoderRunner() = default;
  virtual const RunnerOptions& options() const = 0;
  virtual Device device() const = 0;
  // Runs the batch (check_forward_batch first): writes the keys and values of its tokens into
  // their blocks of `kv` and the logits of batch.logit_rows to logits [n_out, n_vocab]. The
  // blocks of positions before each sequence's new tokens are only read. kCancelled when
  // batch.cancel reads true between layers (the new tokens' blocks then hold partial values,
  // which the engine treats as not computed).
  virtual Status forward(const ForwardBatch& batch, kv::KvArena& kv, float* logits) = 0;
  // The most logit rows one forward pass gives.
  virtual int64_t max_logit_rows() const { return options().max_tokens; }

  // Sampling on the runner's device, so that no logits row crosses to the host: whether these
  // settings are taken (the CPU runner takes none: its rows are already in host memory).
  virtual bool samples_on_device(const SamplingParams& /*sampling*/) const { return false; }
  // forward, then logit row r sampled with rows[r] (one per batch.logit_rows entry): ids[r] the
  // chosen id, or -1 when the row held NaN or +inf or no finite value. The same chain and draws
  // as the host Sampler with that uniform. Errors as forward.
  struct RowSampling {
    const SamplingParams* sampling = nullptr;
    std::span<const int32_t> history;  // every token so far (the penalties read its tail)
    float uniform = 0.0f;              // the draw (temperature > 0)
    // Structured output: the tokens the row may take, a bitmask of (n_vocab + 31) / 32 words
    // (bit t % 32 of word t / 32 for token t), read once `prepare` has returned; null: any.
    const uint32_t* allow = nullptr;
  };
  // `prepare` (may be empty) runs once the pass is queued on the device and before any row is
  // sampled, so that the host fills the rows' `allow` masks while the device computes; its
  // error fails the call. Rows with masks need masks_on_device().
  virtual Status forward_sampled(const ForwardBatch& batch, kv::KvArena& kv,
                                 std::span<const RowSampling> rows, int32_t* ids,
                                 const std::function<Status()>& prepare = {});
  // Whether forward_sampled takes rows with `allow` masks.
  virtual bool masks_on_device() const { return false; }
  // Host memory for the masks of n_rows rows (row r's at r * (n_vocab + 31) / 32 words) that the
  // next forward_sampled uploads from without a copy (pinned), or null: any host memory will do.
  virtual uint32_t* mask_staging(size_t /*n_rows*/) { return nullptr; }

  // Decode steps of one sequence queued ahead of the host (one request alone, where the device
  // would otherwise wait for the host between steps): step 0 is `first` (one sequence, one row,
  // sampled on the device with `sampling`); step k + 1 feeds step k's id at the next position
  // on the device (the penalties' window grows by that id there too) and is queued before the
  // host reads that id. Whether the runner does this for these settings:
  virtual bool decodes_ahead(const SamplingParams& /*sampling*/) const { return false; }
  struct DecodeAhead {
    const ForwardBatch* first = nullptr;
    RowSampling sampling;  // step 0's draw and history; later steps' draws come from next()
    // Before step k >= 1 is queued: its batch (position, length, tables; its token is not read)
    // and its draw, or nullptr to queue no more.
    std::function<const ForwardBatch*(int64_t k, float& uniform)> next;
    // Step k's id, in order (-1: its logits held NaN or +inf, or no finite value): true goes on,
    // false stops (a step queued ahead is then dropped; it wrote the keys and values of one
    // position past the last id handed out).
    std::function<bool(int64_t k, int32_t id)> on_token;
  };
  // Runs the steps until next() or on_token() stops them; returns the ids handed out. Errors as
  // forward (the steps handed out before it stay valid).
  virtual Result<int64_t> decode_ahead(const DecodeAhead& d, kv::KvArena& kv);
  // An arena for `spec` on the runner's device, zero-filled: n_blocks[g] blocks of group g.
  virtual Result<std::unique_ptr<kv::KvArena>> create_arena(const kv::KvSpec& spec,
                                                            std::span<const int32_t> n_blocks) = 0;
};

// What every runner checks of the KV spec it is given: its element type is `dtype` (the
// backend's), and its layers, kv_dim and windows are the model's (hp.layer_attn).
Status check_runner_spec(const kv::KvSpec& spec, const DecoderHParams& hp, DType dtype,
                         const char* backend);

class DecoderModel : public ModelSample {
 public:
  ModelTask task() const override { return ModelTask::kTextGeneration; }
  virtual const DecoderHParams& hparams() const = 0;

  // The paged KV layout this model runs against: one group per distinct attention window,
  // kv_dim and head_dim from the hyper-parameters, the device's element type (f32 on the CPU
  // unless strategies.kv_cache.dtype says int8).
  virtual Result<kv::KvSpec> kv_spec(int64_t n_ctx, int64_t block_size) const;
  // A runner on the model's device (unsupported until the backend has one).
  virtual Result<std::unique_ptr<DecoderRunner>> create_runner(const RunnerOptions& opts) const;

  // Device memory in use (weights + scratch + caches), 0 on CPU; peak since load.
  virtual uint64_t device_bytes_peak() const { return 0; }

 protected:
  // kv_spec with the cache's element type.
  Result<kv::KvSpec> kv_spec_of(DType dtype, int64_t n_ctx, int64_t block_size) const;
};

// postprocess for text generation: token ids -> text, as they are produced (implemented over
// the tokenizer's streaming decoder, which never emits broken UTF-8).
class TokenTextStream {
 public:
  virtual ~TokenTextStream() = default;
  virtual bool is_end_of_generation(int32_t token) const = 0;
  // The text this token completes (may be empty: a partial UTF-8 sequence is held).
  virtual std::string push(int32_t token) = 0;
  // End of the reply: what is still held; resets for the next reply.
  virtual std::string finish() = 0;
};

// Reads the model source's metadata, finds the family in the registry's table that claims it and
// loads it with that family's factory (models/registry.h: the sources, the table; each family's
// models/<family>/register.cpp says what it matches).
Result<std::unique_ptr<ModelSample>> load_model(const std::string& path, const LoadOptions& opts);

// Whether `rinfer run` can generate text with the model `info` describes, from its metadata
// alone (no weights read): ok, or an error that says why not (no sample for its architecture,
// no tokenizer in the file).
Status check_text_generation(const ModelInfo& info);

// load_model for callers that need text generation: errors when the model is something else.
Result<std::unique_ptr<DecoderModel>> load_decoder_model(const std::string& path,
                                                         const LoadOptions& opts);

}  // namespace rinfer
