// Loading the Llama-family sample: hyper-parameters from the metadata, tensors bound and
// validated against them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/quantize.h"
#include "core/quantize_8bit.h"
#include "core/strings.h"
#include "formats/calibration.h"
#include "models/bind_util.h"
#include "models/llama/llama_model.h"
#include "ops/cpu/ops.h"

namespace rinfer::llama {

namespace {

// Upper bounds that keep every size computation far from overflow; real models are far below.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

Result<int64_t> require_dim(const GgufFile& f, const std::string& key, int64_t max) {
  auto v = f.require_uint(key);
  if (!v.ok()) return v.status();
  if (*v == 0 || *v > static_cast<uint64_t>(max)) {
    return data_loss("{}: '{}' = {} is out of range [1, {}]", f.path(), key, *v, max);
  }
  return static_cast<int64_t>(*v);
}

Result<int64_t> optional_dim(const GgufFile& f, const std::string& key, int64_t fallback,
                             int64_t max) {
  if (f.find(key) == nullptr) return fallback;
  return require_dim(f, key, max);
}

// Gemma 3 (llama.cpp's gemma3 graph): embeddings scaled by sqrt(n_embd), per-head Q/K norms,
// post-attention and post-MLP norms, GeGLU with the tanh GELU, and local sliding-window layers
// interleaved with global ones: layer il is global when il % pattern == pattern - 1 (pattern
// attention.sliding_window_pattern, default 6), local layers attend to the last
// attention.sliding_window positions and rotate with base 10000 and no scaling (global:
// rope.freq_base and the file's rope scaling).
// The norm weights are used as stored: the converter already wrote Gemma's (1 + w).
Status read_gemma3_options(const GgufFile& f, DecoderHParams& hp) {
  const std::string p = hp.architecture + ".";
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  hp.qk_norm = true;
  hp.post_norms = true;
  hp.gelu_ffn = true;
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  if (auto s = f.get_float(p + "attention.query_pre_attn_scalar")) {
    if (!(*s > 0 && std::isfinite(*s))) {
      return data_loss("{}: query_pre_attn_scalar {} must be > 0", f.path(), *s);
    }
    hp.attn_scale = static_cast<float>(1.0 / std::sqrt(*s));
  }
  RINFER_ASSIGN_OR_RETURN(const int64_t window,
                          optional_dim(f, p + "attention.sliding_window", 0, int64_t{1} << 30));
  RINFER_ASSIGN_OR_RETURN(const int64_t pattern,
                          optional_dim(f, p + "attention.sliding_window_pattern", 6, kMaxLayers));
  double local_base = 10000.0;
  if (auto b = f.get_float(p + "rope.freq_base_swa")) local_base = *b;
  if (!(local_base > 1.0 && std::isfinite(local_base))) {
    return data_loss("{}: rope.freq_base_swa {} must be a finite number > 1", f.path(), local_base);
  }
  hp.layer_attn.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    DecoderHParams::LayerAttn& la = hp.layer_attn[static_cast<size_t>(il)];
    const bool global = window == 0 || il % pattern == pattern - 1;
    la.window = global ? 0 : window;
    la.rope_base = global ? hp.rope.freq_base : static_cast<float>(local_base);
    la.rope_scale = global ? hp.rope.freq_scale : 1.0f;  // as llama.cpp: no scaling on local
  }
  return ok_status();
}

}  // namespace

bool supports_architecture(std::string_view arch) {
  return arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "gemma3";
}

Result<DecoderHParams> read_hparams(const GgufFile& f) {
  DecoderHParams hp;
  RINFER_ASSIGN_OR_RETURN(std::string_view arch, f.require_string("general.architecture"));
  if (!supports_architecture(arch)) {
    return unsupported(
        "{}: architecture {} is not a Llama-family model (llama, mistral, qwen2, gemma3)", f.path(),
        rinfer::quoted(arch));
  }
  hp.architecture = std::string(arch);
  const std::string p = hp.architecture + ".";

  RINFER_ASSIGN_OR_RETURN(hp.n_layer, require_dim(f, p + "block_count", kMaxLayers));
  RINFER_ASSIGN_OR_RETURN(hp.n_embd, require_dim(f, p + "embedding_length", kMaxDim));
  RINFER_ASSIGN_OR_RETURN(hp.n_ff, require_dim(f, p + "feed_forward_length", kMaxDim));
  RINFER_ASSIGN_OR_RETURN(hp.n_head, require_dim(f, p + "attention.head_count", kMaxDim));
  RINFER_ASSIGN_OR_RETURN(hp.n_head_kv,
                          optional_dim(f, p + "attention.head_count_kv", hp.n_head, kMaxDim));
  RINFER_ASSIGN_OR_RETURN(hp.n_ctx_train, require_dim(f, p + "context_length", int64_t{1} << 30));
  if (hp.n_head % hp.n_head_kv != 0) {
    return data_loss("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), hp.n_head,
                     hp.n_head_kv);
  }
  const int64_t default_head_dim = hp.n_embd / hp.n_head;
  if (f.find(p + "attention.key_length") == nullptr && hp.n_embd % hp.n_head != 0) {
    return data_loss("{}: embedding_length {} is not a multiple of head_count {}", f.path(),
                     hp.n_embd, hp.n_head);
  }
  RINFER_ASSIGN_OR_RETURN(hp.head_dim,
                          optional_dim(f, p + "attention.key_length", default_head_dim, kMaxDim));
  RINFER_ASSIGN_OR_RETURN(const int64_t v_len,
                          optional_dim(f, p + "attention.value_length", hp.head_dim, kMaxDim));
  if (v_len != hp.head_dim) {
    return unsupported("{}: key_length {} != value_length {}", f.path(), hp.head_dim, v_len);
  }

  RINFER_ASSIGN_OR_RETURN(const double eps,
                          f.require_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(eps > 0 && eps < 1)) {
    return data_loss("{}: layer_norm_rms_epsilon {} is out of range (0, 1)", f.path(), eps);
  }
  hp.norm_eps = static_cast<float>(eps);

  // Vocabulary: the model's own key, else the tokenizer's list; token_embd must agree.
  if (auto v = f.get_uint(p + "vocab_size")) {
    hp.n_vocab = static_cast<int64_t>(*v);
  } else if (const GgufValue* toks = f.find("tokenizer.ggml.tokens")) {
    hp.n_vocab = static_cast<int64_t>(toks->array_size());
  } else if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
             emb != nullptr && emb->shape.size() == 2) {
    hp.n_vocab = emb->shape[0];
  }
  if (hp.n_vocab <= 0 || hp.n_vocab > kMaxVocab) {
    return data_loss("{}: vocabulary size {} is out of range [1, {}]", f.path(), hp.n_vocab,
                     kMaxVocab);
  }

  // RoPE.
  RINFER_ASSIGN_OR_RETURN(const int64_t n_rot,
                          optional_dim(f, p + "rope.dimension_count", hp.head_dim, kMaxDim));
  if (n_rot > hp.head_dim || n_rot % 2 != 0) {
    return data_loss("{}: rope.dimension_count {} must be even and <= head dim {}", f.path(), n_rot,
                     hp.head_dim);
  }
  hp.rope.n_rot = n_rot;
  hp.rope.freq_base = 10000.0f;
  if (f.find(p + "rope.freq_base") != nullptr) {
    RINFER_ASSIGN_OR_RETURN(const double base, f.require_float(p + "rope.freq_base"));
    if (!(base > 1.0 && std::isfinite(base))) {
      return data_loss("{}: rope.freq_base {} must be a finite number > 1", f.path(), base);
    }
    hp.rope.freq_base = static_cast<float>(base);
  }
  double factor = 1.0;
  std::string scaling = "none";
  if (auto t = f.get_string(p + "rope.scaling.type")) scaling = std::string(*t);
  if (scaling == "linear") {
    RINFER_ASSIGN_OR_RETURN(factor, f.require_float(p + "rope.scaling.factor"));
  } else if (scaling != "none") {
    return unsupported("{}: rope scaling '{}' is not supported (none, linear)", f.path(), scaling);
  } else if (auto legacy = f.get_float(p + "rope.scale_linear")) {
    factor = *legacy;
  }
  if (!(factor >= 1.0 && std::isfinite(factor))) {
    return data_loss("{}: rope scaling factor {} must be >= 1", f.path(), factor);
  }
  hp.rope.freq_scale = static_cast<float>(1.0 / factor);
  // The converter permutes llama/mistral Q/K rows for the adjacent-pair rotation; qwen2 keeps
  // the HF layout, which rotates dim i with dim i + n_rot/2.
  const bool gemma3 = hp.architecture == "gemma3";
  hp.rope.mode =
      hp.architecture == "qwen2" || gemma3 ? cpu::RopeMode::kNeox : cpu::RopeMode::kNormal;
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    return unsupported(
        "{}: per-frequency RoPE factors (rope_freqs.weight, Llama 3.1 scaling) "
        "are not supported yet",
        f.path());
  }
  if (f.find_tensor("blk.0.ffn_gate_inp.weight") != nullptr) {
    return unsupported("{}: mixture-of-experts layers are not supported", f.path());
  }
  if (gemma3) RINFER_RETURN_IF_ERROR(read_gemma3_options(f, hp));
  return hp;
}

namespace {

// Binds GGUF tensors as zero-copy views, checking name, shape and dtype.
class Binder {
 public:
  explicit Binder(std::shared_ptr<const GgufFile> f) : f_(std::move(f)) {}

  // A weight matrix (any dtype the matmul kernels read) or a vector of shape `expected`.
  Result<Tensor> weight(const std::string& name, std::initializer_list<int64_t> expected,
                        bool optional = false) {
    const GgufTensorInfo* t = f_->find_tensor(name);
    const std::vector<int64_t> want(expected);
    if (t == nullptr) {
      if (optional) return Tensor();
      return not_found("{}: tensor '{}' is missing (expected shape {})", f_->path(), name,
                       shape_string(want));
    }
    RINFER_RETURN_IF_ERROR(check_shape(f_->path(), name, t->shape, want));
    if (!dtype_traits(t->dtype).is_float) {
      return unsupported("{}: tensor '{}' has dtype {}, which is not a float or quantized float",
                         f_->path(), name, dtype_name(t->dtype));
    }
    auto tensor = view_tensor(name, t->data, t->nbytes, t->shape, t->dtype, f_);
    if (!tensor.ok()) return tensor.status();
    bytes_ += t->nbytes;
    return tensor;
  }

  // A vector (norm weight, bias) converted to contiguous f32.
  Result<Tensor> vector_f32(const std::string& name, int64_t n, bool optional = false) {
    RINFER_ASSIGN_OR_RETURN(Tensor t, weight(name, {n}, optional));
    return vector_as_f32(std::move(t), name);
  }

  uint64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<const GgufFile> f_;
  uint64_t bytes_ = 0;
};

}  // namespace

Status LlamaModel::bind_weights(const std::shared_ptr<const GgufFile>& file) {
  Binder b(file);
  const int64_t e = hp_.n_embd, q_dim = hp_.n_head * hp_.head_dim, kv = hp_.kv_dim();
  RINFER_ASSIGN_OR_RETURN(tok_embd_, b.weight("token_embd.weight", {hp_.n_vocab, e}));
  RINFER_ASSIGN_OR_RETURN(output_norm_, b.vector_f32("output_norm.weight", e));
  RINFER_ASSIGN_OR_RETURN(output_, b.weight("output.weight", {hp_.n_vocab, e}, true));
  hp_.tied_output = !output_.defined();
  if (hp_.tied_output) output_ = tok_embd_;

  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    const std::string p = fmt::format("blk.{}.", il);
    RINFER_ASSIGN_OR_RETURN(l.attn_norm, b.vector_f32(p + "attn_norm.weight", e));
    RINFER_ASSIGN_OR_RETURN(l.wq, b.weight(p + "attn_q.weight", {q_dim, e}));
    RINFER_ASSIGN_OR_RETURN(l.wk, b.weight(p + "attn_k.weight", {kv, e}));
    RINFER_ASSIGN_OR_RETURN(l.wv, b.weight(p + "attn_v.weight", {kv, e}));
    RINFER_ASSIGN_OR_RETURN(l.wo, b.weight(p + "attn_output.weight", {e, q_dim}));
    RINFER_ASSIGN_OR_RETURN(l.bq, b.vector_f32(p + "attn_q.bias", q_dim, true));
    RINFER_ASSIGN_OR_RETURN(l.bk, b.vector_f32(p + "attn_k.bias", kv, true));
    RINFER_ASSIGN_OR_RETURN(l.bv, b.vector_f32(p + "attn_v.bias", kv, true));
    RINFER_ASSIGN_OR_RETURN(l.ffn_norm, b.vector_f32(p + "ffn_norm.weight", e));
    RINFER_ASSIGN_OR_RETURN(l.w_gate, b.weight(p + "ffn_gate.weight", {hp_.n_ff, e}));
    RINFER_ASSIGN_OR_RETURN(l.w_up, b.weight(p + "ffn_up.weight", {hp_.n_ff, e}));
    RINFER_ASSIGN_OR_RETURN(l.w_down, b.weight(p + "ffn_down.weight", {e, hp_.n_ff}));
    if (hp_.qk_norm) {
      RINFER_ASSIGN_OR_RETURN(l.q_norm, b.vector_f32(p + "attn_q_norm.weight", hp_.head_dim));
      RINFER_ASSIGN_OR_RETURN(l.k_norm, b.vector_f32(p + "attn_k_norm.weight", hp_.head_dim));
    }
    if (hp_.post_norms) {
      RINFER_ASSIGN_OR_RETURN(l.post_attn_norm, b.vector_f32(p + "post_attention_norm.weight", e));
      RINFER_ASSIGN_OR_RETURN(l.post_ffn_norm, b.vector_f32(p + "post_ffw_norm.weight", e));
    }
    if (l.bq.defined() || l.bk.defined() || l.bv.defined()) hp_.attn_bias = true;
  }
  // The embedding table is read one row per token; the output projection is read whole.
  weight_bytes_ =
      b.bytes() - tok_embd_.nbytes() + tok_embd_.nbytes() / static_cast<uint64_t>(hp_.n_vocab);
  if (hp_.tied_output) weight_bytes_ += output_.nbytes();
  return ok_status();
}

Status check_llama_load_options(const LoadOptions& opts) {
  if (opts.max_batch <= 0 || opts.max_batch > (int64_t{1} << 16)) {
    return invalid_argument("max_batch {} is out of range [1, 65536]", opts.max_batch);
  }
  if (opts.cpu.bf16_matmuls) {
    return unsupported(
        "strategies.quantization.activations: bf16 (AMX tiles) is implemented for the "
        "encoders only; the decoder sample runs int8 or float activations");
  }
  if (opts.weight_format == DType::kF8E4M3 && !opts.device.is_cuda()) {
    return unsupported(
        "strategies.quantization.weights: fp8 runs on CUDA devices (tensor-core FP8); {} has no "
        "FP8 kernels",
        opts.device.to_string());
  }
  return ok_status();
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(std::shared_ptr<const GgufFile> file,
                                                     const LoadOptions& opts) {
  RINFER_RETURN_IF_ERROR(check_llama_load_options(opts));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->file_ = file;
  m->opts_ = opts;
  RINFER_ASSIGN_OR_RETURN(m->hp_, read_hparams(*file));
  RINFER_RETURN_IF_ERROR(m->bind_weights(file));
  RINFER_RETURN_IF_ERROR(m->convert_weights());
  return m;
}

Result<std::vector<bool>> kept_layers(int64_t n_layer, std::span<const int64_t> keep_layers) {
  std::vector<bool> keep(static_cast<size_t>(n_layer), false);
  for (int64_t k : keep_layers) {
    const int64_t il = k < 0 ? n_layer + k : k;
    if (il < 0 || il >= n_layer) {
      return invalid_argument("quantization: keep layer {} is outside [-{}, {})", k, n_layer,
                              n_layer);
    }
    keep[static_cast<size_t>(il)] = true;
  }
  return keep;
}

Result<Tensor> dequantize_f8_rows(const Tensor& codes, const Tensor& scales,
                                  std::string_view what) {
  const int64_t n_out = codes.dim(0), n_in = codes.dim(1);
  RINFER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty({n_out, n_in}, DType::kF32));
  const auto* q = codes.data_as<uint8_t>();
  const float* s = scales.data_as<float>();
  float* y = out.mutable_data_as<float>();
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t i = 0; i < n_in; ++i) {
      const uint8_t c = q[r * n_in + i];
      if ((c & 0x7f) == 0x7f) {
        return data_loss("{}: row {} holds the f8_e4m3 NaN code 0x{:02x} at column {}", what, r, c,
                         i);
      }
      y[r * n_in + i] = f8e4m3_to_f32(c) * s[r];
    }
  }
  return out;
}

Status LlamaModel::convert_weights() {
  RINFER_ASSIGN_OR_RETURN(const std::vector<bool> keep,
                          kept_layers(hp_.n_layer, opts_.keep_precision_layers));
  // An FP8 checkpoint's matrices stay codes and scales where the CUDA model runs them (weights
  // fp8, or no conversion asked for); elsewhere they become f32 values here, then the requested
  // format (bf16 when none is: the CPU has no FP8 kernels).
  const bool f8_stays =
      opts_.device.is_cuda() && (!opts_.weight_format || *opts_.weight_format == DType::kF8E4M3);
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    for (const LayerMatrix& m : kLayerMatrices) {
      Tensor& w = l.*m.w;
      Tensor& s = l.scales.*m.scale;
      if (!w.defined() || w.dtype() != DType::kF8E4M3 || f8_stays) continue;
      const std::string what = fmt::format("layer {} {}", il, m.name);
      RINFER_ASSIGN_OR_RETURN(Tensor f, dequantize_f8_rows(w, s, what));
      const DType to = opts_.weight_format && !keep[static_cast<size_t>(il)] ? *opts_.weight_format
                                                                             : DType::kBF16;
      auto c = to == DType::kF32 ? Result<Tensor>(std::move(f))
                                 : convert_weight(f, to, opts_.cpu.ops.pool);
      if (!c.ok()) {
        return c.status().with_context(fmt::format("converting {} to {}", what, dtype_name(to)));
      }
      weight_bytes_ = weight_bytes_ - w.nbytes() - s.nbytes() + c->nbytes();
      w = std::move(c).value();
      s = Tensor();
    }
  }
  if (!opts_.weight_format) return ok_status();
  const DType to = *opts_.weight_format;
  // FP8 has no host layout (its per-row scales live beside the codes on the device): the CUDA
  // model quantizes at upload (LlamaCudaModel::upload).
  if (to == DType::kF8E4M3) return ok_status();
  if (to == DType::kI8) return quantize_int8_rows(keep);
  auto conv = [&](Tensor& w, const std::string& what, bool whole) -> Status {
    if (!w.defined() || w.dtype() == to) return ok_status();
    auto c = convert_weight(w, to, opts_.cpu.ops.pool);
    if (!c.ok())
      return c.status().with_context(fmt::format("converting {} to {}", what, dtype_name(to)));
    const uint64_t before = w.nbytes(), after = c->nbytes();
    if (whole) weight_bytes_ = weight_bytes_ - before + after;
    w = std::move(c).value();
    return ok_status();
  };
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    if (keep[static_cast<size_t>(il)]) continue;
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    for (const LayerMatrix& m : kLayerMatrices) {
      RINFER_RETURN_IF_ERROR(conv(l.*m.w, fmt::format("layer {} {}", il, m.name), true));
    }
  }
  if (opts_.convert_embeddings) {
    const uint64_t row_before = tok_embd_.nbytes() / static_cast<uint64_t>(hp_.n_vocab);
    RINFER_RETURN_IF_ERROR(conv(tok_embd_, "token_embd", false));
    weight_bytes_ =
        weight_bytes_ - row_before + tok_embd_.nbytes() / static_cast<uint64_t>(hp_.n_vocab);
    if (hp_.tied_output) {
      weight_bytes_ = weight_bytes_ - output_.nbytes() + tok_embd_.nbytes();
      output_ = tok_embd_;
    } else {
      RINFER_RETURN_IF_ERROR(conv(output_, "output", true));
    }
  }
  return ok_status();
}

Status LlamaModel::quantize_int8_rows(const std::vector<bool>& keep) {
  const CalibrationStats* cal = opts_.smoothing.get();
  if (cal != nullptr &&
      (cal->n_layer != hp_.n_layer || cal->n_embd != hp_.n_embd || cal->n_ff != hp_.n_ff)) {
    return invalid_argument(
        "{}: calibrated on a model of {} layers of width {} and FFN {} ({}), this one has {} of "
        "width {} and FFN {}",
        opts_.smoothing_file, cal->n_layer, cal->n_embd, cal->n_ff, cal->model, hp_.n_layer,
        hp_.n_embd, hp_.n_ff);
  }
  const int64_t hd = hp_.head_dim, q_dim = hp_.n_head * hd, kv_dim = hp_.n_head_kv * hd;
  if (cal != nullptr && cal->smooth.o && cal->q_dim != q_dim) {
    return invalid_argument(
        "{}: calibrated on attention outputs of width {} ({}), this model's are {} ({} heads of "
        "{})",
        opts_.smoothing_file, cal->q_dim, cal->model, q_dim, hp_.n_head, hd);
  }
  // Channel j of the attention's output (query head j / hd) reads this channel of v: query head h
  // reads KV head h / group.
  const int64_t group = hp_.n_head_kv > 0 ? hp_.n_head / hp_.n_head_kv : 1;
  auto kv_channel = [&](int64_t j) { return static_cast<size_t>((j / hd) / group * hd + j % hd); };
  std::vector<float> f;
  // One row of w (layer matrix `what`) as f32 values in f.
  auto row_of = [&](const Tensor& w, int64_t r, const std::string& what) -> Status {
    const DTypeTraits& tr = dtype_traits(w.dtype());
    const int64_t row_bytes = w.strides()[0] / tr.block_size * tr.block_bytes;
    f.resize(static_cast<size_t>(w.dim(1)));
    const Status st = dequantize_row(
        w.dtype(), static_cast<const uint8_t*>(w.data()) + r * row_bytes, f.data(), w.dim(1));
    return st.ok() ? st : st.with_context(fmt::format("converting {} to int8", what));
  };
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    if (keep[static_cast<size_t>(il)]) continue;
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    // SmoothQuant (formats/calibration.h): the factors of the attention's and the MLP's normed
    // inputs, divided out of their norms, of the attention's output, divided out of v's rows
    // (s_v, a factor per KV channel; s_o spreads it over the query heads' channels), and of the
    // MLP's activation, divided out of up's rows; each multiplied into the columns of the
    // matrices that read the input.
    std::vector<float> s_attn, s_mlp, s_down, s_v, s_o;
    if (cal != nullptr) {
      const auto at = static_cast<size_t>(il);
      // The columns' maxima of an input's readers.
      auto col_max = [&](std::initializer_list<const LayerMatrix*> readers,
                         std::vector<float>& wmax) -> Status {
        for (const LayerMatrix* m : readers) {
          const Tensor& w = l.*(m->w);
          const std::string what = fmt::format("layer {} {}", il, m->name);
          for (int64_t r = 0; r < w.dim(0); ++r) {
            RINFER_RETURN_IF_ERROR(row_of(w, r, what));
            for (size_t j = 0; j < wmax.size(); ++j) wmax[j] = std::max(wmax[j], std::fabs(f[j]));
          }
        }
        return ok_status();
      };
      // s from the input's maxima and the columns' maxima of its readers.
      auto factors = [&](std::initializer_list<const LayerMatrix*> readers,
                         const std::vector<float>& act, std::vector<float>& s) -> Status {
        std::vector<float> wmax(act.size(), 0.0f);
        RINFER_RETURN_IF_ERROR(col_max(readers, wmax));
        s.resize(wmax.size());
        for (size_t j = 0; j < s.size(); ++j) s[j] = smoothing_factor(act[j], wmax[j], cal->alpha);
        return ok_status();
      };
      // A fresh norm tensor: the loaded one may view the read-only mapped file.
      auto divide_norm = [&](Tensor& norm, const std::vector<float>& s) -> Status {
        RINFER_ASSIGN_OR_RETURN(Tensor n, Tensor::empty({hp_.n_embd}, DType::kF32));
        for (size_t j = 0; j < s.size(); ++j) {
          n.mutable_data_as<float>()[j] = norm.data_as<float>()[j] / s[j];
        }
        norm = std::move(n);
        return ok_status();
      };
      if (cal->smooth.attn) {
        RINFER_RETURN_IF_ERROR(factors({&kLayerMatrices[0], &kLayerMatrices[1], &kLayerMatrices[2]},
                                       cal->attn_in[at], s_attn));
        RINFER_RETURN_IF_ERROR(divide_norm(l.attn_norm, s_attn));
      }
      if (cal->smooth.mlp) {
        RINFER_RETURN_IF_ERROR(
            factors({&kLayerMatrices[4], &kLayerMatrices[5]}, cal->mlp_in[at], s_mlp));
        RINFER_RETURN_IF_ERROR(divide_norm(l.ffn_norm, s_mlp));
      }
      if (cal->smooth.down) {
        RINFER_RETURN_IF_ERROR(factors({&kLayerMatrices[6]}, cal->down_in[at], s_down));
      }
      if (cal->smooth.o && l.wo.defined() && l.wv.defined()) {
        // The query heads of a group read the same v channel: their maxima together.
        std::vector<float> wmax_q(static_cast<size_t>(q_dim), 0.0f);
        RINFER_RETURN_IF_ERROR(col_max({&kLayerMatrices[3]}, wmax_q));
        std::vector<float> act(static_cast<size_t>(kv_dim), 0.0f), wmax(act);
        s_o.resize(static_cast<size_t>(q_dim));
        for (int64_t j = 0; j < q_dim; ++j) {
          const size_t c = kv_channel(j);
          act[c] = std::max(act[c], cal->o_in[at][static_cast<size_t>(j)]);
          wmax[c] = std::max(wmax[c], wmax_q[static_cast<size_t>(j)]);
        }
        s_v.resize(act.size());
        for (size_t c = 0; c < act.size(); ++c) {
          s_v[c] = smoothing_factor(act[c], wmax[c], cal->alpha);
        }
        for (int64_t j = 0; j < q_dim; ++j) {
          s_o[static_cast<size_t>(j)] = s_v[kv_channel(j)];
        }
        if (l.bv.defined()) {  // v's bias (Qwen2) makes the same channels
          RINFER_ASSIGN_OR_RETURN(Tensor bv, Tensor::empty({kv_dim}, DType::kF32));
          for (int64_t c = 0; c < kv_dim; ++c) {
            bv.mutable_data_as<float>()[c] = l.bv.data_as<float>()[c] / s_v[static_cast<size_t>(c)];
          }
          l.bv = std::move(bv);
        }
      }
    }
    for (const LayerMatrix& m : kLayerMatrices) {
      Tensor& w = l.*m.w;
      if (!w.defined()) continue;
      const std::string what = fmt::format("layer {} {}", il, m.name);
      const int64_t n_out = w.dim(0), n_in = w.dim(1);
      const bool reads_attn =
          m.w == &LayerWeights::wq || m.w == &LayerWeights::wk || m.w == &LayerWeights::wv;
      const bool reads_mlp = m.w == &LayerWeights::w_gate || m.w == &LayerWeights::w_up;
      const bool down = m.w == &LayerWeights::w_down;
      // The factors of the input this matrix reads.
      const std::vector<float>* cs = reads_attn  ? &s_attn
                                     : reads_mlp ? &s_mlp
                                     : down      ? &s_down
                                                 : &s_o;
      if (cs->empty()) cs = nullptr;
      // up's row r makes the activation's channel r, v's row r the attention output's channels
      // of KV channel r: divided by that channel's factor.
      const std::vector<float>* rs = m.w == &LayerWeights::w_up ? &s_down
                                     : m.w == &LayerWeights::wv ? &s_v
                                                                : nullptr;
      if (rs != nullptr && rs->empty()) rs = nullptr;
      RINFER_ASSIGN_OR_RETURN(Tensor codes, Tensor::empty({n_out, n_in}, DType::kI8));
      RINFER_ASSIGN_OR_RETURN(Tensor scales, Tensor::empty({n_out}, DType::kF32));
      for (int64_t r = 0; r < n_out; ++r) {
        RINFER_RETURN_IF_ERROR(row_of(w, r, what));
        if (cs != nullptr) {
          for (int64_t j = 0; j < n_in; ++j) {
            f[static_cast<size_t>(j)] *= (*cs)[static_cast<size_t>(j)];
          }
        }
        if (rs != nullptr) {
          const float d = 1.0f / (*rs)[static_cast<size_t>(r)];
          for (float& v : f) v *= d;
        }
        quantize_rows_int8(f.data(), 1, n_in, codes.mutable_data_as<int8_t>() + r * n_in,
                           scales.mutable_data_as<float>() + r);
      }
      const float* sc = scales.data_as<float>();
      for (int64_t r = 0; r < n_out; ++r) {
        if (!std::isfinite(sc[r])) {
          return invalid_argument("converting {} to int8: row {} holds a non-finite value", what,
                                  r);
        }
      }
      RINFER_ASSIGN_OR_RETURN(Tensor panels, cpu::pack_w8a8(codes));
      weight_bytes_ = weight_bytes_ - w.nbytes() + panels.nbytes() + scales.nbytes();
      w = std::move(panels);
      l.scales.*m.scale = std::move(scales);
    }
  }
  return ok_status();
}

Result<ForwardScratch> ForwardScratch::create(const DecoderHParams& hp, int64_t rows) {
  const int64_t q_dim = hp.n_head * hp.head_dim;
  ForwardScratch s;
  s.rows = rows;
  RINFER_ASSIGN_OR_RETURN(s.x, Tensor::empty({rows, hp.n_embd}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.h, Tensor::empty({rows, hp.n_embd}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.q, Tensor::empty({rows, q_dim}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.attn, Tensor::empty({rows, q_dim}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.gate, Tensor::empty({rows, hp.n_ff}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.up, Tensor::empty({rows, hp.n_ff}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.k, Tensor::empty({rows, hp.kv_dim()}, DType::kF32));
  RINFER_ASSIGN_OR_RETURN(s.v, Tensor::empty({rows, hp.kv_dim()}, DType::kF32));
  return s;
}

std::string LlamaModel::describe() const {
  return fmt::format(
      "{}: {} layers, n_embd {}, n_ff {}, {} heads ({} kv) x {}, vocab {}, rope {} base {} "
      "scale {}, {} output{}{}; {:.1f} MB of weights per token",
      hp_.architecture, hp_.n_layer, hp_.n_embd, hp_.n_ff, hp_.n_head, hp_.n_head_kv, hp_.head_dim,
      hp_.n_vocab, hp_.rope.mode == cpu::RopeMode::kNeox ? "neox" : "normal", hp_.rope.freq_base,
      hp_.rope.freq_scale, hp_.tied_output ? "tied" : "separate", hp_.attn_bias ? ", qkv bias" : "",
      hp_.layer_attn.empty()
          ? std::string()
          : fmt::format(
                ", gemma3 (qk norm, post norms, geglu, sliding window {} on {} of {} layers)",
                hp_.layer_attn.front().window,
                std::count_if(hp_.layer_attn.begin(), hp_.layer_attn.end(),
                              [](const auto& a) { return a.window > 0; }),
                hp_.n_layer),
      static_cast<double>(weight_bytes_) / 1e6);
}

}  // namespace rinfer::llama
