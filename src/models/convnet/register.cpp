// The convnet family in the model registry: convolutional image classifiers (MobileNetV2,
// EfficientNet-Lite, ResNet) from PyTorch state dicts. A state dict names tensors, not a
// network: the recipe's classifier.network (LoadOptions::network) gives the rest, and the graph
// is built from the tensor names and shapes (convnet_graph.h). `random:resnet-50` is the same
// network with random weights made in memory (random_state_dict.h).
#include <algorithm>

#include "core/error.h"
#include "models/convnet/convnet_model.h"
#include "models/convnet/random_state_dict.h"
#include "models/registry.h"

namespace rinfer::convnet {

ModelFamily family() {
  return ModelFamily{
      "convnet", ModelTask::kClassification,
      "PyTorch state dicts of inverted-residual (MobileNetV2, EfficientNet-Lite) and ResNet "
      "networks, with the recipe's classifier.network; random:resnet-50",
      [](const ModelMetadata& m) {
        if (m.format == "random") {
          const std::vector<std::string> names = random_shape_names();
          return std::ranges::find(names, m.architecture) != names.end();
        }
        return m.format == "pytorch";
      },
      [](const ModelSource& src, const LoadOptions& opts) -> Result<std::unique_ptr<ModelSample>> {
        if (!opts.network) {
          return invalid_argument(
              "{}: a PyTorch checkpoint is an image classifier's state dict here, and its "
              "network (blocks' strides, activation, padding) comes from an "
              "image-classification recipe's classifier.network: run it with rinfer classify",
              src.path);
        }
        std::unique_ptr<ConvNetModel> m;
        if (src.meta.format == "random") {
          // f32 weights only: a dtype after the shape must say so.
          if (src.path.find(':', 7) != std::string::npos && src.random_dtype != DType::kF32) {
            return invalid_argument("{}: a random convolutional network has f32 weights ({})",
                                    src.path, "random:<shape> or random:<shape>:f32");
          }
          RINFER_ASSIGN_OR_RETURN(TorchCheckpoint ckpt,
                                  random_state_dict(src.meta.architecture, src.path));
          RINFER_ASSIGN_OR_RETURN(m, ConvNetModel::from_checkpoint(ckpt, *opts.network, opts));
        } else {
          RINFER_ASSIGN_OR_RETURN(m, ConvNetModel::load(src.path, *opts.network, opts));
        }
        return std::unique_ptr<ModelSample>(std::move(m));
      }};
}

}  // namespace rinfer::convnet
