// Loading the BERT sample: config.json for the hyper-parameters, safetensors for the weights.
//
// HF name (optionally under "bert.")                  -> field
//   embeddings.{word,position,token_type}_embeddings     word_emb pos_emb type_emb
//   embeddings.LayerNorm.{weight,bias}                    emb_ln_g emb_ln_b
//   encoder.layer.N.attention.self.{query,key,value}      wq bq, wk bk, wv bv
//   encoder.layer.N.attention.output.dense                wo bo
//   encoder.layer.N.attention.output.LayerNorm            ln1_g ln1_b
//   encoder.layer.N.intermediate.dense                    w1 b1
//   encoder.layer.N.output.dense                          w2 b2
//   encoder.layer.N.output.LayerNorm                      ln2_g ln2_b
// The pooler and any head (MLM, classification) are not used by sentence embeddings.
#include "models/bert/bert_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "core/quantize.h"
#include "formats/hf_config.h"
#include "models/bert/random_bert.h"
#include "models/bind_util.h"

namespace rinfer::bert {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxDim = int64_t{1} << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxPositions = int64_t{1} << 16;

Result<EncoderHParams> read_hparams(const std::string& cfg_path) {
  RINFER_ASSIGN_OR_RETURN(HfConfig c, read_hf_config(cfg_path));
  if (!is_bert_config(c.model_type)) {
    return unsupported("{}: model_type '{}' is not a BERT encoder", cfg_path, c.model_type);
  }
  const nlohmann::json j = nlohmann::json::parse(c.raw_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not a JSON object", cfg_path);
  const std::string act = j.value("hidden_act", "gelu");
  if (act != "gelu") {
    return unsupported("{}: hidden_act '{}' is not supported (gelu, the erf form)", cfg_path, act);
  }
  const std::string pos = j.value("position_embedding_type", "absolute");
  if (pos != "absolute") {
    return unsupported("{}: position_embedding_type '{}' is not supported (absolute)", cfg_path,
                       pos);
  }
  if (!j.contains("type_vocab_size") || !j["type_vocab_size"].is_number_integer()) {
    return data_loss("{}: 'type_vocab_size' is missing or not an integer", cfg_path);
  }
  EncoderHParams hp;
  hp.architecture = "bert";
  hp.n_vocab = c.vocab_size;
  hp.n_embd = c.hidden_size;
  hp.n_layer = c.num_hidden_layers;
  hp.n_head = c.num_attention_heads;
  hp.n_ff = c.intermediate_size;
  hp.n_positions = c.max_position_embeddings;
  hp.n_token_types = j["type_vocab_size"].get<int64_t>();
  const auto check = [&](const char* key, int64_t v, int64_t max) -> Status {
    if (v <= 0 || v > max) {
      return data_loss("{}: '{}' = {} is out of range [1, {}]", cfg_path, key, v, max);
    }
    return ok_status();
  };
  RINFER_RETURN_IF_ERROR(check("num_hidden_layers", hp.n_layer, kMaxLayers));
  RINFER_RETURN_IF_ERROR(check("hidden_size", hp.n_embd, kMaxDim));
  RINFER_RETURN_IF_ERROR(check("intermediate_size", hp.n_ff, kMaxDim * 4));
  RINFER_RETURN_IF_ERROR(check("num_attention_heads", hp.n_head, hp.n_embd));
  RINFER_RETURN_IF_ERROR(check("vocab_size", hp.n_vocab, kMaxVocab));
  RINFER_RETURN_IF_ERROR(check("max_position_embeddings", hp.n_positions, kMaxPositions));
  RINFER_RETURN_IF_ERROR(check("type_vocab_size", hp.n_token_types, 1024));
  if (hp.n_embd % hp.n_head != 0) {
    return data_loss("{}: hidden_size {} is not a multiple of num_attention_heads {}", cfg_path,
                     hp.n_embd, hp.n_head);
  }
  if (c.num_key_value_heads != c.num_attention_heads || c.head_dim != hp.head_dim()) {
    return unsupported(
        "{}: BERT has no grouped or resized heads (num_key_value_heads {}, "
        "head_dim {})",
        cfg_path, c.num_key_value_heads, c.head_dim);
  }
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) {
    return data_loss("{}: layer_norm_eps {} is out of range (0, 1)", cfg_path, c.norm_eps);
  }
  hp.norm_eps = static_cast<float>(c.norm_eps);
  return hp;
}

}  // namespace

bool is_bert_config(const std::string& model_type) { return model_type == "bert"; }

Status BertModel::bind(const SafetensorsModel& st) {
  std::string prefix;
  if (st.find("embeddings.word_embeddings.weight") == nullptr &&
      st.find("bert.embeddings.word_embeddings.weight") != nullptr) {
    prefix = "bert.";
  }
  const auto get = [&](const std::string& name, const std::vector<int64_t>& shape,
                       bool as_f32) -> Result<Tensor> {
    const std::string full = prefix + name;
    const SafetensorsTensor* t = st.find(full);
    if (t == nullptr) return data_loss("{}: tensor '{}' is missing", st.path(), full);
    RINFER_RETURN_IF_ERROR(check_shape(st.path(), full, t->shape, shape));
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      return unsupported("{}: tensor '{}' is {}, not f32, f16 or bf16", st.path(), full,
                         dtype_name(t->dtype));
    }
    RINFER_ASSIGN_OR_RETURN(Tensor v,
                            view_tensor(full, t->data, t->nbytes, t->shape, t->dtype, file_));
    weight_bytes_ += t->nbytes;
    if (!as_f32) return v;
    return vector_as_f32(std::move(v), full);
  };
  const int64_t e = hp_.n_embd, f = hp_.n_ff;
  RINFER_ASSIGN_OR_RETURN(w_.word_emb,
                          get("embeddings.word_embeddings.weight", {hp_.n_vocab, e}, false));
  RINFER_ASSIGN_OR_RETURN(w_.pos_emb,
                          get("embeddings.position_embeddings.weight", {hp_.n_positions, e}, true));
  RINFER_ASSIGN_OR_RETURN(
      w_.type_emb, get("embeddings.token_type_embeddings.weight", {hp_.n_token_types, e}, true));
  RINFER_ASSIGN_OR_RETURN(w_.emb_ln_g, get("embeddings.LayerNorm.weight", {e}, true));
  RINFER_ASSIGN_OR_RETURN(w_.emb_ln_b, get("embeddings.LayerNorm.bias", {e}, true));
  w_.layers.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    BertLayer& l = w_.layers[static_cast<size_t>(il)];
    const std::string p = fmt::format("encoder.layer.{}.", il);
    RINFER_ASSIGN_OR_RETURN(l.wq, get(p + "attention.self.query.weight", {e, e}, false));
    RINFER_ASSIGN_OR_RETURN(l.bq, get(p + "attention.self.query.bias", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.wk, get(p + "attention.self.key.weight", {e, e}, false));
    RINFER_ASSIGN_OR_RETURN(l.bk, get(p + "attention.self.key.bias", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.wv, get(p + "attention.self.value.weight", {e, e}, false));
    RINFER_ASSIGN_OR_RETURN(l.bv, get(p + "attention.self.value.bias", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.wo, get(p + "attention.output.dense.weight", {e, e}, false));
    RINFER_ASSIGN_OR_RETURN(l.bo, get(p + "attention.output.dense.bias", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.ln1_g, get(p + "attention.output.LayerNorm.weight", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.ln1_b, get(p + "attention.output.LayerNorm.bias", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.w1, get(p + "intermediate.dense.weight", {f, e}, false));
    RINFER_ASSIGN_OR_RETURN(l.b1, get(p + "intermediate.dense.bias", {f}, true));
    RINFER_ASSIGN_OR_RETURN(l.w2, get(p + "output.dense.weight", {e, f}, false));
    RINFER_ASSIGN_OR_RETURN(l.b2, get(p + "output.dense.bias", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.ln2_g, get(p + "output.LayerNorm.weight", {e}, true));
    RINFER_ASSIGN_OR_RETURN(l.ln2_b, get(p + "output.LayerNorm.bias", {e}, true));
  }
  // Per token, the embedding tables are read one row each, not whole.
  weight_bytes_ -= w_.word_emb.nbytes() + w_.pos_emb.nbytes() + w_.type_emb.nbytes();
  weight_bytes_ += 3 * w_.word_emb.nbytes() / static_cast<uint64_t>(hp_.n_vocab);
  return ok_status();
}

Status BertModel::convert() {
  if (!opts_.weight_format) return ok_status();
  const DType to = *opts_.weight_format;
  const auto n_layer = static_cast<int64_t>(w_.layers.size());
  std::vector<bool> keep(w_.layers.size(), false);
  for (int64_t k : opts_.keep_precision_layers) {
    const int64_t il = k < 0 ? n_layer + k : k;
    if (il < 0 || il >= n_layer) {
      return invalid_argument("quantization: keep layer {} is outside [-{}, {})", k, n_layer,
                              n_layer);
    }
    keep[static_cast<size_t>(il)] = true;
  }
  for (size_t il = 0; il < w_.layers.size(); ++il) {
    if (keep[il]) continue;
    BertLayer& l = w_.layers[il];
    for (auto [t, what] : {std::pair{&l.wq, "query"},
                           {&l.wk, "key"},
                           {&l.wv, "value"},
                           {&l.wo, "attention output"},
                           {&l.w1, "intermediate"},
                           {&l.w2, "output"}}) {
      if (t->dtype() == to) continue;
      auto c = convert_weight(*t, to, opts_.cpu.ops.pool);
      if (!c.ok()) {
        return c.status().with_context(
            fmt::format("converting layer {} {} to {}", il, what, dtype_name(to)));
      }
      weight_bytes_ = weight_bytes_ - t->nbytes() + c->nbytes();
      *t = std::move(c).value();
    }
  }
  return ok_status();
}

Status BertModel::pack_bf16() {
  if (!opts_.cpu.bf16_matmuls) return ok_status();
  if (!opts_.device.is_cpu()) {
    return unsupported("strategies.quantization.activations: bf16 is a CPU strategy, not for {}",
                       opts_.device.to_string());
  }
  if (opts_.cpu.ops.impl == cpu::Impl::kFast && !cpu::amx_bf16_available()) {
    return unsupported(
        "strategies.quantization.activations: bf16 needs a CPU with AMX-BF16 tiles (Intel Xeon "
        "4th generation or later) and a kernel that grants them; this CPU has none: use float");
  }
  w_.bf16.resize(w_.layers.size());
  for (size_t il = 0; il < w_.layers.size(); ++il) {
    BertLayer& l = w_.layers[il];
    BertBf16Layer& p = w_.bf16[il];
    for (auto [t, to, what] : {std::tuple{&l.wq, &p.wq, "query"},
                               {&l.wk, &p.wk, "key"},
                               {&l.wv, &p.wv, "value"},
                               {&l.wo, &p.wo, "attention output"},
                               {&l.w1, &p.w1, "intermediate"},
                               {&l.w2, &p.w2, "output"}}) {
      auto packed = cpu::PackedBf16::pack(*t);
      if (!packed.ok()) {
        return packed.status().with_context(fmt::format("packing layer {} {} to bf16", il, what));
      }
      *to = std::move(packed).value();
      weight_bytes_ =
          weight_bytes_ - t->nbytes() + static_cast<uint64_t>(to->n_pad() * to->k_pad()) * 2;
    }
  }
  return ok_status();
}

Result<std::unique_ptr<BertModel>> BertModel::load(const std::string& path,
                                                   const LoadOptions& opts) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  fs::path parent = is_dir ? fs::path(path) : fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  const std::string cfg = (parent / "config.json").string();
  std::unique_ptr<BertModel> m(new BertModel());
  m->opts_ = opts;
  RINFER_ASSIGN_OR_RETURN(m->hp_, read_hparams(cfg));
  RINFER_ASSIGN_OR_RETURN(SafetensorsModel st, SafetensorsModel::open(path));
  m->file_ = std::make_shared<const SafetensorsModel>(std::move(st));
  RINFER_RETURN_IF_ERROR(m->bind(*m->file_));
  RINFER_RETURN_IF_ERROR(m->convert());
  RINFER_RETURN_IF_ERROR(m->pack_bf16());
  return m;
}

Result<std::unique_ptr<BertModel>> BertModel::load_random(std::string_view shape,
                                                          const std::string& source,
                                                          const LoadOptions& opts) {
  std::unique_ptr<BertModel> m(new BertModel());
  m->opts_ = opts;
  m->random_ = true;
  RINFER_ASSIGN_OR_RETURN(m->hp_, random_shape(shape));
  RINFER_ASSIGN_OR_RETURN(SafetensorsFile f,
                          SafetensorsFile::parse(random_safetensors(m->hp_, source)));
  m->file_ = std::make_shared<const SafetensorsModel>(
      SafetensorsModel::from_file(source, std::move(f)));
  RINFER_RETURN_IF_ERROR(m->bind(*m->file_));
  RINFER_RETURN_IF_ERROR(m->convert());
  RINFER_RETURN_IF_ERROR(m->pack_bf16());
  return m;
}

std::string BertModel::builtin_tokenizer_json() const {
  return random_ ? synthetic_tokenizer_json(hp_.n_vocab) : std::string();
}

std::string BertModel::describe() const {
  return fmt::format(
      "bert: {} layers, n_embd {}, n_ff {}, {} heads x {}, vocab {}, {} positions, "
      "{} weights, {:.1f} MB",
      hp_.n_layer, hp_.n_embd, hp_.n_ff, hp_.n_head, hp_.head_dim(), hp_.n_vocab, hp_.n_positions,
      dtype_name(w_.layers.empty() ? DType::kF32 : w_.layers[0].wq.dtype()),
      static_cast<double>(file_ ? file_->total_bytes() : 0) / 1e6);
}

Result<std::unique_ptr<EncoderRunner>> BertModel::create_runner(
    const EncoderRunnerOptions& opts) const {
  if (opts_.device.is_cuda()) {
#if defined(RINFER_WITH_CUDA)
    return make_cuda_runner(*this, opts);
#else
    return unsupported("bert: {} needs a CUDA build (cmake --preset cuda)",
                       opts_.device.to_string());
#endif
  }
  if (!opts_.device.is_cpu()) {
    return unsupported("bert: no runner for {}", opts_.device.to_string());
  }
  return make_cpu_runner(*this, opts);
}

}  // namespace rinfer::bert
