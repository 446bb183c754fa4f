// Internal to the CUDA Llama model (llama_cuda_model.cpp: loading and the forward pass;
// llama_cuda_model_decode.cpp: decode graphs and decode steps sampled on the device): the
// device-side layer, KV storage and the model class. Not part of the public interface, which is
// llama_cuda_model.h.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/cuda/cublas_lt.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/pinned.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "kv/kv_arena.h"
#include "kv/kv_cache.h"
#include "models/cuda_weight_pack.h"
#include "models/llama/cuda/llama_cuda_model.h"
#include "ops/cpu/sampler.h"
#include "ops/cuda/model_ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::llama {

using cuda::DeviceBuffer;
using cuda::DeviceWeight;

// Rows of logits computed per output GEMM (bounds the logits buffer for 256k vocabularies).
constexpr int64_t kLogitRowsPerPass = 64;

// The smallest attention length bound of a decode graph (LlamaCudaModel::ensure_graph): the
// fused decode attention's grid is sized for the bound, and its blocks past the real length
// exit at once, but not for free; why 1024 is measured in docs/gpu-inference.md.
constexpr int64_t kMinGraphBound = 1024;

// The smallest attention length bound of a decode graph (kMinGraphBound, twice that, ...,
// capped at n_ctx) that holds n_kv positions; level: its index from the smallest.
inline int64_t graph_bound(int64_t n_kv, int64_t n_ctx, size_t& level) {
  level = 0;
  int64_t bound = kMinGraphBound;
  while (bound < n_kv && bound < n_ctx) {
    bound *= 2;
    ++level;
  }
  return std::min(bound, n_ctx);
}

// Every weight matrix of one block on the device.
struct DeviceLayer {
  DeviceWeight wqkv;          // [q_dim + 2 kv_dim, n_embd] when merged, else undefined
  DeviceWeight wq, wk, wv;    // when not merged
  DeviceWeight wo;            // [n_embd, q_dim]
  DeviceWeight wgu;           // [2 n_ff, n_embd] when merged (gate rows, then up rows)
  DeviceWeight w_gate, w_up;  // when not merged
  DeviceWeight w_down;        // [n_embd, n_ff]
  DeviceBuffer vecs;          // the f32 vectors below, in one allocation
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* bqkv = nullptr;  // [q_dim + 2 kv_dim] or nullptr
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  bool merged_qkv() const { return wqkv.data != nullptr; }
  bool merged_gu() const { return wgu.data != nullptr; }
};

// The device K/V of one sequence: per layer K and V bf16 [rows, kv_dim].
class DeviceKvStorage final : public KvBackendStorage {
 public:
  uint64_t bytes() const override { return bytes_; }
  std::vector<DeviceBuffer> k, v;
  std::vector<int64_t> rows;  // per layer (ring of window + max_batch - 1 for local layers)
  uint64_t bytes_ = 0;
  uint64_t id = 0;  // tells graphs captured for another cache apart
};

inline bool q16_layout(const DeviceWeight& w) { return cuda::matvec_q16_supported(w.dtype); }

// How the matrices after a pre-norm get their input in decode. kKernel: a norm kernel wrote h
// (and its int16 form). The norm without a kernel of its own (fusion.residual_norm; measured
// in docs/gpu-inference.md): kQ16, the integer matvec before it (Wo, ffn_down) adds its rows
// to the residual and leaves the int16 blocks and sums of squares in s.q16n / s.norm_parts
// (cuda::matvec_q16_res_norm), the integer matvecs after it scale by 1 / rms
// (cuda::SplitNorm); kRow, the matvec before it (any layout, or none: the embedding) adds its
// rows to the residual s.x in place and the 16-bit matvecs after it norm s.x as they read it
// (cuda::matvec_rms_norm).
enum class NormMode { kKernel, kQ16, kRow };
struct NormIn {
  NormMode mode = NormMode::kKernel;
  const float* w = nullptr;  // kRow: the norm's weights
};

class LlamaCudaModel final : public DecoderModel {
 public:
  static Result<std::unique_ptr<LlamaCudaModel>> create_empty(const DecoderHParams& hp,
                                                              const LoadOptions& opts);
  Status upload(const LlamaModel& host);
  Status make_random(DType dtype, uint64_t seed);
  Status finish_load();

  std::string_view architecture() const override { return hp_.architecture; }
  std::string describe() const override;
  uint64_t weight_bytes_per_token() const override { return weight_bytes_; }
  const DecoderHParams& hparams() const override { return hp_; }
  Status infer(const DecoderBatch& batch, KvCache& cache, float* logits) override;
  Result<KvCache> create_cache(int64_t n_ctx) const override;
  bool can_decode_on_device(const SamplingParams& sp) const override {
    return opts_.cuda.device_sampling &&
           cuda::decode_sampling_supported(decode_sampling(sp), hp_.n_vocab).ok();
  }
  Result<DeviceDecodeResult> decode_on_device(KvCache& cache, const DeviceDecode& d) override;
  uint64_t device_bytes_peak() const override { return peak_bytes_; }
  // The paged KV cache in the model's KV dtype, and the multi-sequence runner
  // (llama_cuda_runner.cpp).
  Result<kv::KvSpec> kv_spec(int64_t n_ctx, int64_t block_size) const override;
  Result<std::unique_ptr<DecoderRunner>> create_runner(const RunnerOptions& opts) const override;

 private:
  friend class LlamaCudaRunner;
  LlamaCudaModel() = default;

  // The activations of one forward chunk, allocated per call from the recipe's allocator (the
  // caching allocator serves them from its free lists; the plain one calls cudaMalloc/cudaFree).
  struct Scratch {
    std::vector<DeviceBuffer> owned;
    float* x = nullptr;         // [nt, n_embd] residual stream
    float* h = nullptr;         // [nt, n_embd] normed input (decode)
    uint16_t* hb = nullptr;     // [nt, n_embd] bf16 normed input (prefill)
    float* qkv = nullptr;       // [nt, qkv_dim]
    float* q = nullptr;         // [nt, q_dim] contiguous queries (prefill)
    float* attn = nullptr;      // [nt, q_dim] f32 (decode) ...
    uint16_t* attnb = nullptr;  // ... or bf16 (prefill)
    float* o = nullptr;         // [nt, n_embd]
    float* gu = nullptr;        // [nt, 2 n_ff]
    float* act = nullptr;       // [nt, n_ff] f32 (decode)
    uint16_t* actb = nullptr;   // [nt, n_ff] bf16 (prefill)
    void* q16 = nullptr;        // quantized activation workspace (decode)
    size_t q16_bytes = 0;
    void* q16n = nullptr;  // [n_embd] int16 blocks a split norm's producer writes (decode)
    size_t q16n_bytes = 0;
    float* norm_parts = nullptr;  // the split norm's sums of squares (decode)
    void* gemm_ws = nullptr;      // dequantization workspace (prefill)
    size_t gemm_ws_bytes = 0;
    void* attn_ws = nullptr;  // attention workspace
    size_t attn_ws_bytes = 0;
    int32_t* tokens = nullptr;     // [nt]
    int32_t* positions = nullptr;  // [nt]
    int32_t* n_kv = nullptr;       // [1] the KV length after this chunk (graphs)
    int32_t* rows = nullptr;       // [nt] logit rows
    float* logits = nullptr;       // [min(nt, kLogitRowsPerPass), n_vocab]
    uint64_t bytes = 0;
  };
  Result<Scratch> allocate_scratch(int64_t nt);

  // Host inputs of a chunk, staged in pinned memory: tokens, positions, n_kv, rows.
  Status stage_inputs(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                      std::span<const int32_t> rows, int64_t n_kv, const Scratch& s);
  // Queues the whole chunk (no host synchronization); logits of the requested rows land in
  // s.logits (decode) or are copied pass by pass to `logits_host` (prefill: synchronizes).
  // kv: the contiguous cache, or null while paged_ is set (the runner's one-row decode).
  Status forward(int64_t nt, int64_t n_past, int64_t n_rows, DeviceKvStorage* kv, const Scratch& s,
                 float* logits_host);
  // The mode of a pre-norm between `producer` (null: the embedding), whose input has its int16
  // form in s.q16 when producer_q16_in, and `consumers`.
  NormMode norm_mode(const DeviceWeight* producer, bool producer_q16_in,
                     std::initializer_list<const DeviceWeight*> consumers) const;
  // The output projection (the embedding table when tied).
  const DeviceWeight& output_weight() const { return hp_.tied_output ? tok_embd_ : output_; }
  // h_quantized: the caller left the int16 form of h in s.q16 too (decode). norm_in: how this
  // layer's attention norm reaches QKV; norm_out: returns how the next norm (the next layer's
  // attention norm, or the output norm) reaches its matrices, kKernel when it is left to the
  // caller's norm kernel.
  Status layer_forward(int64_t il, int64_t nt, int64_t n_past, DeviceKvStorage* kv,
                       const Scratch& s, bool h_quantized, NormIn norm_in, NormIn& norm_out);
  // The layer's attention (llama_cuda_attention.cpp) of the rows in s.qkv into s.attn (decode,
  // f32; aq: its int16 form is in s.q16 too) or s.attnb (prefill, bf16), over kv or paged_.
  Status attention(int64_t il, int64_t nt, int64_t n_past, DeviceKvStorage* kv, const Scratch& s,
                   bool& aq);
  // y[nt, n_out] = x W^T: matvec for one token (f32 x, or the shared int16 x for quantized
  // layouts), GEMM for more (bf16 x); norm: the input is a norm without a kernel (above).
  Status project(const DeviceWeight& w, int64_t nt, const float* x_f32, const uint16_t* x_bf16,
                 bool x_quantized, const Scratch& s, float* y, int64_t y_stride, NormIn norm = {});
  // The producer of a kQ16 or kRow norm (its input: the int16 blocks in s.q16 when x_quantized,
  // else x_f32): s.x += W x, and for kQ16 the norm with weights norm_w for the consumers.
  Status norm_produce(NormMode mode, const DeviceWeight& producer, const float* x_f32,
                      bool x_quantized, const float* norm_w, const Scratch& s);
  cuda::SplitNorm split_norm(const Scratch& s) const {
    return {s.norm_parts, hp_.n_embd, hp_.norm_eps};
  }
  // Prepares the decode input h for the matrices that read it: quantizes it once when any is
  // in a q16 layout.
  Status quantize_for(std::initializer_list<const DeviceWeight*> ws, const float* h, int64_t n,
                      const Scratch& s, bool& quantized);
  Status quantize_for_all(const float* h, int64_t n, const Scratch& s, bool& quantized) {
    quantized = false;
    if (n % 32 != 0) return ok_status();
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation qa,
                            cuda::quantized_activation_in(s.q16, s.q16_bytes, n));
    RINFER_RETURN_IF_ERROR(cuda::quantize_activation(h, qa, stream_.get()));
    quantized = true;
    return ok_status();
  }
  // out = rms_norm(x + delta) with the residual updated in place (fused or not); bf16 output
  // for prefill. Decode with want_q16 (and the fusion on) also writes the int16 form into
  // s.q16 in the same kernel; returns whether it did.
  Result<bool> residual_norm(float* x, const float* delta, const float* w, int64_t nt,
                             const Scratch& s, bool bf16_out, bool want_q16 = false);
  static bool any_q16(std::initializer_list<const DeviceWeight*> ws) {
    for (const DeviceWeight* w : ws) {
      if (w->data != nullptr && q16_layout(*w)) return true;
    }
    return false;
  }
  Status decode_step_graph(int32_t token, int64_t pos, DeviceKvStorage& kv, float* logits);
  // The device storage of a cache this model made, else an error.
  Result<DeviceKvStorage*> device_kv(KvCache& cache, const char* op) const;
  // The decode graphs' scratch, (re)allocated for cache `kv` (the graphs of another cache are
  // dropped), and the graph of one step captured at position pos when missing: with the logits
  // copied to pinned host memory (sampled: false), or with the device sampler's kernel after
  // the output projection (sampled: true).
  Status ensure_graph_scratch(const DeviceKvStorage& kv);
  Result<cudaGraphExec_t> ensure_graph(bool sampled, int64_t pos, DeviceKvStorage& kv);
  // One queued step of decode_on_device: forward + the device sampler (a graph replay or the
  // kernels one by one), then the event of its slot.
  Status queue_sampled_step(int64_t pos, DeviceKvStorage& kv, const Scratch& s);
  static cuda::DecodeSampling decode_sampling(const SamplingParams& sp) {
    cuda::DecodeSampling d;
    d.chain = {sp.temperature, sp.top_k, sp.top_p, sp.min_p};
    d.repeat_penalty = sp.repeat_penalty;
    d.presence_penalty = sp.presence_penalty;
    d.frequency_penalty = sp.frequency_penalty;
    d.last_n = sp.repeat_last_n;
    return d;
  }

  DecoderHParams hp_;
  LoadOptions opts_;
  bool split_norm_ = true;
  int device_ = 0;
  cuda::DeviceAllocator* alloc_ = nullptr;
  cuda::Stream stream_;
  cuda::CublasLt lt_;

  DeviceWeight tok_embd_;
  DeviceWeight output_;  // undefined when tied (tok_embd_ is the output projection)
  DeviceBuffer output_norm_;
  std::vector<DeviceLayer> layers_;
  uint64_t weight_bytes_ = 0;
  uint64_t weight_device_bytes_ = 0;
  int64_t qkv_dim_ = 0, q_dim_ = 0, kv_dim_ = 0;
  size_t gemm_ws_bytes_ = 0;
  DeviceBuffer attn_counters_;  // cuda::attention_decode_rope's counters (zero between launches)

  size_t pinned_in_bytes() const {
    return static_cast<size_t>(3 * opts_.max_batch + 1) * sizeof(int32_t);
  }
  // Pinned staging for inputs and decode logits.
  void* pinned_in_ = nullptr;       // 3 * max_batch + 1 int32
  float* pinned_logits_ = nullptr;  // [n_vocab]
  std::vector<int32_t> rows_;

  // The engine core's one-row decode steps (LlamaCudaRunner) run forward() over the runner's
  // paged arena: set around the call, null otherwise.
  struct PagedPass {
    kv::KvArena* arena = nullptr;
    cuda::PagedAttentionParams ap;    // every field but window and tables
    int64_t n_kv = 0;                 // the sequence's positions after this step (host)
    const int32_t* tables = nullptr;  // group g's tables at tables + g * group_stride
    int64_t group_stride = 0;
    const int32_t* slots = nullptr;  // group g's slot at slots + g
    uint16_t* out = nullptr;         // [q_dim] bf16, widened into s.attn
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
  };
  const PagedPass* paged_ = nullptr;

  int64_t kv_n_ctx_ = 0;           // n_ctx of the cache the current infer() runs against
  DType kv_dtype_ = DType::kBF16;  // the KV cache's elements (LoadOptions::kv_dtype)

  // CUDA graphs of the decode step, captured for one cache and one scratch set: logits to the
  // host (infer), or the token sampled on the device (decode_on_device).
  // One graph per attention length bound (kMinGraphBound, twice that, ... up to the cache's
  // n_ctx; index 0 the smallest): graphs_[0] with the logits, graphs_[1] sampled.
  std::vector<cudaGraphExec_t> graphs_[2];
  uint64_t graph_cache_id_ = 0;
  int64_t graph_bound_ = 0;  // while capturing: the decode attention's length bound
  // decode_on_device: the sampler's device state and rings, and one event per step in flight.
  std::optional<cuda::DecodeSampler> dsampler_;
  cudaEvent_t step_done_[2] = {nullptr, nullptr};
  std::optional<Scratch> graph_scratch_;
  mutable uint64_t next_cache_id_ = 1;

  mutable uint64_t live_bytes_ = 0;
  mutable uint64_t peak_bytes_ = 0;
  void note_bytes(int64_t delta) const {
    live_bytes_ = static_cast<uint64_t>(static_cast<int64_t>(live_bytes_) + delta);
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }

 public:
  ~LlamaCudaModel() override {
    for (auto& v : graphs_) {
      for (cudaGraphExec_t g : v) {
        if (g != nullptr) cudaGraphExecDestroy(g);
      }
    }
    for (cudaEvent_t e : step_done_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (pinned_in_ != nullptr) {
      cuda::pinned_host_allocator().deallocate(pinned_in_, pinned_in_bytes());
    }
    if (pinned_logits_ != nullptr) {
      cuda::pinned_host_allocator().deallocate(pinned_logits_,
                                               static_cast<size_t>(hp_.n_vocab) * sizeof(float));
    }
  }
};

}  // namespace rinfer::llama
