// The Llama-family forward pass on a CUDA device (see llama_cuda_model.h).
#include "models/llama/cuda/llama_cuda_model.h"

#include "core/quantize.h"
#include "models/llama/cuda/llama_cuda_model_internal.h"

namespace rinfer::llama {

Result<std::unique_ptr<LlamaCudaModel>> LlamaCudaModel::create_empty(const DecoderHParams& hp,
                                                                     const LoadOptions& opts) {
  if (!opts.device.is_cuda())
    return invalid_argument("CUDA model on device {}", opts.device.to_string());
  std::unique_ptr<LlamaCudaModel> m(new LlamaCudaModel());
  m->hp_ = hp;
  m->opts_ = opts;
  cuda::apply_kernel_config(opts.cuda.kernels);
  m->split_norm_ = opts.cuda.kernels.split_norm;  // off: the norm kernels (strategies.kernels)
  m->device_ = opts.device.index;
  m->kv_dtype_ = opts.kv_dtype.value_or(DType::kBF16);
  if (m->kv_dtype_ != DType::kBF16 && m->kv_dtype_ != DType::kF32) {
    return unsupported("the CUDA KV cache holds bf16 or f32, not {}", dtype_name(m->kv_dtype_));
  }
  if (hp.head_dim != 64 && hp.head_dim != 128 && hp.head_dim != 256) {
    return unsupported("CUDA attention supports head_dim 64, 128 and 256, not {}", hp.head_dim);
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return invalid_argument("n_head {} is not a multiple of n_head_kv {}", hp.n_head, hp.n_head_kv);
  }
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(m->device_));
  if (opts.cuda.allocator == AllocatorKind::kPlain) {
    RINFER_ASSIGN_OR_RETURN(m->alloc_, cuda::plain_device_allocator(m->device_));
  } else {
    RINFER_ASSIGN_OR_RETURN(m->alloc_, cuda::default_device_allocator(m->device_));
  }
  RINFER_ASSIGN_OR_RETURN(m->stream_, cuda::Stream::create(m->device_));
  RINFER_ASSIGN_OR_RETURN(m->lt_, cuda::CublasLt::create(m->device_));
  m->q_dim_ = hp.n_head * hp.head_dim;
  m->kv_dim_ = hp.kv_dim();
  m->qkv_dim_ = m->q_dim_ + 2 * m->kv_dim_;
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  return m;
}

namespace {

const float* f32_data(const Tensor& t) { return t.defined() ? t.data_as<float>() : nullptr; }

}  // namespace

Status LlamaCudaModel::upload(const LlamaModel& host) {
  cudaStream_t st = stream_.get();
  // weights: fp8 converts here (the host keeps the stored formats): every layer matrix outside
  // keep_precision_layers whose rows are whole spans of 64; the embedding table and the output
  // projection stay as stored.
  const bool to_f8 = opts_.weight_format == DType::kF8E4M3;
  std::vector<bool> keep;
  if (to_f8) {
    RINFER_ASSIGN_OR_RETURN(keep, kept_layers(hp_.n_layer, opts_.keep_precision_layers));
  }
  int64_t bytes_delta = 0;  // per token: f8 bytes minus the stored bytes they replace
  // An FP8 checkpoint's matrix (codes and scales) goes as it is; rows the FP8 kernels do not
  // take (not whole spans of 64) go as bf16 values.
  auto up = [&](const Tensor& t, const Tensor& scales, DeviceWeight& out, const char* what,
                int64_t il) -> Status {
    const std::string where = il >= 0 ? fmt::format("layer {} {}", il, what) : std::string(what);
    const bool codes = t.dtype() == DType::kF8E4M3;
    const bool f8 = t.ndim() == 2 && t.dim(1) % 64 == 0 &&
                    (codes || (to_f8 && il >= 0 && !keep[static_cast<size_t>(il)]));
    Result<DeviceWeight> w = invalid_argument("no upload");
    if (codes && f8) {
      w = cuda::upload_weight_f8_codes(t, scales, device_, st, alloc_);
    } else if (codes) {
      RINFER_ASSIGN_OR_RETURN(Tensor values, dequantize_f8_rows(t, scales, where));
      RINFER_ASSIGN_OR_RETURN(Tensor b16, convert_weight(values, DType::kBF16));
      w = cuda::upload_weight(b16, device_, st, alloc_);
    } else {
      w = f8 ? cuda::upload_weight_f8(t, device_, st, alloc_)
             : cuda::upload_weight(t, device_, st, alloc_);
    }
    if (!w.ok()) return w.status().with_context("uploading " + where);
    out = std::move(w).value();
    if (f8 != codes) {  // quantized here, or codes widened to bf16
      bytes_delta += static_cast<int64_t>(out.bytes) - static_cast<int64_t>(t.nbytes()) -
                     static_cast<int64_t>(codes ? scales.nbytes() : 0);
    }
    weight_device_bytes_ += out.storage.bytes();
    return ok_status();
  };
  const Tensor none;
  RINFER_RETURN_IF_ERROR(up(host.tok_embd(), none, tok_embd_, "token_embd", -1));
  if (!hp_.tied_output) RINFER_RETURN_IF_ERROR(up(host.output(), none, output_, "output", -1));
  {
    VecPack p;
    const float* dummy = nullptr;
    p.add(&dummy, host.output_norm().data_as<float>(), hp_.n_embd);
    RINFER_RETURN_IF_ERROR(p.upload(output_norm_, device_, st, alloc_));
  }
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& l = host.layers()[static_cast<size_t>(il)];
    const LayerWeights::Scales& s = l.scales;
    DeviceLayer& d = layers_[static_cast<size_t>(il)];
    // Merged matrices concatenate their rows' scales too (f32 [n_out, 1] each).
    auto cat = [](std::initializer_list<const Tensor*> parts) -> Result<Tensor> {
      return (*parts.begin())->defined() ? concat_rows(parts) : Result<Tensor>(Tensor());
    };
    if (opts_.fusion.qkv && can_merge({&l.wq, &l.wk, &l.wv})) {
      RINFER_ASSIGN_OR_RETURN(Tensor w, concat_rows({&l.wq, &l.wk, &l.wv}));
      RINFER_ASSIGN_OR_RETURN(Tensor sc, cat({&s.wq, &s.wk, &s.wv}));
      RINFER_RETURN_IF_ERROR(up(w, sc, d.wqkv, "q|k|v", il));
    } else {
      RINFER_RETURN_IF_ERROR(up(l.wq, s.wq, d.wq, "q", il));
      RINFER_RETURN_IF_ERROR(up(l.wk, s.wk, d.wk, "k", il));
      RINFER_RETURN_IF_ERROR(up(l.wv, s.wv, d.wv, "v", il));
    }
    RINFER_RETURN_IF_ERROR(up(l.wo, s.wo, d.wo, "output projection", il));
    if (opts_.fusion.swiglu && can_merge({&l.w_gate, &l.w_up})) {
      RINFER_ASSIGN_OR_RETURN(Tensor w, concat_rows({&l.w_gate, &l.w_up}));
      RINFER_ASSIGN_OR_RETURN(Tensor sc, cat({&s.w_gate, &s.w_up}));
      RINFER_RETURN_IF_ERROR(up(w, sc, d.wgu, "gate|up", il));
    } else {
      RINFER_RETURN_IF_ERROR(up(l.w_gate, s.w_gate, d.w_gate, "gate", il));
      RINFER_RETURN_IF_ERROR(up(l.w_up, s.w_up, d.w_up, "up", il));
    }
    RINFER_RETURN_IF_ERROR(up(l.w_down, s.w_down, d.w_down, "down", il));
    VecPack p;
    p.add(&d.attn_norm, f32_data(l.attn_norm), hp_.n_embd);
    p.add(&d.ffn_norm, f32_data(l.ffn_norm), hp_.n_embd);
    if (hp_.attn_bias) {
      std::vector<float> b(static_cast<size_t>(qkv_dim_), 0.0f);
      if (l.bq.defined()) std::memcpy(b.data(), l.bq.data(), q_dim_ * 4);
      if (l.bk.defined()) std::memcpy(b.data() + q_dim_, l.bk.data(), kv_dim_ * 4);
      if (l.bv.defined()) std::memcpy(b.data() + q_dim_ + kv_dim_, l.bv.data(), kv_dim_ * 4);
      p.add(&d.bqkv, b.data(), qkv_dim_);
    }
    if (hp_.qk_norm) {
      p.add(&d.q_norm, f32_data(l.q_norm), hp_.head_dim);
      p.add(&d.k_norm, f32_data(l.k_norm), hp_.head_dim);
    }
    if (hp_.post_norms) {
      p.add(&d.post_attn_norm, f32_data(l.post_attn_norm), hp_.n_embd);
      p.add(&d.post_ffn_norm, f32_data(l.post_ffn_norm), hp_.n_embd);
    }
    RINFER_RETURN_IF_ERROR(p.upload(d.vecs, device_, st, alloc_));
  }
  weight_bytes_ =
      static_cast<uint64_t>(static_cast<int64_t>(host.weight_bytes_per_token()) + bytes_delta);
  return finish_load();
}

Status LlamaCudaModel::make_random(DType dtype, uint64_t seed) {
  cudaStream_t st = stream_.get();
  uint64_t s = seed;
  // FP8 models keep the embedding table and the output projection in bf16 (as published FP8
  // checkpoints do); their layer matrices are f8_e4m3.
  const DType table_dtype = dtype == DType::kF8E4M3 ? DType::kBF16 : dtype;
  auto rnd = [&](int64_t n_out, int64_t n_in, DeviceWeight& out, DType t) -> Status {
    RINFER_ASSIGN_OR_RETURN(out,
                            cuda::random_device_weight(t, n_out, n_in, s++, device_, st, alloc_));
    if (!is_quantized(t) && t != DType::kF8E4M3) {
      // Keep activations tame: uniform [-1, 1) / sqrt(n_in).
      const float a = 1.0f / std::sqrt(static_cast<float>(n_in));
      RINFER_RETURN_IF_ERROR(
          cuda::fill_random(const_cast<void*>(out.data), t, out.n_out * out.ld, -a, a, s++, st));
    }
    weight_device_bytes_ += out.storage.bytes();
    weight_bytes_ += out.bytes;
    return ok_status();
  };
  auto vecs = [&](DeviceBuffer& buf,
                  std::initializer_list<std::pair<const float**, int64_t>> v) -> Status {
    VecPack p;
    std::vector<float> ones;
    for (auto [slot, n] : v) {
      ones.assign(static_cast<size_t>(n), 0.0f);
      for (int64_t i = 0; i < n; ++i)
        ones[static_cast<size_t>(i)] = 0.9f + 0.2f * static_cast<float>(i * 7919 % 97) / 97.0f;
      p.add(slot, ones.data(), n);
    }
    return p.upload(buf, device_, st, alloc_);
  };
  RINFER_RETURN_IF_ERROR(rnd(hp_.n_vocab, hp_.n_embd, tok_embd_, table_dtype));
  weight_bytes_ -= tok_embd_.bytes;  // one row per token, not the table
  weight_bytes_ += tok_embd_.bytes / static_cast<uint64_t>(hp_.n_vocab);
  if (!hp_.tied_output) {
    RINFER_RETURN_IF_ERROR(rnd(hp_.n_vocab, hp_.n_embd, output_, table_dtype));
  } else {
    weight_bytes_ += tok_embd_.bytes;
  }
  const float* dummy = nullptr;
  RINFER_RETURN_IF_ERROR(vecs(output_norm_, {{&dummy, hp_.n_embd}}));
  for (DeviceLayer& d : layers_) {
    if (opts_.fusion.qkv) {
      RINFER_RETURN_IF_ERROR(rnd(qkv_dim_, hp_.n_embd, d.wqkv, dtype));
    } else {
      RINFER_RETURN_IF_ERROR(rnd(q_dim_, hp_.n_embd, d.wq, dtype));
      RINFER_RETURN_IF_ERROR(rnd(kv_dim_, hp_.n_embd, d.wk, dtype));
      RINFER_RETURN_IF_ERROR(rnd(kv_dim_, hp_.n_embd, d.wv, dtype));
    }
    RINFER_RETURN_IF_ERROR(rnd(hp_.n_embd, q_dim_, d.wo, dtype));
    if (opts_.fusion.swiglu) {
      RINFER_RETURN_IF_ERROR(rnd(2 * hp_.n_ff, hp_.n_embd, d.wgu, dtype));
    } else {
      RINFER_RETURN_IF_ERROR(rnd(hp_.n_ff, hp_.n_embd, d.w_gate, dtype));
      RINFER_RETURN_IF_ERROR(rnd(hp_.n_ff, hp_.n_embd, d.w_up, dtype));
    }
    RINFER_RETURN_IF_ERROR(rnd(hp_.n_embd, hp_.n_ff, d.w_down, dtype));
    RINFER_RETURN_IF_ERROR(vecs(d.vecs, {{&d.attn_norm, hp_.n_embd}, {&d.ffn_norm, hp_.n_embd}}));
  }
  RINFER_CUDA_RETURN(cudaStreamSynchronize(st));
  return finish_load();
}

Status LlamaCudaModel::finish_load() {
  auto ws = [&](const DeviceWeight& w) {
    if (w.data != nullptr) gemm_ws_bytes_ = std::max(gemm_ws_bytes_, cuda::gemm_workspace_bytes(w));
  };
  ws(tok_embd_);
  ws(output_);
  for (const DeviceLayer& d : layers_) {
    for (const DeviceWeight* w :
         {&d.wqkv, &d.wq, &d.wk, &d.wv, &d.wo, &d.wgu, &d.w_gate, &d.w_up, &d.w_down}) {
      ws(*w);
    }
  }
  note_bytes(static_cast<int64_t>(weight_device_bytes_));
  // The split-merge counters of the fused decode attention: zero once here, left zero by every
  // launch (layers run one after another, so they share them).
  cuda::AttentionParams ap;
  ap.n_tokens = 1;
  ap.n_head = hp_.n_head;
  ap.kv.n_head_kv = hp_.n_head_kv;
  const auto n_counters = static_cast<size_t>(cuda::attention_decode_counters(ap));
  RINFER_ASSIGN_OR_RETURN(attn_counters_,
                          DeviceBuffer::create(std::max<size_t>(n_counters, 1) * sizeof(unsigned),
                                               device_, stream_.get(), alloc_));
  RINFER_CUDA_RETURN(
      cudaMemsetAsync(attn_counters_.data(), 0, attn_counters_.bytes(), stream_.get()));
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream_.get()));
  return ok_status();
}

std::string LlamaCudaModel::describe() const {
  return fmt::format(
      "{} on cuda:{}: {} layers, n_embd {}, n_ff {}, {} heads ({} kv) x {}, vocab {}; {:.1f} MB "
      "of weights on the device ({} layout), {:.1f} MB read per token; {} KV cache, graphs {}, "
      "allocator {}",
      hp_.architecture, device_, hp_.n_layer, hp_.n_embd, hp_.n_ff, hp_.n_head, hp_.n_head_kv,
      hp_.head_dim, hp_.n_vocab, static_cast<double>(weight_device_bytes_) / 1e6,
      layers_.empty() ? "?" : dtype_name(layers_[0].wo.dtype),
      static_cast<double>(weight_bytes_) / 1e6, dtype_name(kv_dtype_),
      opts_.cuda.graphs ? "on" : "off", alloc_->name());
}

Result<LlamaCudaModel::Scratch> LlamaCudaModel::allocate_scratch() {
  Scratch s;
  cudaStream_t st = stream_.get();
  auto get = [&](size_t bytes) -> Result<void*> {
    RINFER_ASSIGN_OR_RETURN(DeviceBuffer b,
                            DeviceBuffer::create(std::max<size_t>(bytes, 16), device_, st, alloc_));
    void* p = b.data();
    s.bytes += b.bytes();
    s.owned.push_back(std::move(b));
    return p;
  };
  const auto f = [](int64_t n) { return static_cast<size_t>(n) * 4; };
  const int64_t e = hp_.n_embd, ff = hp_.n_ff;
  RINFER_ASSIGN_OR_RETURN(void* x, get(f(e)));
  s.x = static_cast<float*>(x);
  RINFER_ASSIGN_OR_RETURN(void* qkv, get(f(qkv_dim_)));
  s.qkv = static_cast<float*>(qkv);
  RINFER_ASSIGN_OR_RETURN(void* o, get(f(e)));
  s.o = static_cast<float*>(o);
  RINFER_ASSIGN_OR_RETURN(void* gu, get(f(2 * ff)));
  s.gu = static_cast<float*>(gu);
  RINFER_ASSIGN_OR_RETURN(void* h, get(f(e)));
  s.h = static_cast<float*>(h);
  RINFER_ASSIGN_OR_RETURN(void* attn, get(f(q_dim_)));
  s.attn = static_cast<float*>(attn);
  RINFER_ASSIGN_OR_RETURN(void* act, get(f(ff)));
  s.act = static_cast<float*>(act);
  const int64_t qn = std::max({e, ff, q_dim_});
  s.q16_bytes = cuda::quantized_activation_bytes((qn + 31) / 32 * 32);
  RINFER_ASSIGN_OR_RETURN(s.q16, get(s.q16_bytes));
  if (e % 32 == 0) {
    s.q16n_bytes = cuda::quantized_activation_bytes(e);
    RINFER_ASSIGN_OR_RETURN(s.q16n, get(s.q16n_bytes));
    RINFER_ASSIGN_OR_RETURN(void* parts, get(f(cuda::split_norm_parts(e))));
    s.norm_parts = static_cast<float*>(parts);
  }
  RINFER_ASSIGN_OR_RETURN(void* ints, get(2 * 4));
  s.tokens = static_cast<int32_t*>(ints);
  s.positions = s.tokens + 1;
  RINFER_ASSIGN_OR_RETURN(void* lg, get(f(hp_.n_vocab)));
  s.logits = static_cast<float*>(lg);
  return s;
}

Status LlamaCudaModel::quantize_for(std::initializer_list<const DeviceWeight*> ws, const float* h,
                                    int64_t n, const Scratch& s, bool& quantized) {
  quantized = false;
  if (!any_q16(ws)) return ok_status();
  return quantize_for_all(h, n, s, quantized);
}

Status LlamaCudaModel::project(const DeviceWeight& w, const float* x_f32, bool x_quantized,
                               const Scratch& s, float* y, NormIn norm) {
  cudaStream_t st = stream_.get();
  if (norm.mode == NormMode::kRow) {
    return cuda::matvec_rms_norm(w, s.x, norm.w, hp_.norm_eps, y, st);
  }
  if (norm.mode == NormMode::kQ16) {
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation qa,
                            cuda::quantized_activation_in(s.q16n, s.q16n_bytes, w.n_in));
    const cuda::SplitNorm sn = split_norm(s);
    return cuda::matvec_q16(w, qa, nullptr, y, st, &sn);
  }
  if (x_quantized && q16_layout(w)) {
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation qa,
                            cuda::quantized_activation_in(s.q16, s.q16_bytes, w.n_in));
    return cuda::matvec_q16(w, qa, nullptr, y, st);
  }
  // f8_e4m3 weights too: a decode row reads them as weights only (W8A16; docs/gpu-inference.md).
  return cuda::matvec(w, x_f32, nullptr, y, st);
}

NormMode LlamaCudaModel::norm_mode(const DeviceWeight* producer, bool producer_q16_in,
                                   std::initializer_list<const DeviceWeight*> consumers) const {
  if (!split_norm_ || !opts_.fusion.residual_norm || hp_.n_embd % 32 != 0) {
    return NormMode::kKernel;
  }
  bool any = false, all_q16 = true, all_16bit = true;
  for (const DeviceWeight* w : consumers) {
    if (w->data == nullptr) continue;
    any = true;
    all_q16 = all_q16 && q16_layout(*w);
    all_16bit = all_16bit && cuda::matvec_rms_norm_supported(w->dtype);
  }
  if (!any) return NormMode::kKernel;
  if (all_16bit) return NormMode::kRow;
  if (all_q16 && producer != nullptr && producer_q16_in && q16_layout(*producer) &&
      producer->n_out == hp_.n_embd && hp_.n_embd <= cuda::kMaxSplitNorm) {
    return NormMode::kQ16;
  }
  return NormMode::kKernel;
}

Status LlamaCudaModel::norm_produce(NormMode mode, const DeviceWeight& producer, const float* x_f32,
                                    bool x_quantized, const float* norm_w, const Scratch& s) {
  cudaStream_t st = stream_.get();
  std::optional<cuda::QuantizedActivation> in;
  if (x_quantized && q16_layout(producer)) {
    RINFER_ASSIGN_OR_RETURN(in, cuda::quantized_activation_in(s.q16, s.q16_bytes, producer.n_in));
  }
  if (mode == NormMode::kQ16) {
    if (!in) return internal_error("norm_produce: the q16 split norm needs the int16 input");
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation out,
                            cuda::quantized_activation_in(s.q16n, s.q16n_bytes, hp_.n_embd));
    return cuda::matvec_q16_res_norm(producer, *in, s.x, norm_w, out, s.norm_parts, st);
  }
  // kRow: the residual add in place.
  if (in) return cuda::matvec_q16(producer, *in, s.x, s.x, st);
  return cuda::matvec(producer, x_f32, s.x, s.x, st);
}

Result<bool> LlamaCudaModel::residual_norm(float* x, const float* delta, const float* w,
                                           const Scratch& s, bool want_q16) {
  cudaStream_t st = stream_.get();
  const int64_t e = hp_.n_embd;
  if (opts_.fusion.residual_norm && e % 32 == 0 && e <= 32768) {
    // One kernel, the row in registers; delta == nullptr: plain norm of x, else the
    // residual x += delta and the norm of x; with want_q16 also the int16 form.
    const float* in = delta == nullptr ? x : delta;
    float* res = delta == nullptr ? nullptr : x;
    if (!want_q16) {
      RINFER_RETURN_IF_ERROR(cuda::rms_norm_row(in, res, w, e, hp_.norm_eps, s.h, st));
      return false;
    }
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation qa,
                            cuda::quantized_activation_in(s.q16, s.q16_bytes, e));
    RINFER_RETURN_IF_ERROR(cuda::rms_norm_q16(in, res, w, e, hp_.norm_eps, s.h, qa, st));
    return true;
  }
  if (delta == nullptr) {
    RINFER_RETURN_IF_ERROR(cuda::rms_norm(x, w, 1, e, hp_.norm_eps, DType::kF32, s.h, st));
  } else if (opts_.fusion.residual_norm) {
    RINFER_RETURN_IF_ERROR(
        cuda::add_rms_norm(x, delta, w, 1, e, hp_.norm_eps, DType::kF32, s.h, st));
  } else {
    RINFER_RETURN_IF_ERROR(cuda::add(x, delta, e, x, st));
    RINFER_RETURN_IF_ERROR(cuda::rms_norm(x, w, 1, e, hp_.norm_eps, DType::kF32, s.h, st));
  }
  if (want_q16) {
    bool q = false;
    RINFER_RETURN_IF_ERROR(quantize_for_all(s.h, e, s, q));
    return q;
  }
  return false;
}

Status LlamaCudaModel::layer_forward(int64_t il, const Scratch& s, bool h_quantized,
                                     NormIn norm_in, NormIn& norm_out) {
  norm_out = {};
  cudaStream_t st = stream_.get();
  const DeviceLayer& d = layers_[static_cast<size_t>(il)];
  const int64_t e = hp_.n_embd, hd = hp_.head_dim, ff = hp_.n_ff;
  // h holds rms_norm(x) * attn_norm (queued by the caller), or norm_in says how QKV norms x.

  // Q, K, V: one qkv row (q | k | v).
  const bool xq = h_quantized;
  const PassCosts& pc = op_costs();
  if (d.merged_qkv()) {
    OpScope op(op_timer_, "qkv", il, weight_cost(d.wqkv, 1));
    RINFER_RETURN_IF_ERROR(project(d.wqkv, s.h, xq, s, s.qkv, norm_in));
  } else {
    OpScope op(op_timer_, "qkv", il, weights_cost({&d.wq, &d.wk, &d.wv}, 1));
    RINFER_RETURN_IF_ERROR(project(d.wq, s.h, xq, s, s.qkv, norm_in));
    RINFER_RETURN_IF_ERROR(project(d.wk, s.h, xq, s, s.qkv + q_dim_, norm_in));
    RINFER_RETURN_IF_ERROR(project(d.wv, s.h, xq, s, s.qkv + q_dim_ + kv_dim_, norm_in));
  }
  if (d.bqkv != nullptr) {
    OpScope op(op_timer_, "qkv", il, pc.heads);
    RINFER_RETURN_IF_ERROR(cuda::add_bias_rows(s.qkv, d.bqkv, 1, qkv_dim_, qkv_dim_, st));
  }
  if (hp_.qk_norm) {
    OpScope op(op_timer_, "qk_norm", il, pc.heads);
    RINFER_RETURN_IF_ERROR(
        cuda::rms_norm_heads(s.qkv, d.q_norm, 1, hp_.n_head, hd, qkv_dim_, hp_.norm_eps, st));
    RINFER_RETURN_IF_ERROR(cuda::rms_norm_heads(s.qkv + q_dim_, d.k_norm, 1, hp_.n_head_kv, hd,
                                                qkv_dim_, hp_.norm_eps, st));
  }
  bool aq = false;  // the attention output's int16 form is in s.q16
  {
    // RoPE and the K/V store are in this op (one kernel when fused).
    OpCost c = pc.heads;
    const OpCost a = pc.attention_of(
        paged_ != nullptr ? paged_->arena->spec().group_of_layer[static_cast<size_t>(il)] : -1);
    c.bytes += a.bytes + pc.kv_store.bytes;
    c.flops += a.flops;
    OpScope op(op_timer_, "attention", il, c);
    RINFER_RETURN_IF_ERROR(attention(il, s, aq));
  }

  // o = attn Wo^T; x += o (post-norm first for Gemma); h = rms_norm(x) * ffn_norm.
  bool hq = false;
  NormIn ffn_in;
  {
    OpScope op(op_timer_, "wo", il, weight_cost(d.wo, 1));
    if (!aq) RINFER_RETURN_IF_ERROR(quantize_for({&d.wo}, s.attn, q_dim_, s, aq));
    if (d.post_attn_norm == nullptr) {
      ffn_in.mode = norm_mode(&d.wo, aq, {&d.wgu, &d.w_gate, &d.w_up});
      ffn_in.w = d.ffn_norm;
    }
    if (ffn_in.mode != NormMode::kKernel) {
      RINFER_RETURN_IF_ERROR(norm_produce(ffn_in.mode, d.wo, s.attn, aq, d.ffn_norm, s));
    } else {
      RINFER_RETURN_IF_ERROR(project(d.wo, s.attn, aq, s, s.o));
    }
  }
  if (ffn_in.mode == NormMode::kKernel) {
    if (d.post_attn_norm != nullptr) {
      OpScope op(op_timer_, "post_norm", il, pc.row);
      RINFER_RETURN_IF_ERROR(
          cuda::rms_norm(s.o, d.post_attn_norm, 1, e, hp_.norm_eps, DType::kF32, s.o, st));
    }
    OpScope op(op_timer_, "norm", il, pc.norm);
    RINFER_ASSIGN_OR_RETURN(
        hq, residual_norm(s.x, s.o, d.ffn_norm, s, any_q16({&d.wgu, &d.w_gate, &d.w_up})));
  }

  // MLP.
  const float* gate = s.gu;
  const float* upp = s.gu + ff;
  if (d.merged_gu()) {
    OpScope op(op_timer_, "gate_up", il, weight_cost(d.wgu, 1));
    RINFER_RETURN_IF_ERROR(project(d.wgu, s.h, hq, s, s.gu, ffn_in));
  } else {
    OpScope op(op_timer_, "gate_up", il, weights_cost({&d.w_gate, &d.w_up}, 1));
    RINFER_RETURN_IF_ERROR(project(d.w_gate, s.h, hq, s, s.gu, ffn_in));
    RINFER_RETURN_IF_ERROR(project(d.w_up, s.h, hq, s, s.gu + ff, ffn_in));
  }
  std::optional<OpScope> act_op(std::in_place, op_timer_, "act", il, pc.act);
  bool fq = false;
  if (opts_.fusion.swiglu && any_q16({&d.w_down}) && ff % 32 == 0) {
    // Activation and int16 quantization of its output in one kernel.
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation qa,
                            cuda::quantized_activation_in(s.q16, s.q16_bytes, ff));
    RINFER_RETURN_IF_ERROR(cuda::glu_q16(gate, upp, ff, hp_.gelu_ffn, s.act, qa, st));
    fq = true;
  } else {
    if (hp_.gelu_ffn) {
      RINFER_RETURN_IF_ERROR(cuda::geglu_tanh(gate, upp, 1, ff, 2 * ff, DType::kF32, s.act, st));
    } else {
      RINFER_RETURN_IF_ERROR(cuda::swiglu(gate, upp, 1, ff, 2 * ff, DType::kF32, s.act, st));
    }
    RINFER_RETURN_IF_ERROR(quantize_for({&d.w_down}, s.act, ff, s, fq));
  }
  act_op.reset();
  OpScope down_op(op_timer_, "down", il, weight_cost(d.w_down, 1));
  // The next norm: the next layer's attention norm, or the output norm after the last layer.
  const bool last = il + 1 == hp_.n_layer;
  const DeviceLayer* nx = last ? nullptr : &layers_[static_cast<size_t>(il + 1)];
  if (d.post_ffn_norm == nullptr) {
    NormIn next;
    next.mode = last ? norm_mode(&d.w_down, fq, {&output_weight()})
                     : norm_mode(&d.w_down, fq, {&nx->wqkv, &nx->wq, &nx->wk, &nx->wv});
    next.w = last ? output_norm_.as<float>() : nx->attn_norm;
    if (next.mode != NormMode::kKernel) {
      norm_out = next;
      return norm_produce(next.mode, d.w_down, s.act, fq, next.w, s);
    }
  }
  RINFER_RETURN_IF_ERROR(project(d.w_down, s.act, fq, s, s.o));
  if (d.post_ffn_norm != nullptr) {
    // Inside the "down" op: the scope ends at the return.
    RINFER_RETURN_IF_ERROR(
        cuda::rms_norm(s.o, d.post_ffn_norm, 1, e, hp_.norm_eps, DType::kF32, s.o, st));
  }
  // The residual add of s.o is fused into the next norm (next layer's or the output norm).
  return ok_status();
}

Status LlamaCudaModel::forward(const Scratch& s) {
  cudaStream_t st = stream_.get();
  const int64_t e = hp_.n_embd, nt = 1;
  NormIn norm;  // how the next norm reaches its matrices
  const DeviceLayer& d0 = layers_[0];
  // The first layer's: only kRow needs no matrix before it.
  if (norm_mode(nullptr, false, {&d0.wqkv, &d0.wq, &d0.wk, &d0.wv}) == NormMode::kRow) {
    norm = {NormMode::kRow, d0.attn_norm};
  }
  // Integer matrices after the first norm: the gather, the norm and its int16 form in one
  // kernel.
  const bool embed_norm = norm.mode == NormMode::kKernel && opts_.fusion.residual_norm &&
                          e % 32 == 0 && e <= cuda::kMaxEmbedNorm &&
                          any_q16({&d0.wqkv, &d0.wq, &d0.wk, &d0.wv});
  const PassCosts& pc = op_costs();
  std::optional<OpScope> embed_op(std::in_place, op_timer_, "embed", -1, pc.row);
  if (embed_norm) {
    RINFER_ASSIGN_OR_RETURN(cuda::QuantizedActivation qa,
                            cuda::quantized_activation_in(s.q16, s.q16_bytes, e));
    RINFER_RETURN_IF_ERROR(cuda::embed_rms_norm_q16(tok_embd_, s.tokens, hp_.embd_scale,
                                                    d0.attn_norm, hp_.norm_eps, s.x, s.h, qa, st));
  } else {
    RINFER_RETURN_IF_ERROR(cuda::get_rows(tok_embd_, s.tokens, nt, DType::kF32, s.x, st));
    if (hp_.embd_scale != 1.0f) {
      RINFER_RETURN_IF_ERROR(cuda::scale(s.x, nt * e, hp_.embd_scale, st));
    }
  }
  embed_op.reset();
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const DeviceLayer& d = layers_[static_cast<size_t>(il)];
    bool hq = il == 0 && embed_norm;
    if (norm.mode == NormMode::kKernel && !hq) {
      OpScope op(op_timer_, "norm", il, pc.norm);
      RINFER_ASSIGN_OR_RETURN(hq, residual_norm(s.x, il == 0 ? nullptr : s.o, d.attn_norm, s,
                                                any_q16({&d.wqkv, &d.wq, &d.wk, &d.wv})));
    }
    NormIn next;
    RINFER_RETURN_IF_ERROR(layer_forward(il, s, hq, norm, next));
    norm = next;
  }
  // x += o of the last block; the output norm and projection into s.logits.
  const DeviceWeight& out_w = output_weight();
  bool q = false;
  OpCost lc = weight_cost(out_w, 1);
  lc.bytes += pc.norm.bytes;
  lc.flops += pc.norm.flops;
  OpScope logits_op(op_timer_, "logits", hp_.n_layer, lc);
  if (norm.mode == NormMode::kKernel) {
    RINFER_ASSIGN_OR_RETURN(q, residual_norm(s.x, s.o, output_norm_.as<float>(), s,
                                             any_q16({&out_w})));
  }
  return project(out_w, s.h, q, s, s.logits, norm);
}

const PassCosts& LlamaCudaModel::op_costs() const {
  static const PassCosts kNone;
  return op_timer_ != nullptr && paged_ != nullptr && paged_->costs != nullptr ? *paged_->costs
                                                                               : kNone;
}

Result<std::unique_ptr<DecoderModel>> make_cuda_model(std::unique_ptr<LlamaModel> host,
                                                      const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaCudaModel> m,
                          LlamaCudaModel::create_empty(host->hparams(), opts));
  RINFER_RETURN_IF_ERROR(m->upload(*host));
  return std::unique_ptr<DecoderModel>(std::move(m));
}

Result<std::unique_ptr<DecoderModel>> make_random_cuda_model(const DecoderHParams& hp, DType dtype,
                                                             uint64_t seed,
                                                             const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaCudaModel> m,
                          LlamaCudaModel::create_empty(hp, opts));
  RINFER_RETURN_IF_ERROR(m->make_random(dtype, seed));
  return std::unique_ptr<DecoderModel>(std::move(m));
}

int64_t cuda_graph_steps(const DecoderModel& m) {
  const auto* c = dynamic_cast<const LlamaCudaModel*>(&m);
  return c != nullptr ? c->graph_steps_ : 0;
}

}  // namespace rinfer::llama
