#include "formats/model_info.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/mapped_file.h"
#include "core/strings.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/torch_checkpoint.h"

namespace rinfer {

namespace fs = std::filesystem;

namespace {

void add_usage(ModelInfo& info, DType dtype, uint64_t elements, uint64_t bytes) {
  DTypeUsage& u = info.by_dtype[dtype];
  u.tensors++;
  u.elements += elements;
  u.bytes += bytes;
  info.n_tensors++;
  info.n_elements += elements;
  info.tensor_bytes += bytes;
}

std::optional<int64_t> gguf_int(const GgufFile& f, const std::string& key) {
  auto v = f.get_int(key);
  if (v) return v;
  // Some converters store per-layer arrays (e.g. head_count_kv); report the first element.
  const GgufValue* a = f.find(key);
  if (a != nullptr && a->is_array() && a->array_size() > 0) return a->array_element<int64_t>(0);
  return std::nullopt;
}

Result<ModelInfo> gguf_info(const std::shared_ptr<const MappedFile>& file) {
  RINFER_ASSIGN_OR_RETURN(GgufFile f, GgufFile::parse(file));
  ModelInfo info;
  info.path = file->path();
  info.format = "gguf";
  info.format_version = f.version();
  info.file_bytes = file->size();
  info.architecture = std::string(f.get_string("general.architecture").value_or(""));
  info.name = std::string(f.get_string("general.name").value_or(""));
  const std::string a = info.architecture + ".";
  info.n_layers = gguf_int(f, a + "block_count");
  info.n_embd = gguf_int(f, a + "embedding_length");
  info.n_ff = gguf_int(f, a + "feed_forward_length");
  info.n_head = gguf_int(f, a + "attention.head_count");
  info.n_head_kv = gguf_int(f, a + "attention.head_count_kv");
  if (!info.n_head_kv) info.n_head_kv = info.n_head;  // GGUF: absent means no GQA
  info.head_dim = gguf_int(f, a + "attention.key_length");
  if (!info.head_dim && info.n_embd && info.n_head && *info.n_head > 0) {
    info.head_dim = *info.n_embd / *info.n_head;
  }
  info.context_length = gguf_int(f, a + "context_length");
  info.rope_freq_base = f.get_float(a + "rope.freq_base");
  info.sliding_window = gguf_int(f, a + "attention.sliding_window");
  info.norm_eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!info.norm_eps) info.norm_eps = f.get_float(a + "attention.layer_norm_epsilon");

  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  info.tokenizer_tokens = tokens != nullptr ? tokens->array_size() : 0;
  info.vocab_size = gguf_int(f, a + "vocab_size");
  if (!info.vocab_size && info.tokenizer_tokens > 0) {
    info.vocab_size = static_cast<int64_t>(info.tokenizer_tokens);
  }
  if (auto model = f.get_string("tokenizer.ggml.model")) {
    std::string kind(*model);
    if (*model == "gpt2")
      kind += " (byte-level BPE";
    else if (*model == "llama")
      kind += " (SentencePiece";
    else if (*model == "bert")
      kind += " (WordPiece";
    else
      kind += " (";
    if (auto pre = f.get_string("tokenizer.ggml.pre")) kind += fmt::format(", pre {}", *pre);
    kind += ")";
    info.tokenizer = kind;
  } else {
    info.tokenizer = "none";
  }
  info.has_chat_template = f.find("tokenizer.chat_template") != nullptr;
  for (const GgufTensorInfo& t : f.tensors()) {
    add_usage(info, t.dtype, static_cast<uint64_t>(t.n_elements), t.nbytes);
  }
  return info;
}

// tokenizer.json's model type, and whether tokenizer_config.json has a chat template.
void hf_tokenizer_info(const fs::path& dir, ModelInfo& info) {
  info.tokenizer = "none";
  auto read_json = [](const fs::path& p) -> nlohmann::json {
    auto text = read_regular_file(p.string());  // a FIFO is skipped, never read (blocks)
    if (!text.ok()) return nullptr;
    return nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  };
  nlohmann::json tok = read_json(dir / "tokenizer.json");
  if (tok.is_object()) {
    std::string type = "unknown";
    auto m = tok.find("model");
    if (m != tok.end() && m->is_object()) {
      auto t = m->find("type");
      if (t != m->end() && t->is_string()) type = t->get<std::string>();
      auto v = m->find("vocab");
      if (v != m->end() && (v->is_object() || v->is_array())) info.tokenizer_tokens = v->size();
    }
    info.tokenizer = "tokenizer.json (" + type + ")";
  }
  nlohmann::json cfg = read_json(dir / "tokenizer_config.json");
  info.has_chat_template = cfg.is_object() && cfg.contains("chat_template");
}

Result<ModelInfo> safetensors_info(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(SafetensorsModel m, SafetensorsModel::open(path));
  ModelInfo info;
  info.path = path;
  info.format = "safetensors";
  for (const SafetensorsFile& s : m.shards()) info.file_bytes += s.file()->size();
  for (const SafetensorsTensor& t : m.tensors()) add_usage(info, t.dtype, t.numel, t.nbytes);

  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  const fs::path config = dir / "config.json";
  std::error_code ec;
  if (fs::exists(config, ec)) {
    RINFER_ASSIGN_OR_RETURN(HfConfig c, read_hf_config(config.string()));
    info.architecture = c.model_type;
    info.name = c.architectures.empty() ? c.model_type : c.architectures.front();
    info.classes = c.architectures;
    info.n_layers = c.num_hidden_layers;
    info.n_embd = c.hidden_size;
    info.n_ff = c.intermediate_size;
    info.n_head = c.num_attention_heads;
    info.n_head_kv = c.num_key_value_heads;
    info.head_dim = c.head_dim;
    info.context_length = c.max_position_embeddings;
    info.vocab_size = c.vocab_size;
    if (!c.absolute_positions) info.rope_freq_base = c.rope_theta;
    info.sliding_window = c.sliding_window;
    info.norm_eps = c.norm_eps;
  }
  hf_tokenizer_info(dir, info);
  return info;
}

Result<ModelInfo> torch_info(const std::shared_ptr<const MappedFile>& file) {
  RINFER_ASSIGN_OR_RETURN(TorchCheckpoint c, TorchCheckpoint::parse(file));
  ModelInfo info;
  info.path = file->path();
  info.format = std::string(torch_format_name(c.format()));
  info.file_bytes = file->size();
  info.tokenizer = "none";
  int64_t convs = 0;
  for (const TorchTensor& t : c.tensors()) {
    add_usage(info, t.dtype, t.numel, t.nbytes);
    if (t.shape.size() == 4) {
      if (convs++ == 0) info.input_channels = t.shape[1];
    } else if (t.shape.size() == 2) {
      info.n_classes = t.shape[0];  // the last linear layer's outputs
    }
  }
  if (convs > 0) info.n_convolutions = convs;
  return info;
}

std::string opt(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "-"; }
std::string opt(const std::optional<double>& v) { return v ? fmt::format("{:g}", *v) : "-"; }

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30))
    return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (uint64_t{1} << 20))
    return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

}  // namespace

Result<ModelInfo> read_model_info(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return safetensors_info(path);
  RINFER_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0) return gguf_info(file);
  if (path.ends_with(".safetensors") || path.ends_with(".json")) return safetensors_info(path);
  if (TorchCheckpoint::sniff(file->bytes())) return torch_info(file);
  return unsupported(
      "{}: not a GGUF file (magic 'GGUF'), a PyTorch checkpoint (a zip, or a pickle with the "
      "legacy magic number) nor a .safetensors file or directory",
      path);
}

std::string format_model_info(const ModelInfo& m) {
  std::string s;
  auto line = [&s](std::string_view k, const std::string& v) {
    s += fmt::format("{:<18} {}\n", k, v);
  };
  line("file", display_text(m.path));
  line("format", m.format_version ? fmt::format("{} v{}", m.format, m.format_version) : m.format);
  line("size", fmt::format("{} ({} bytes)", human_bytes(m.file_bytes), m.file_bytes));
  line("name", m.name.empty() ? "-" : display_text(m.name));
  line("architecture", m.architecture.empty() ? "-" : display_text(m.architecture));
  // The rows of the model's kind: a transformer's hyper-parameters and tokenizer, a
  // convolutional network's shape.
  const bool transformer = m.n_layers || m.n_embd || m.n_head || m.vocab_size ||
                           m.context_length || !m.n_convolutions;
  if (transformer) {
    line("layers", opt(m.n_layers));
    line("embedding", opt(m.n_embd));
    line("feed-forward", opt(m.n_ff));
    line("heads", opt(m.n_head));
    line("kv heads", opt(m.n_head_kv));
    line("head dim", opt(m.head_dim));
    line("context length", opt(m.context_length));
    line("rope base", opt(m.rope_freq_base));
    if (m.sliding_window) line("sliding window", opt(m.sliding_window));
    line("norm eps", opt(m.norm_eps));
    line("vocab size", opt(m.vocab_size));
  }
  if (m.n_convolutions) {
    line("convolutions", opt(m.n_convolutions));
    line("input channels", opt(m.input_channels));
    line("classes", opt(m.n_classes));
  }
  if (transformer || (!m.tokenizer.empty() && m.tokenizer != "none")) {
    line("tokenizer", m.tokenizer_tokens ? fmt::format("{}, {} tokens",
                                                       display_text(m.tokenizer),
                                                       m.tokenizer_tokens)
                                         : display_text(m.tokenizer));
    line("chat template", m.has_chat_template ? "yes" : "no");
  }
  line("tensors", fmt::format("{} ({} parameters, {})", m.n_tensors, m.n_elements,
                              human_bytes(m.tensor_bytes)));
  for (const auto& [dtype, u] : m.by_dtype) {
    line(fmt::format("  {}", dtype_name(dtype)),
         fmt::format("{:>4} tensors {:>12} params {:>10}", u.tensors, u.elements,
                     human_bytes(u.bytes)));
  }
  return s;
}

}  // namespace rinfer
