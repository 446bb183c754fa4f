// The image classification task: batch checks and the loader.
#include "models/image_classifier.h"

#include "core/error.h"

namespace rinfer {

std::string_view conv_padding_name(ConvPadding p) {
  return p == ConvPadding::kSame ? "same" : "symmetric";
}

Status check_image_batch(const ImageBatch& b, const ClassifierRunnerOptions& opts) {
  if (b.n < 1 || b.height < 1 || b.width < 1) {
    return invalid_argument("image batch: {} images of {}x{} (each must be >= 1)", b.n, b.height,
                            b.width);
  }
  if (b.n > opts.max_batch) {
    return invalid_argument("image batch: {} images, the runner takes at most {}", b.n,
                            opts.max_batch);
  }
  if (static_cast<int64_t>(b.pixels.size()) != b.n * b.height * b.width * 3) {
    return invalid_argument("image batch: {} values for {} images of {}x{}x3", b.pixels.size(), b.n,
                            b.height, b.width);
  }
  return Status();
}

Status ImageClassifierRunner::rerun(int64_t /*n*/) {
  return unsupported("this classifier runner keeps no inputs to run again");
}

Result<std::unique_ptr<ImageClassifierModel>> load_image_classifier(const std::string& path,
                                                                    const ConvNetSpec& spec,
                                                                    const LoadOptions& opts) {
  LoadOptions o = opts;
  o.network = spec;
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<ModelSample> m, load_model(path, o));
  if (m->task() != ModelTask::kClassification) {
    return unsupported("{}: a {} model is not an image classifier", path,
                       model_task_name(m->task()));
  }
  return std::unique_ptr<ImageClassifierModel>(static_cast<ImageClassifierModel*>(m.release()));
}

}  // namespace rinfer
