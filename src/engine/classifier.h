// The image classification engine of scenario `image-classification`: a convolutional network
// (models/image_classifier.h) loaded with the recipe's network description, one runner, and the
// recipe's preprocessing and labels.
//
//   image files -> decode (JPEG, PNG) -> resize the shorter side -> center crop -> normalize
//   (mean, std) -> batches of classifier.max_batch -> infer (the runner: logits) ->
//   postprocess (softmax, top-k with the class names).
// Calls are serialized on the one runner.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "image/image.h"
#include "models/image_classifier.h"
#include "recipe/recipe.h"
#include "rinfer/status.h"

namespace rinfer {

struct ClassLabel {
  int64_t id = 0;
  float probability = 0.0f;  // softmax over all the classes
  float logit = 0.0f;
};

struct ClassifyStats {
  int64_t images = 0;
  int64_t batches = 0;        // forward passes
  double decode_s = 0.0;      // reading and decoding the files
  double preprocess_s = 0.0;  // resize, crop, normalize
  double forward_s = 0.0;
};

class Classifier {
 public:
  // Validates the recipe (scenario image-classification, strategies, device), resolves and loads
  // the checkpoint with the recipe's network description, and reads the labels.
  static Result<std::unique_ptr<Classifier>> create(const RecipeConfig& recipe);

  // The network's input for one decoded image: [crop, crop, 3] normalized, NHWC.
  std::vector<float> preprocess(const Image& img) const;
  // logits [n, n_classes] of n preprocessed images (pixels: [n, crop, crop, 3]), in batches;
  // `taps` (may be null) gets every batch's activations (ImageBatch::taps: rinfer diff).
  Status logits(std::span<const float> pixels, int64_t n, float* out, ClassifyStats* st = nullptr,
                TapSink* taps = nullptr);
  // The network alone on the inputs of the last logits() call's last batch, n images, resident
  // on the device (ImageClassifierRunner::rerun; unsupported on the CPU).
  Status rerun(int64_t n);
  // Decodes, preprocesses and classifies image files, a batch of classifier.max_batch at a time
  // (memory for one batch of pixels); errors name the file.
  Result<std::vector<float>> classify_files(std::span<const std::string> paths,
                                            ClassifyStats* st = nullptr);
  // The k most probable classes of one logit row, most probable first.
  std::vector<ClassLabel> top_k(const float* logits, int64_t k) const;

  int64_t n_classes() const { return model_->n_classes(); }
  int64_t input_size() const { return recipe_.classifier.preprocess.crop; }
  // The class name, or "class N" without labels.
  std::string label(int64_t id) const;
  const RecipeConfig& recipe() const { return recipe_; }
  const std::string& model_path() const { return model_path_; }
  const ImageClassifierModel& model() const { return *model_; }
  std::string describe() const;

 private:
  Classifier() = default;

  RecipeConfig recipe_;
  std::string model_path_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ImageClassifierModel> model_;
  std::unique_ptr<ImageClassifierRunner> runner_;
  std::vector<std::string> labels_;
  std::mutex mu_;
};

// The recipe's network description as the model layer takes it.
ConvNetSpec conv_net_spec(const ClassifierNetworkConfig& c);

}  // namespace rinfer
