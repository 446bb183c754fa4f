// The bert family in the model registry: BERT encoders (sentence embeddings), from Hugging Face
// checkpoints whose config.json says model_type bert. The runner picks the device
// (EncoderModel::create_runner).
#include "models/bert/bert_model.h"
#include "models/registry.h"

namespace rinfer::bert {

ModelFamily family() {
  return ModelFamily{
      "bert", ModelTask::kEmbedding, "config.json model_type bert",
      [](const ModelMetadata& m) { return m.format == "safetensors" && is_bert_config(m.architecture); },
      [](const ModelSource& src, const LoadOptions& opts) -> Result<std::unique_ptr<ModelSample>> {
        RINFER_ASSIGN_OR_RETURN(std::unique_ptr<BertModel> m, BertModel::load(src.path, opts));
        return std::unique_ptr<ModelSample>(std::move(m));
      }};
}

}  // namespace rinfer::bert
