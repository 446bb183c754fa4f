// The image classification task interface (layer 3): a batch of preprocessed images -> class
// logits. The convolutional networks (models/convnet: MobileNetV2, EfficientNet-Lite, ResNet)
// are its samples. Like the encoder it is an immutable model that creates runners, each owning
// its scratch on one device.
//
// Pixels arrive normalized (the recipe's mean and std already applied) in NHWC order:
// [n, height, width, 3] f32, the layout every CPU vision op takes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/taps.h"
#include "ops/cpu/vision_ops.h"

namespace rinfer {

struct ImageBatch {
  std::span<const float> pixels;  // [n, height, width, 3]
  int64_t n = 0, height = 0, width = 0;
  // The pass's activations (models/taps.h), or null: off, at no cost. A network taps block_out
  // at layer i, the output of node i, for every node that the CPU's fused blocks also write
  // (convnet::tapped_nodes: not an expansion or depthwise output inside a fusable block), then
  // pooled (the global average pool) and logits (the head); a row is an image, NHWC (h * w * c
  // values), in f32 whatever the device computes in.
  TapSink* taps = nullptr;
};

struct ClassifierRunnerOptions {
  int64_t max_batch = 32;  // images per classify() call (sizes the scratch)
  int64_t height = 224, width = 224;
};

class ImageClassifierRunner {
 public:
  virtual ~ImageClassifierRunner() = default;
  virtual const ClassifierRunnerOptions& options() const = 0;
  // logits [n, n_classes].
  virtual Status classify(const ImageBatch& batch, float* logits) = 0;
  // Runs the network again, n images, on the inputs the last classify() left in the runner's
  // device memory, and waits for it: the network alone, without the transfers (benchmarks,
  // which compare it with a peer's network on device-resident inputs). Unsupported by runners
  // that keep no inputs (the CPU's reads the caller's pixels; its classify() is the network).
  virtual Status rerun(int64_t n);
};

class ImageClassifierModel : public ModelSample {
 public:
  ModelTask task() const override { return ModelTask::kClassification; }
  virtual int64_t n_classes() const = 0;
  // Multiply-adds x 2 of one image of height x width: what a throughput figure is measured
  // against.
  virtual double flops_per_image(int64_t height, int64_t width) const = 0;
  virtual Result<std::unique_ptr<ImageClassifierRunner>> create_runner(
      const ClassifierRunnerOptions& opts) const = 0;
};

// What every classifier runner checks of a batch: sizes within its options, the pixel count.
Status check_image_batch(const ImageBatch& b, const ClassifierRunnerOptions& opts);

// load_model (the registry's convnet family) for a PyTorch checkpoint (a state dict) as the
// network `spec` describes: the layers come from the tensor names and shapes, the rest from the
// spec. Errors when the file is another task's model.
Result<std::unique_ptr<ImageClassifierModel>> load_image_classifier(const std::string& path,
                                                                    const ConvNetSpec& spec,
                                                                    const LoadOptions& opts);

}  // namespace rinfer
