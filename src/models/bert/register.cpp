// The bert family in the model registry: BERT encoders (sentence embeddings), from Hugging Face
// checkpoints whose config.json says model_type bert, or random:<shape> of random_bert.h. The
// runner picks the device (EncoderModel::create_runner).
#include <algorithm>

#include "core/error.h"
#include "models/bert/bert_model.h"
#include "models/bert/random_bert.h"
#include "models/registry.h"

namespace rinfer::bert {

ModelFamily family() {
  return ModelFamily{
      "bert", ModelTask::kEmbedding, "config.json model_type bert; random:minilm-l6, bert-base",
      [](const ModelMetadata& m) {
        if (m.format == "random") {
          const std::vector<std::string> names = random_shape_names();
          return std::ranges::find(names, m.architecture) != names.end();
        }
        return m.format == "safetensors" && is_bert_config(m.architecture);
      },
      [](const ModelSource& src, const LoadOptions& opts) -> Result<std::unique_ptr<ModelSample>> {
        std::unique_ptr<BertModel> m;
        if (src.meta.format == "random") {
          // f32 weights as drawn; the quantization strategy converts them like a file's.
          if (src.path.find(':', 7) != std::string::npos && src.random_dtype != DType::kF32) {
            return invalid_argument(
                "{}: a random encoder is drawn in f32 (random:<shape> or random:<shape>:f32; "
                "strategies.quantization.weights converts it)",
                src.path);
          }
          RINFER_ASSIGN_OR_RETURN(m, BertModel::load_random(src.meta.architecture, src.path, opts));
        } else {
          RINFER_ASSIGN_OR_RETURN(m, BertModel::load(src.path, opts));
        }
        return std::unique_ptr<ModelSample>(std::move(m));
      }};
}

}  // namespace rinfer::bert
