// The model registry: load_model reads a model file's own metadata and picks the sample that
// runs it. GGUF files name their architecture (general.architecture); Hugging Face checkpoints
// say what they are in config.json (model_type, architectures). No name switch anywhere else.
#include <fmt/ranges.h>

#include <filesystem>

#include "core/error.h"
#include "core/strings.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "models/bert/bert_model.h"
#include "models/encoder.h"
#include "models/llama/llama_model.h"
#include "models/model.h"
#if RINFER_WITH_CUDA
#include "models/llama/cuda/llama_cuda_model.h"
#endif

namespace rinfer {

namespace {

namespace fs = std::filesystem;

// A host model stays on the CPU or moves its weights to opts.device.
Result<std::unique_ptr<ModelSample>> place_on_device(std::unique_ptr<llama::LlamaModel> m,
                                                     const LoadOptions& opts,
                                                     const std::string& path) {
  if (opts.device.is_cpu()) {
    if (opts.kv_dtype && *opts.kv_dtype != DType::kF32) {
      return unsupported("{}: the CPU keeps its KV cache in f32 only, not {}", path,
                         dtype_name(*opts.kv_dtype));
    }
    return std::unique_ptr<ModelSample>(std::move(m));
  }
#if RINFER_WITH_CUDA
  auto g = llama::make_cuda_model(std::move(m), opts);
  if (!g.ok()) return g.status().with_context(path + " on " + opts.device.to_string());
  return std::unique_ptr<ModelSample>(std::move(g).value());
#else
  return unsupported("{}: device {}: this build has no CUDA backend (build the cuda preset)", path,
                     opts.device.to_string());
#endif
}

bool is_llama_config(const HfConfig& c) {
  for (const std::string& a : c.architectures) {
    if (a == "LlamaForCausalLM" || a == "MistralForCausalLM" || a == "Qwen2ForCausalLM") {
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<ModelSample>> load_hf(const std::string& path, const LoadOptions& opts) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  if (is_dir && !fs::exists(fs::path(path) / "model.safetensors", ec) &&
      !fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) {
    return not_found(
        "{}: the directory holds no model.safetensors or model.safetensors.index.json "
        "(a model directory needs config.json and safetensors weights)",
        path);
  }
  fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const fs::path cfg = dir / "config.json";
  if (!fs::exists(cfg, ec)) {
    return not_found("{}: no config.json at '{}' (a Hugging Face model needs one)", path,
                     cfg.string());
  }
  RINFER_ASSIGN_OR_RETURN(HfConfig c, read_hf_config(cfg.string()));
  if (bert::is_bert_config(c.model_type)) {
    auto m = bert::BertModel::load(path, opts);
    if (!m.ok()) return m.status();
    return std::unique_ptr<ModelSample>(std::move(m).value());
  }
  if (is_llama_config(c)) {
    auto m = llama::LlamaModel::load_hf(path, opts);
    if (!m.ok()) return m.status();
    return place_on_device(std::move(m).value(), opts, path);
  }
  return unsupported(
      "{}: no model sample for model_type {} (architectures [{}]); supported: bert (BertModel), "
      "llama, mistral, qwen2 (*ForCausalLM)",
      cfg.string(), rinfer::quoted(c.model_type), fmt::join(c.architectures, ", "));
}

}  // namespace

Result<std::unique_ptr<ModelSample>> load_model(const std::string& path, const LoadOptions& opts) {
  // A Hugging Face checkpoint: a directory with config.json + safetensors, or a .safetensors
  // (or sharded .safetensors.index.json) file with config.json next to it.
  std::error_code ec;
  if (fs::is_directory(path, ec) || path.ends_with(".safetensors") ||
      path.ends_with(".safetensors.index.json")) {
    return load_hf(path, opts);
  }
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  auto gguf = std::make_shared<const GgufFile>(std::move(file).value());
  RINFER_ASSIGN_OR_RETURN(std::string_view arch, gguf->require_string("general.architecture"));
  if (llama::supports_architecture(arch)) {
    auto m = llama::LlamaModel::load(gguf, opts);
    if (!m.ok()) return m.status();
    return place_on_device(std::move(m).value(), opts, path);
  }
  return unsupported(
      "{}: no model sample for architecture {} yet (supported: llama, mistral, "
      "qwen2, gemma3)",
      path, rinfer::quoted(arch));
}

Result<std::unique_ptr<DecoderModel>> load_decoder_model(const std::string& path,
                                                         const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<ModelSample> m, load_model(path, opts));
  if (m->task() != ModelTask::kTextGeneration) {
    return unsupported("{}: a {} model cannot generate text (it is an encoder: use rinfer embed)",
                       path, model_task_name(m->task()));
  }
  return std::unique_ptr<DecoderModel>(static_cast<DecoderModel*>(m.release()));
}

}  // namespace rinfer
