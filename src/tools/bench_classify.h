// `rinfer bench` for image-classification recipes: every variant of the folder classifies the
// same images (the bench photos, preprocessed once by each variant's own recipe, repeated to
// --images), warm-up runs then `repeat` measured runs of the network; the median images/s at the
// variant's batch (classifier.max_batch), the GFLOP/s it implies, and each variant's agreement
// with the baseline's logits (top-1 and the worst relative L2; a variant over 1e-4 fails). With
// --peer JSON (bench/classifier_peer.py: PyTorch on the same machine, just before), the peer's
// rows and each variant's ratio to the peer at the same batch.
#pragma once

#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace rinfer {

struct ClassifyBenchVariant {
  std::string name;
  std::string path;
  RecipeConfig recipe;
};

struct ClassifyBenchOptions {
  std::string folder;
  std::vector<std::string> images;  // empty: the photos in the model cache
  int64_t n_images = 64;            // images per measured run
  int repeat = 3;
  int warmup = 1;
  std::string json;  // empty: bench/results/<machine>/<folder>.json
  std::vector<std::string> peer_jsons;
  bool readme = false;
};

int run_classify_bench(const std::vector<ClassifyBenchVariant>& variants,
                       const ClassifyBenchOptions& o);

}  // namespace rinfer
