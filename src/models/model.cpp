#include "models/model.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "formats/gguf.h"
#include "models/llama/llama_model.h"

namespace rinfer {

std::string_view model_task_name(ModelTask task) {
  switch (task) {
    case ModelTask::kTextGeneration: return "text generation";
    case ModelTask::kEmbedding: return "embedding";
    case ModelTask::kClassification: return "classification";
  }
  return "unknown";
}

Result<KvCache> DecoderModel::create_cache(int64_t n_ctx) const {
  const DecoderHParams& hp = hparams();
  return KvCache::create(hp.n_layer, n_ctx, hp.kv_dim());
}

Result<std::unique_ptr<ModelSample>> load_model(const std::string& path, const LoadOptions& opts) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return unsupported("{}: safetensors models cannot be run yet (GGUF only)", path);
  }
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  auto gguf = std::make_shared<const GgufFile>(std::move(file).value());
  RINFER_ASSIGN_OR_RETURN(std::string_view arch, gguf->require_string("general.architecture"));
  if (llama::supports_architecture(arch)) {
    auto m = llama::LlamaModel::load(gguf, opts);
    if (!m.ok()) return m.status();
    return std::unique_ptr<ModelSample>(std::move(m).value());
  }
  return unsupported(
      "{}: no model sample for architecture '{}' yet (supported: llama, mistral, "
      "qwen2, gemma3)",
      path, arch);
}

Result<std::unique_ptr<DecoderModel>> load_decoder_model(const std::string& path,
                                                         const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<ModelSample> m, load_model(path, opts));
  if (m->task() != ModelTask::kTextGeneration) {
    return unsupported("{}: a {} model cannot generate text", path, model_task_name(m->task()));
  }
  return std::unique_ptr<DecoderModel>(static_cast<DecoderModel*>(m.release()));
}

}  // namespace rinfer
