// Loading the Llama-family sample from a Hugging Face checkpoint: config.json for the
// hyper-parameters, safetensors (single file, directory or sharded index) for the weights.
//
// HF name                                        -> LlamaModel field (GGUF name)
//   model.embed_tokens.weight                       tok_embd    (token_embd.weight)
//   model.layers.N.input_layernorm.weight           attn_norm   (blk.N.attn_norm.weight)
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight  wq wk wv wo (blk.N.attn_{q,k,v,output})
//   model.layers.N.self_attn.{q,k,v}_proj.bias      bq bk bv    (Qwen2)
//   model.layers.N.post_attention_layernorm.weight  ffn_norm
//   model.layers.N.mlp.{gate,up,down}_proj.weight   w_gate w_up w_down
//   model.norm.weight                               output_norm
//   lm_head.weight                                  output (absent or tied: the embeddings)
// The checkpoint keeps Wq/Wk in HF's layout (rotate_half pairs dim i with i + d/2), so RoPE runs
// in NeoX mode on the same weights; llama.cpp's converter permutes those rows instead.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "models/bind_util.h"
#include "models/llama/llama_model.h"

namespace rinfer::llama {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

// architectures[] entry -> our architecture name.
std::string_view arch_for(std::string_view hf_arch) {
  if (hf_arch == "LlamaForCausalLM") return "llama";
  if (hf_arch == "MistralForCausalLM") return "mistral";
  if (hf_arch == "Qwen2ForCausalLM") return "qwen2";
  return {};
}

// Refuses attention_bias / mlp_bias (o_proj, MLP biases); reads rope_scaling (or transformers
// 5's rope_parameters): none / default / linear are supported.
// Returns the linear factor (1 for none).
Result<double> read_rope_and_features(const std::string& raw_json, const std::string& cfg_path) {
  nlohmann::json root = nlohmann::json::parse(raw_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return data_loss("{}: not a JSON object", cfg_path);
  }
  // Features of the HF classes that this sample does not implement.
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    auto it = root.find(key);
    if (it != root.end() && it->is_boolean() && it->get<bool>()) {
      // Qwen2's q/k/v biases are read from the tensors; these flags add o_proj / MLP biases.
      return unsupported("{}: '{}': true is not supported", cfg_path, key);
    }
  }
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    if (!it->is_object()) return data_loss("{}: '{}' must be an object or null", cfg_path, key);
    std::string type = "default";
    for (const char* tkey : {"rope_type", "type"}) {
      auto t = it->find(tkey);
      if (t == it->end()) continue;
      if (!t->is_string()) {
        return data_loss("{}: '{}.{}' must be a string", cfg_path, key, tkey);
      }
      type = t->get<std::string>();
      break;
    }
    if (type == "default" || type == "none") continue;
    if (type != "linear") {
      return unsupported("{}: {} type '{}' is not supported (none, linear)", cfg_path, key, type);
    }
    auto f = it->find("factor");
    if (f == it->end() || !f->is_number()) {
      return data_loss("{}: '{}.factor' must be a number for linear scaling", cfg_path, key);
    }
    const double factor = f->get<double>();
    if (!(factor >= 1.0 && std::isfinite(factor))) {
      return data_loss("{}: {}.factor {} must be >= 1", cfg_path, key, factor);
    }
    return factor;
  }
  return 1.0;
}

// config.json's quantization_config: none, or FP8 weights with a scale per tensor or per output
// channel (compressed-tensors' float-quantized format, or transformers' fp8 without blocks).
Status check_quantization(const std::string& raw_json, const std::string& cfg_path) {
  nlohmann::json root = nlohmann::json::parse(raw_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return data_loss("{}: not a JSON object", cfg_path);
  }
  auto q = root.find("quantization_config");
  if (q == root.end() || q->is_null()) return ok_status();
  if (!q->is_object()) return data_loss("{}: 'quantization_config' must be an object", cfg_path);
  auto str = [&](const char* key) -> std::string {
    auto it = q->find(key);
    return it != q->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string method = str("quant_method");
  if (method == "compressed-tensors") {
    const std::string format = str("format");
    if (!format.empty() && format != "float-quantized") {
      return unsupported(
          "{}: compressed-tensors format '{}' is not supported (float-quantized: FP8 weights)",
          cfg_path, format);
    }
    return ok_status();
  }
  if (method == "fp8") {
    auto blocks = q->find("weight_block_size");
    if (blocks != q->end() && !blocks->is_null()) {
      return unsupported(
          "{}: FP8 scaled by blocks (weight_block_size {}) is not supported, only "
          "per-tensor or per-channel scales",
          cfg_path, blocks->dump());
    }
    return ok_status();
  }
  return unsupported(
      "{}: quantization_config.quant_method '{}' is not supported (FP8 checkpoints: "
      "compressed-tensors float-quantized or fp8; GGUF files hold the other quantized formats)",
      cfg_path, method);
}

struct HfPaths {
  std::string config;   // config.json
  std::string weights;  // what SafetensorsModel::open takes
};

Result<HfPaths> resolve_paths(const std::string& path) {
  std::error_code ec;
  HfPaths p;
  p.weights = path;
  if (fs::is_directory(path, ec)) {
    p.config = (fs::path(path) / "config.json").string();
  } else {
    fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) parent = ".";
    p.config = (parent / "config.json").string();
  }
  if (!fs::exists(p.config, ec)) {
    return not_found("{}: no config.json at '{}' (a Hugging Face model needs one)", path, p.config);
  }
  return p;
}

Result<DecoderHParams> hparams_from_config(const HfConfig& c, const std::string& cfg_path) {
  DecoderHParams hp;
  std::string hf_arch;
  for (const std::string& a : c.architectures) {
    if (!arch_for(a).empty()) {
      hf_arch = a;
      break;
    }
  }
  if (hf_arch.empty()) {
    return unsupported(
        "{}: architectures [{}] has no supported entry (LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM)",
        cfg_path, fmt::join(c.architectures, ", "));
  }
  hp.architecture = std::string(arch_for(hf_arch));

  const auto check = [&](const char* key, int64_t v, int64_t max) -> Status {
    if (v <= 0 || v > max) {
      return data_loss("{}: '{}' = {} is out of range [1, {}]", cfg_path, key, v, max);
    }
    return ok_status();
  };
  RINFER_RETURN_IF_ERROR(check("num_hidden_layers", c.num_hidden_layers, kMaxLayers));
  RINFER_RETURN_IF_ERROR(check("hidden_size", c.hidden_size, kMaxDim));
  RINFER_RETURN_IF_ERROR(check("intermediate_size", c.intermediate_size, kMaxDim));
  RINFER_RETURN_IF_ERROR(check("num_attention_heads", c.num_attention_heads, kMaxDim));
  RINFER_RETURN_IF_ERROR(check("num_key_value_heads", c.num_key_value_heads, kMaxDim));
  RINFER_RETURN_IF_ERROR(check("head_dim", c.head_dim, kMaxDim));
  RINFER_RETURN_IF_ERROR(check("vocab_size", c.vocab_size, kMaxVocab));
  RINFER_RETURN_IF_ERROR(check("max_position_embeddings", c.max_position_embeddings, 1 << 30));
  hp.n_layer = c.num_hidden_layers;
  hp.n_embd = c.hidden_size;
  hp.n_ff = c.intermediate_size;
  hp.n_head = c.num_attention_heads;
  hp.n_head_kv = c.num_key_value_heads;
  hp.head_dim = c.head_dim;
  hp.n_vocab = c.vocab_size;
  hp.n_ctx_train = c.max_position_embeddings;
  if (hp.n_head % hp.n_head_kv != 0) {
    return data_loss("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                     cfg_path, hp.n_head, hp.n_head_kv);
  }
  if (hp.head_dim % 2 != 0) {
    return data_loss("{}: head_dim {} must be even for RoPE", cfg_path, hp.head_dim);
  }
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) {
    return data_loss("{}: rms_norm_eps {} is out of range (0, 1)", cfg_path, c.norm_eps);
  }
  hp.norm_eps = static_cast<float>(c.norm_eps);

  if (!(c.rope_theta > 1.0 && std::isfinite(c.rope_theta))) {
    return data_loss("{}: rope_theta {} must be a finite number > 1", cfg_path, c.rope_theta);
  }
  RINFER_ASSIGN_OR_RETURN(const double factor, read_rope_and_features(c.raw_json, cfg_path));
  hp.rope.n_rot = hp.head_dim;
  hp.rope.freq_base = static_cast<float>(c.rope_theta);
  hp.rope.freq_scale = static_cast<float>(1.0 / factor);
  hp.rope.mode = cpu::RopeMode::kNeox;
  hp.tied_output = c.tie_word_embeddings;

  // Mistral's sliding window applies to every layer; Qwen2's (use_sliding_window) only to the
  // layers from max_window_layers on, which is not implemented.
  if (c.sliding_window && *c.sliding_window < hp.n_ctx_train) {
    if (hp.architecture != "mistral") {
      return unsupported("{}: sliding_window {} is not supported for {}", cfg_path,
                         *c.sliding_window, hf_arch);
    }
    hp.layer_attn.assign(static_cast<size_t>(hp.n_layer),
                         DecoderHParams::LayerAttn{.window = *c.sliding_window,
                                                   .rope_base = hp.rope.freq_base,
                                                   .rope_scale = hp.rope.freq_scale});
  }
  return hp;
}

// Binds safetensors tensors as zero-copy views, checking name, shape and dtype; remembers which
// tensors were used so that unexpected ones (an unsupported feature) are reported.
class HfBinder {
 public:
  explicit HfBinder(std::shared_ptr<const SafetensorsModel> st) : st_(std::move(st)) {}

  Result<Tensor> weight(const std::string& name, std::initializer_list<int64_t> expected,
                        bool optional = false) {
    const SafetensorsTensor* t = st_->find(name);
    const std::vector<int64_t> want(expected);
    if (t == nullptr) {
      if (optional) return Tensor();
      return not_found("{}: tensor '{}' is missing (expected shape {})", st_->path(), name,
                       shape_string(want));
    }
    const std::string& where = st_->shard_of(name)->path();
    RINFER_RETURN_IF_ERROR(check_shape(where, name, t->shape, want));
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      return unsupported("{}: tensor '{}' has dtype {} (F32, F16 or BF16 expected)", where, name,
                         dtype_name(t->dtype));
    }
    used_.insert(name);
    auto tensor = view_tensor(name, t->data, t->nbytes, t->shape, t->dtype, st_);
    if (!tensor.ok()) return tensor.status();
    bytes_ += t->nbytes;
    return tensor;
  }

  // A layer matrix: F32, F16 or BF16, or the F8_E4M3 codes of an FP8 checkpoint with their
  // `<name>_scale` (per tensor: shape [] or [1]; per output channel: [n_out] or [n_out, 1]; F32,
  // BF16 or F16), returned in *scale as f32 [n_out, 1]. A static `input_scale` beside it is
  // read and not used: activations are quantized per token as they come.
  Result<Tensor> matrix(const std::string& name, int64_t n_out, int64_t n_in, Tensor* scale) {
    const std::string stem = name.substr(0, name.size() - std::string_view("weight").size());
    const SafetensorsTensor* t = st_->find(name);
    if (t != nullptr && t->dtype == DType::kF8E5M2) {
      return unsupported("{}: tensor '{}' holds F8_E5M2 codes (FP8 checkpoints are read in E4M3)",
                         st_->shard_of(name)->path(), name);
    }
    if (t == nullptr || t->dtype != DType::kF8E4M3) return weight(name, {n_out, n_in});
    const std::string& where = st_->shard_of(name)->path();
    if (st_->find(name + "_scale_inv") != nullptr) {
      return unsupported(
          "{}: tensor '{}' is scaled by blocks ('{}_scale_inv'): block-wise FP8 checkpoints are "
          "not supported, only per-tensor or per-channel 'weight_scale'",
          where, name, name);
    }
    RINFER_RETURN_IF_ERROR(check_shape(where, name, t->shape, {n_out, n_in}));
    const std::string sname = name + "_scale";
    const SafetensorsTensor* s = st_->find(sname);
    if (s == nullptr) {
      return data_loss("{}: tensor '{}' holds F8_E4M3 codes but '{}' is missing", where, name,
                       sname);
    }
    const std::string& swhere = st_->shard_of(sname)->path();
    const bool per_tensor = s->numel == 1 && s->shape.size() <= 1;
    const bool per_row = s->numel == static_cast<uint64_t>(n_out) &&
                         (s->shape.size() == 1 || (s->shape.size() == 2 && s->shape[1] == 1));
    if (!per_tensor && !per_row) {
      return unsupported(
          "{}: '{}' has shape {}: a scale per tensor ([] or [1]) or per output "
          "channel ([{}] or [{}, 1]) is read",
          swhere, sname, shape_string(s->shape), n_out, n_out);
    }
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16) {
      return unsupported("{}: '{}' has dtype {} (F32, BF16 or F16 expected)", swhere, sname,
                         dtype_name(s->dtype));
    }
    RINFER_ASSIGN_OR_RETURN(Tensor scales, Tensor::empty({n_out, 1}, DType::kF32));
    float* out = scales.mutable_data_as<float>();
    const size_t esize = static_cast<size_t>(dtype_traits(s->dtype).block_bytes);
    for (int64_t r = 0; r < n_out; ++r) {
      const uint8_t* p = s->data + (per_tensor ? 0 : static_cast<size_t>(r) * esize);
      float v = 0.0f;
      if (s->dtype == DType::kF32) {
        std::memcpy(&v, p, 4);
      } else {
        uint16_t h = 0;
        std::memcpy(&h, p, 2);
        v = s->dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      if (!(v > 0.0f) || !std::isfinite(v)) {
        return data_loss("{}: '{}' holds {} at row {} (a scale must be positive and finite)",
                         swhere, sname, v, per_tensor ? 0 : r);
      }
      out[r] = v;
    }
    used_.insert(sname);
    if (st_->find(stem + "input_scale") != nullptr) used_.insert(stem + "input_scale");
    used_.insert(name);
    bytes_ += t->nbytes + s->nbytes;
    *scale = std::move(scales);
    return view_tensor(name, t->data, t->nbytes, t->shape, t->dtype, st_);
  }

  Result<Tensor> vector_f32(const std::string& name, int64_t n, bool optional = false) {
    RINFER_ASSIGN_OR_RETURN(Tensor t, weight(name, {n}, optional));
    return vector_as_f32(std::move(t), name);
  }

  // A tensor nobody asked for: an error naming it (rotary_emb.inv_freq buffers of old
  // checkpoints are recomputed and ignored; a tied lm_head copy is ignored too).
  Status check_all_used(bool tied) const {
    for (const SafetensorsTensor& t : st_->tensors()) {
      if (used_.count(t.name) != 0 || t.name.ends_with(".rotary_emb.inv_freq")) continue;
      if (tied && t.name == "lm_head.weight") continue;
      return unsupported(
          "{}: tensor '{}' {} is not used by the {} sample (an unsupported feature?)",
          st_->shard_of(t.name)->path(), t.name, shape_string(t.shape), "llama");
    }
    return ok_status();
  }

  uint64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<const SafetensorsModel> st_;
  std::set<std::string, std::less<>> used_;
  uint64_t bytes_ = 0;
};

}  // namespace

Status LlamaModel::bind_hf_weights(const std::shared_ptr<const SafetensorsModel>& st) {
  HfBinder b(st);
  const int64_t e = hp_.n_embd, q_dim = hp_.n_head * hp_.head_dim, kv = hp_.kv_dim();
  RINFER_ASSIGN_OR_RETURN(tok_embd_, b.weight("model.embed_tokens.weight", {hp_.n_vocab, e}));
  RINFER_ASSIGN_OR_RETURN(output_norm_, b.vector_f32("model.norm.weight", e));
  if (!hp_.tied_output) {
    RINFER_ASSIGN_OR_RETURN(output_, b.weight("lm_head.weight", {hp_.n_vocab, e}, true));
    hp_.tied_output = !output_.defined();
  }
  if (hp_.tied_output) output_ = tok_embd_;

  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    const std::string p = fmt::format("model.layers.{}.", il);
    RINFER_ASSIGN_OR_RETURN(l.attn_norm, b.vector_f32(p + "input_layernorm.weight", e));
    LayerWeights::Scales& s = l.scales;
    RINFER_ASSIGN_OR_RETURN(l.wq, b.matrix(p + "self_attn.q_proj.weight", q_dim, e, &s.wq));
    RINFER_ASSIGN_OR_RETURN(l.wk, b.matrix(p + "self_attn.k_proj.weight", kv, e, &s.wk));
    RINFER_ASSIGN_OR_RETURN(l.wv, b.matrix(p + "self_attn.v_proj.weight", kv, e, &s.wv));
    RINFER_ASSIGN_OR_RETURN(l.wo, b.matrix(p + "self_attn.o_proj.weight", e, q_dim, &s.wo));
    // Qwen2 always has them; for the others they are read when present.
    const bool need_bias = hp_.architecture == "qwen2";
    RINFER_ASSIGN_OR_RETURN(l.bq, b.vector_f32(p + "self_attn.q_proj.bias", q_dim, !need_bias));
    RINFER_ASSIGN_OR_RETURN(l.bk, b.vector_f32(p + "self_attn.k_proj.bias", kv, !need_bias));
    RINFER_ASSIGN_OR_RETURN(l.bv, b.vector_f32(p + "self_attn.v_proj.bias", kv, !need_bias));
    RINFER_ASSIGN_OR_RETURN(l.ffn_norm, b.vector_f32(p + "post_attention_layernorm.weight", e));
    const int64_t f = hp_.n_ff;
    RINFER_ASSIGN_OR_RETURN(l.w_gate, b.matrix(p + "mlp.gate_proj.weight", f, e, &s.w_gate));
    RINFER_ASSIGN_OR_RETURN(l.w_up, b.matrix(p + "mlp.up_proj.weight", f, e, &s.w_up));
    RINFER_ASSIGN_OR_RETURN(l.w_down, b.matrix(p + "mlp.down_proj.weight", e, f, &s.w_down));
    if (l.bq.defined() || l.bk.defined() || l.bv.defined()) hp_.attn_bias = true;
  }
  RINFER_RETURN_IF_ERROR(b.check_all_used(hp_.tied_output));
  // As for GGUF: one embedding row per token, every other matrix read whole.
  weight_bytes_ =
      b.bytes() - tok_embd_.nbytes() + tok_embd_.nbytes() / static_cast<uint64_t>(hp_.n_vocab);
  if (hp_.tied_output) weight_bytes_ += output_.nbytes();
  return ok_status();
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::load_hf(const std::string& path,
                                                        const LoadOptions& opts) {
  RINFER_RETURN_IF_ERROR(check_llama_load_options(opts));
  RINFER_ASSIGN_OR_RETURN(const HfPaths paths, resolve_paths(path));
  RINFER_ASSIGN_OR_RETURN(const HfConfig cfg, read_hf_config(paths.config));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->opts_ = opts;
  RINFER_ASSIGN_OR_RETURN(m->hp_, hparams_from_config(cfg, paths.config));
  RINFER_RETURN_IF_ERROR(check_quantization(cfg.raw_json, paths.config));
  auto opened = SafetensorsModel::open(paths.weights);
  if (!opened.ok()) return opened.status();
  auto st = std::make_shared<const SafetensorsModel>(std::move(opened).value());
  m->file_ = st;
  RINFER_RETURN_IF_ERROR(m->bind_hf_weights(st));
  RINFER_RETURN_IF_ERROR(m->convert_weights());
  return m;
}

}  // namespace rinfer::llama
