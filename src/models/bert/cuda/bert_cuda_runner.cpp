// The BERT forward pass on a CUDA device (CUDA builds only): weights uploaded once per runner
// (matrices as bf16 for the cuBLASLt GEMMs, q|k|v fused into one matrix; embeddings, biases and
// norms f32), activations in one scratch allocation sized by max_rows, and per batch one
// host-to-device copy of the ids, types, positions and slots, the kernels of
// ops/cuda/encoder_ops.h on one stream, and one copy of the pooled vectors back:
//   x = LayerNorm(embed_sum)                                  f32 residual + bf16 copy
//   per layer: qkv = x Wqkv^T (bf16) -> attention_varlen (+ bq|bk|bv) -> a (bf16)
//              y = a Wo^T (f32); x = LayerNorm(y + bo + x)
//              f = x W1^T (bf16); f = gelu(f + b1); y = f W2^T (f32); x = LayerNorm(y + b2 + x)
//   pool_rows(x) -> out
// With taps (models/taps.h), each tapped activation is copied back after its kernel, with the
// bias that the fused LayerNorm adds on the device added on the host (attn_out, mlp_out).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda/cublas_lt.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/pinned.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/quantize.h"
#include "models/bert/bert_model.h"
#include "models/cuda_weight_pack.h"
#include "ops/cuda/encoder_ops.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::bert {

namespace {

using cuda::DeviceBuffer;
using cuda::DeviceWeight;

struct DeviceLayer {
  DeviceWeight wqkv, wo, w1, w2;
  DeviceBuffer vecs;  // the f32 vectors below
  const float* bqkv = nullptr;
  const float* bo = nullptr;
  const float* b1 = nullptr;
  const float* b2 = nullptr;
  const float* ln1_g = nullptr;
  const float* ln1_b = nullptr;
  const float* ln2_g = nullptr;
  const float* ln2_b = nullptr;
};

// A scratch region of `count` elements of T, 256-byte aligned, carved from one allocation.
class Carver {
 public:
  template <typename T>
  size_t add(int64_t count) {
    const size_t off = bytes_;
    bytes_ += (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
    return off;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

class CudaRunner final : public EncoderRunner {
 public:
  CudaRunner(const BertModel& m, const EncoderRunnerOptions& opts) : m_(m), opts_(opts) {}
  ~CudaRunner() override {
    if (stream_.get() != nullptr) static_cast<void>(stream_.synchronize());
    if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, pinned_bytes_);
  }

  Status init();
  const EncoderRunnerOptions& options() const override { return opts_; }
  Status encode(const EncoderBatch& b, float* hidden) override;
  Status embed(const EncoderBatch& b, const PoolingOptions& pooling, float* out) override;

 private:
  Status upload_weights();
  Status upload_matrix(std::initializer_list<const Tensor*> parts, DeviceWeight& out,
                       const std::string& what);
  Status forward(const EncoderBatch& b);
  // Hands device rows [n, e] f32 to b.taps when it wants `kind` (models/taps.h), `bias` (host,
  // [e], may be null) added: the bias the fused LayerNorm adds on the device.
  Status tap(const EncoderBatch& b, TapKind kind, int64_t layer, const float* dev,
             const Tensor* bias);
  Status gemm(const DeviceWeight& w, const uint16_t* x, int64_t n, DType y_dtype, void* y);

  const BertModel& m_;
  EncoderRunnerOptions opts_;
  int device_ = 0;
  cuda::DeviceAllocator* alloc_ = nullptr;
  cuda::Stream stream_;
  cuda::CublasLt lt_;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer word_, pos_, type_, emb_vecs_;
  const float* emb_ln_g_ = nullptr;
  const float* emb_ln_b_ = nullptr;
  DeviceBuffer dequant_;  // the bf16 workspace of quantized matrices (empty for bf16 ones)
  // Scratch: inputs [ids | types | positions | starts | lengths] int32, then the activations.
  DeviceBuffer scratch_;
  int32_t* d_in_ = nullptr;
  float* x_ = nullptr;        // [R, e] f32: the residual stream
  uint16_t* xb_ = nullptr;    // [R, e] bf16: the GEMM input
  uint16_t* qkv_ = nullptr;   // [R, 3e]
  uint16_t* attn_ = nullptr;  // [R, e]
  float* y_ = nullptr;        // [R, e] f32: GEMM outputs before their norm
  uint16_t* ff_ = nullptr;    // [R, n_ff]
  float* pooled_ = nullptr;   // [R, e]
  void* pinned_ = nullptr;    // the inputs' staging, then the pooled vectors
  size_t pinned_bytes_ = 0;
  int64_t in_elems_ = 0;  // int32 elements of the input block
  std::vector<float> tap_rows_;  // a tap's rows on the host
};

Status CudaRunner::upload_matrix(std::initializer_list<const Tensor*> parts, DeviceWeight& out,
                                 const std::string& what) {
  Result<Tensor> cat = parts.size() == 1 ? Result<Tensor>(**parts.begin()) : concat_rows(parts);
  if (!cat.ok()) return cat.status().with_context(what);
  Tensor t = std::move(cat).value();
  // Float matrices go up as bf16 (the GEMM's operand type); quantized ones keep their layout and
  // are dequantized per GEMM into dequant_.
  if (t.dtype() == DType::kF32 || t.dtype() == DType::kF16) {
    auto c = convert_weight(t, DType::kBF16, m_.load_options().cpu.ops.pool);
    if (!c.ok()) return c.status().with_context(what);
    t = std::move(c).value();
  }
  auto w = cuda::upload_weight(t, device_, stream_.get(), alloc_);
  if (!w.ok()) return w.status().with_context("uploading " + what);
  out = std::move(w).value();
  return ok_status();
}

Status CudaRunner::upload_weights() {
  const EncoderHParams& hp = m_.hparams();
  const BertWeights& w = m_.weights();
  cudaStream_t st = stream_.get();
  auto up_f32 = [&](const Tensor& t, DeviceBuffer& buf, const char* what) -> Status {
    RINFER_ASSIGN_OR_RETURN(Tensor f, t.to_f32());
    VecPack p;
    const float* unused = nullptr;
    p.add(&unused, f.data_as<float>(), f.numel());
    auto s = p.upload(buf, device_, st, alloc_);
    return s.ok() ? s : s.with_context(fmt::format("uploading {}", what));
  };
  RINFER_RETURN_IF_ERROR(up_f32(w.word_emb, word_, "the word embeddings"));
  RINFER_RETURN_IF_ERROR(up_f32(w.pos_emb, pos_, "the position embeddings"));
  RINFER_RETURN_IF_ERROR(up_f32(w.type_emb, type_, "the token type embeddings"));
  {
    VecPack p;
    p.add(&emb_ln_g_, w.emb_ln_g.data_as<float>(), hp.n_embd);
    p.add(&emb_ln_b_, w.emb_ln_b.data_as<float>(), hp.n_embd);
    RINFER_RETURN_IF_ERROR(p.upload(emb_vecs_, device_, st, alloc_));
  }
  layers_.resize(w.layers.size());
  size_t dequant = 0;
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const BertLayer& l = w.layers[il];
    DeviceLayer& d = layers_[il];
    const std::string at = fmt::format("layer {} ", il);
    if (!can_merge({&l.wq, &l.wk, &l.wv})) {
      return unsupported("bert on CUDA: layer {} q, k and v differ in format", il);
    }
    RINFER_RETURN_IF_ERROR(upload_matrix({&l.wq, &l.wk, &l.wv}, d.wqkv, at + "q|k|v"));
    RINFER_RETURN_IF_ERROR(upload_matrix({&l.wo}, d.wo, at + "attention output"));
    RINFER_RETURN_IF_ERROR(upload_matrix({&l.w1}, d.w1, at + "intermediate"));
    RINFER_RETURN_IF_ERROR(upload_matrix({&l.w2}, d.w2, at + "output"));
    for (const DeviceWeight* dw : {&d.wqkv, &d.wo, &d.w1, &d.w2}) {
      dequant = std::max(dequant, cuda::gemm_workspace_bytes(*dw));
    }
    std::vector<float> bqkv;
    for (const Tensor* b : {&l.bq, &l.bk, &l.bv}) {
      bqkv.insert(bqkv.end(), b->data_as<float>(), b->data_as<float>() + hp.n_embd);
    }
    VecPack p;
    p.add(&d.bqkv, bqkv.data(), 3 * hp.n_embd);
    p.add(&d.bo, l.bo.data_as<float>(), hp.n_embd);
    p.add(&d.b1, l.b1.data_as<float>(), hp.n_ff);
    p.add(&d.b2, l.b2.data_as<float>(), hp.n_embd);
    p.add(&d.ln1_g, l.ln1_g.data_as<float>(), hp.n_embd);
    p.add(&d.ln1_b, l.ln1_b.data_as<float>(), hp.n_embd);
    p.add(&d.ln2_g, l.ln2_g.data_as<float>(), hp.n_embd);
    p.add(&d.ln2_b, l.ln2_b.data_as<float>(), hp.n_embd);
    RINFER_RETURN_IF_ERROR(p.upload(d.vecs, device_, st, alloc_));
  }
  if (dequant > 0) {
    RINFER_ASSIGN_OR_RETURN(dequant_, DeviceBuffer::create(dequant, device_, st, alloc_));
  }
  return ok_status();
}

Status CudaRunner::init() {
  const EncoderHParams& hp = m_.hparams();
  if (opts_.max_rows <= 0 || opts_.max_rows > (int64_t{1} << 20)) {
    return invalid_argument("encoder runner: max_rows {} is out of range [1, 1048576]",
                            opts_.max_rows);
  }
  if (hp.n_embd % 8 != 0 || hp.n_ff % 8 != 0 || hp.n_embd > cuda::kMaxLayerNorm) {
    return unsupported("bert on CUDA: n_embd {} and n_ff {} must be multiples of 8 (n_embd <= {})",
                       hp.n_embd, hp.n_ff, cuda::kMaxLayerNorm);
  }
  const int64_t hd = hp.head_dim();
  if (hd != 32 && hd != 64 && hd != 128) {
    return unsupported("bert on CUDA: head_dim {} (32, 64 or 128)", hd);
  }
  const LoadOptions& lo = m_.load_options();
  device_ = lo.device.index;
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(device_));
  RINFER_ASSIGN_OR_RETURN(
      alloc_, cuda::device_allocator(device_, lo.cuda.allocator == AllocatorKind::kPlain));
  RINFER_ASSIGN_OR_RETURN(stream_, cuda::Stream::create(device_));
  RINFER_ASSIGN_OR_RETURN(lt_, cuda::CublasLt::create(device_));
  RINFER_RETURN_IF_ERROR(upload_weights());

  const int64_t R = opts_.max_rows, e = hp.n_embd;
  in_elems_ = 3 * R + 2 * R;  // ids, types, positions [R]; starts, lengths [R] (n_seqs <= R)
  Carver c;
  const size_t o_in = c.add<int32_t>(in_elems_);
  const size_t o_x = c.add<float>(R * e);
  const size_t o_xb = c.add<uint16_t>(R * e);
  const size_t o_qkv = c.add<uint16_t>(R * 3 * e);
  const size_t o_attn = c.add<uint16_t>(R * e);
  const size_t o_y = c.add<float>(R * e);
  const size_t o_ff = c.add<uint16_t>(R * hp.n_ff);
  const size_t o_pool = c.add<float>(R * e);
  auto buf = DeviceBuffer::create(c.bytes(), device_, stream_.get(), alloc_);
  if (!buf.ok()) {
    return buf.status().with_context(
        fmt::format("bert on CUDA: scratch for max_rows {} ({:.1f} MB)", R,
                    static_cast<double>(c.bytes()) / 1e6));
  }
  scratch_ = std::move(buf).value();
  auto* base = static_cast<uint8_t*>(scratch_.data());
  d_in_ = reinterpret_cast<int32_t*>(base + o_in);
  x_ = reinterpret_cast<float*>(base + o_x);
  xb_ = reinterpret_cast<uint16_t*>(base + o_xb);
  qkv_ = reinterpret_cast<uint16_t*>(base + o_qkv);
  attn_ = reinterpret_cast<uint16_t*>(base + o_attn);
  y_ = reinterpret_cast<float*>(base + o_y);
  ff_ = reinterpret_cast<uint16_t*>(base + o_ff);
  pooled_ = reinterpret_cast<float*>(base + o_pool);
  pinned_bytes_ = std::max(static_cast<size_t>(in_elems_) * 4, static_cast<size_t>(R * e) * 4);
  RINFER_ASSIGN_OR_RETURN(pinned_, cuda::pinned_host_allocator().allocate(pinned_bytes_));
  return stream_.synchronize();
}

Status CudaRunner::gemm(const DeviceWeight& w, const uint16_t* x, int64_t n, DType y_dtype,
                        void* y) {
  return cuda::gemm(lt_, w, x, n, y_dtype, y, 0.0f, dequant_.data(), dequant_.bytes(),
                    stream_.get());
}

Status CudaRunner::tap(const EncoderBatch& b, TapKind kind, int64_t layer, const float* dev,
                       const Tensor* bias) {
  if (b.taps == nullptr || !b.taps->wants(kind)) return ok_status();
  const int64_t n = b.n_rows(), e = m_.hparams().n_embd;
  tap_rows_.resize(static_cast<size_t>(n * e));
  RINFER_CUDA_RETURN(cudaMemcpyAsync(tap_rows_.data(), dev, tap_rows_.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_.get()));
  RINFER_RETURN_IF_ERROR(stream_.synchronize());
  if (bias != nullptr) {
    const float* bv = bias->data_as<float>();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < e; ++i) tap_rows_[static_cast<size_t>(r * e + i)] += bv[i];
    }
  }
  b.taps->record(kind, static_cast<int32_t>(layer), tap_rows_.data(), n, e);
  return ok_status();
}

Status CudaRunner::forward(const EncoderBatch& b) {
  const EncoderHParams& hp = m_.hparams();
  RINFER_RETURN_IF_ERROR(check_encoder_batch(b, hp, opts_.max_rows));
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(device_));
  cudaStream_t st = stream_.get();
  const int64_t n = b.n_rows(), e = hp.n_embd, n_seqs = b.n_seqs();
  const auto un = static_cast<size_t>(n);

  // The inputs in one pinned block: ids, types, positions, starts, lengths. The previous batch's
  // pooled vectors were read out of this staging already (embed synchronizes before returning).
  auto* in = static_cast<int32_t*>(pinned_);
  std::copy(b.tokens.begin(), b.tokens.end(), in);
  int32_t* types = in + un;
  if (b.type_ids.empty()) {
    std::fill_n(types, un, 0);
  } else {
    std::copy(b.type_ids.begin(), b.type_ids.end(), types);
  }
  int32_t* pos = types + un;
  int32_t max_len = 0;
  bool padded = false;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const auto i = static_cast<size_t>(s);
    for (int32_t r = b.slot_starts[i]; r < b.slot_starts[i + 1]; ++r) {
      pos[r] = r - b.slot_starts[i];
    }
    max_len = std::max(max_len, b.lengths[i]);
    padded = padded || b.slot_starts[i + 1] - b.slot_starts[i] != b.lengths[i];
  }
  int32_t* starts = pos + un;
  std::copy_n(b.slot_starts.begin(), n_seqs, starts);
  int32_t* lengths = starts + n_seqs;
  std::copy(b.lengths.begin(), b.lengths.end(), lengths);
  const size_t in_bytes = (3 * un + 2 * static_cast<size_t>(n_seqs)) * 4;
  RINFER_CUDA_RETURN(cudaMemcpyAsync(d_in_, in, in_bytes, cudaMemcpyHostToDevice, st));
  const int32_t* d_ids = d_in_;
  const int32_t* d_types = d_ids + n;
  const int32_t* d_pos = d_types + n;
  const int32_t* d_starts = d_pos + n;
  const int32_t* d_lengths = d_starts + n_seqs;

  const cuda::EmbedTables tables{word_.as<float>(), pos_.as<float>(), type_.as<float>(), e};
  RINFER_RETURN_IF_ERROR(cuda::embed_sum(tables, d_ids, d_pos, d_types, n, y_, st));
  RINFER_RETURN_IF_ERROR(
      cuda::layer_norm(y_, nullptr, nullptr, emb_ln_g_, emb_ln_b_, n, e, hp.norm_eps, x_, xb_, st));
  RINFER_RETURN_IF_ERROR(tap(b, TapKind::kEmbed, -1, x_, nullptr));
  // Padding rows get no attention output: zeros, so every later op sees finite values.
  if (padded) RINFER_CUDA_RETURN(cudaMemsetAsync(attn_, 0, un * static_cast<size_t>(e) * 2, st));
  cuda::VarlenAttentionParams ap;
  ap.n_seqs = n_seqs;
  ap.n_head = hp.n_head;
  ap.head_dim = hp.head_dim();
  ap.qkv_stride = 3 * e;
  ap.out_stride = e;
  ap.max_len = max_len;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim()));
  ap.starts = d_starts;
  ap.lengths = d_lengths;
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (b.cancel != nullptr && b.cancel->load(std::memory_order_relaxed)) {
      return cancelled_error("encode: cancelled before layer {}", il);
    }
    const DeviceLayer& l = layers_[il];
    const bool last = il + 1 == layers_.size();
    RINFER_RETURN_IF_ERROR(gemm(l.wqkv, xb_, n, DType::kBF16, qkv_));
    ap.bias = l.bqkv;
    RINFER_RETURN_IF_ERROR(cuda::attention_varlen(ap, qkv_, attn_, st));
    const BertLayer& hl = m_.weights().layers[il];  // the host biases of the taps
    const auto layer = static_cast<int64_t>(il);
    RINFER_RETURN_IF_ERROR(gemm(l.wo, attn_, n, DType::kF32, y_));
    RINFER_RETURN_IF_ERROR(tap(b, TapKind::kAttnOut, layer, y_, &hl.bo));
    RINFER_RETURN_IF_ERROR(
        cuda::layer_norm(y_, l.bo, x_, l.ln1_g, l.ln1_b, n, e, hp.norm_eps, x_, xb_, st));
    RINFER_RETURN_IF_ERROR(tap(b, TapKind::kMlpNorm, layer, x_, nullptr));
    RINFER_RETURN_IF_ERROR(gemm(l.w1, xb_, n, DType::kBF16, ff_));
    RINFER_RETURN_IF_ERROR(cuda::bias_gelu_erf(ff_, DType::kBF16, l.b1, n, hp.n_ff, ff_, st));
    RINFER_RETURN_IF_ERROR(gemm(l.w2, ff_, n, DType::kF32, y_));
    RINFER_RETURN_IF_ERROR(tap(b, TapKind::kMlpOut, layer, y_, &hl.b2));
    RINFER_RETURN_IF_ERROR(cuda::layer_norm(y_, l.b2, x_, l.ln2_g, l.ln2_b, n, e, hp.norm_eps, x_,
                                            last ? nullptr : xb_, st));
    RINFER_RETURN_IF_ERROR(tap(b, TapKind::kBlockOut, layer, x_, nullptr));
  }
  return ok_status();
}

Status CudaRunner::encode(const EncoderBatch& b, float* hidden) {
  RINFER_RETURN_IF_ERROR(forward(b));
  const size_t bytes = static_cast<size_t>(b.n_rows() * m_.hparams().n_embd) * 4;
  RINFER_CUDA_RETURN(cudaMemcpyAsync(pinned_, x_, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  RINFER_RETURN_IF_ERROR(stream_.synchronize());
  std::memcpy(hidden, pinned_, bytes);
  return ok_status();
}

Status CudaRunner::embed(const EncoderBatch& b, const PoolingOptions& pooling, float* out) {
  RINFER_RETURN_IF_ERROR(forward(b));
  const int64_t e = m_.hparams().n_embd, n_seqs = b.n_seqs();
  const int32_t* d_starts = d_in_ + 3 * b.n_rows();
  RINFER_RETURN_IF_ERROR(cuda::pool_rows(pooling.kind, pooling.normalize, x_, e, d_starts,
                                         d_starts + n_seqs, n_seqs, pooled_, stream_.get()));
  const size_t bytes = static_cast<size_t>(n_seqs * e) * 4;
  RINFER_CUDA_RETURN(
      cudaMemcpyAsync(pinned_, pooled_, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  RINFER_RETURN_IF_ERROR(stream_.synchronize());
  std::memcpy(out, pinned_, bytes);
  if (b.taps != nullptr && b.taps->wants(TapKind::kPooled)) {
    b.taps->record(TapKind::kPooled, static_cast<int32_t>(m_.hparams().n_layer), out, n_seqs, e);
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<EncoderRunner>> make_cuda_runner(const BertModel& m,
                                                        const EncoderRunnerOptions& opts) {
  auto r = std::make_unique<CudaRunner>(m, opts);
  RINFER_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<EncoderRunner>(std::move(r));
}

}  // namespace rinfer::bert
