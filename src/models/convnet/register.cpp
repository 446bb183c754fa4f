// The convnet family in the model registry: convolutional image classifiers (MobileNetV2,
// EfficientNet-Lite, ResNet) from PyTorch state dicts. A state dict names tensors, not a
// network: the recipe's classifier.network (LoadOptions::network) gives the rest, and the graph
// is built from the tensor names and shapes (convnet_graph.h).
#include "core/error.h"
#include "models/convnet/convnet_model.h"
#include "models/registry.h"

namespace rinfer::convnet {

ModelFamily family() {
  return ModelFamily{
      "convnet", ModelTask::kClassification,
      "PyTorch state dicts of inverted-residual (MobileNetV2, EfficientNet-Lite) and ResNet "
      "networks, with the recipe's classifier.network",
      [](const ModelMetadata& m) { return m.format == "pytorch"; },
      [](const ModelSource& src, const LoadOptions& opts) -> Result<std::unique_ptr<ModelSample>> {
        if (!opts.network) {
          return invalid_argument(
              "{}: a PyTorch checkpoint is an image classifier's state dict here, and its "
              "network (blocks' strides, activation, padding) comes from an "
              "image-classification recipe's classifier.network: run it with rinfer classify",
              src.path);
        }
        RINFER_ASSIGN_OR_RETURN(std::unique_ptr<ConvNetModel> m,
                                ConvNetModel::load(src.path, *opts.network, opts));
        return std::unique_ptr<ModelSample>(std::move(m));
      }};
}

}  // namespace rinfer::convnet
