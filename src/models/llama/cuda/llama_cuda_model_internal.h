// Internal to the CUDA Llama model (llama_cuda_model.cpp: loading and the one-row decode pass;
// llama_cuda_runner.h: the engine core's runner; llama_cuda_graphs.cpp: its decode graphs): the
// device-side layer and the model class. Not part of the public interface, which is
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
#include "models/cuda_weight_pack.h"
#include "models/llama/cuda/llama_cuda_model.h"
#include "models/llama/cuda/llama_cuda_profile.h"
#include "ops/cpu/sampler.h"
#include "ops/cuda/model_ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::llama {

using cuda::DeviceBuffer;
using cuda::DeviceWeight;

// The smallest attention length bound of a one-row decode graph (OneRowGraphs): the
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
  uint64_t device_bytes_peak() const override { return peak_bytes_; }
  // The paged KV cache in the model's KV dtype, and the multi-sequence runner
  // (llama_cuda_runner.h).
  Result<kv::KvSpec> kv_spec(int64_t n_ctx, int64_t block_size) const override;
  Result<std::unique_ptr<DecoderRunner>> create_runner(const RunnerOptions& opts) const override;

 private:
  friend class LlamaCudaRunner;
  LlamaCudaModel() = default;

  // The activations of one decode row (the runner's one-row steps: allocated once per runner
  // from the recipe's allocator).
  struct Scratch {
    std::vector<DeviceBuffer> owned;
    float* x = nullptr;     // [n_embd] residual stream
    float* h = nullptr;     // [n_embd] normed input
    float* qkv = nullptr;   // [qkv_dim]
    float* attn = nullptr;  // [q_dim]
    float* o = nullptr;     // [n_embd]
    float* gu = nullptr;    // [2 n_ff]
    float* act = nullptr;   // [n_ff]
    void* q16 = nullptr;    // quantized activation workspace
    size_t q16_bytes = 0;
    void* q16n = nullptr;  // [n_embd] int16 blocks a split norm's producer writes
    size_t q16n_bytes = 0;
    float* norm_parts = nullptr;   // the split norm's sums of squares
    int32_t* tokens = nullptr;     // [1] (the runner points it at its staged input)
    int32_t* positions = nullptr;  // [1]
    float* logits = nullptr;       // [n_vocab]
    uint64_t bytes = 0;
  };
  Result<Scratch> allocate_scratch();

  // Queues the decode pass of one row over the runner's arena (paged_, set by the runner around
  // the call; no host synchronization): the logits land in s.logits.
  Status forward(const Scratch& s);
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
  Status layer_forward(int64_t il, const Scratch& s, bool h_quantized, NormIn norm_in,
                       NormIn& norm_out);
  // The layer's attention (llama_cuda_attention.cpp) of the row in s.qkv into s.attn (f32; aq:
  // its int16 form is in s.q16 too), over paged_.
  Status attention(int64_t il, const Scratch& s, bool& aq);
  // y[n_out] = W x by a matvec (f32 x, or the shared int16 x for quantized layouts); norm: the
  // input is a norm without a kernel (above).
  Status project(const DeviceWeight& w, const float* x_f32, bool x_quantized, const Scratch& s,
                 float* y, NormIn norm = {});
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
  // s.h = rms_norm(x + delta) with the residual updated in place (fused or not); with
  // want_q16 also the int16 form into s.q16 (in the same kernel with the fusion on); returns
  // whether it wrote it.
  Result<bool> residual_norm(float* x, const float* delta, const float* w, const Scratch& s,
                             bool want_q16 = false);
  static bool any_q16(std::initializer_list<const DeviceWeight*> ws) {
    for (const DeviceWeight* w : ws) {
      if (w->data != nullptr && q16_layout(*w)) return true;
    }
    return false;
  }
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
    const PassCosts* costs = nullptr;  // what the ops move, when profiled (op_timer_)
  };
  const PagedPass* paged_ = nullptr;
  OpTimer* op_timer_ = nullptr;  // the pass being profiled (set by the runner), or null
  // The profiled pass's costs (PagedPass::costs), or none.
  const PassCosts& op_costs() const;

  DType kv_dtype_ = DType::kBF16;  // the KV cache's elements (LoadOptions::kv_dtype)

  mutable uint64_t live_bytes_ = 0;
  mutable uint64_t peak_bytes_ = 0;
  void note_bytes(int64_t delta) const {
    live_bytes_ = static_cast<uint64_t>(static_cast<int64_t>(live_bytes_) + delta);
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }

  // Decode steps its runners replayed from CUDA graphs (cuda_graph_steps()).
  int64_t graph_steps_ = 0;
  friend int64_t cuda_graph_steps(const DecoderModel& m);
};

}  // namespace rinfer::llama
