// The registry's table: every model family, in the order load_model tries them. A new family
// adds its models/<family>/register.cpp and one line here (docs/design.md, "How to add a model
// family").
#include "models/registry.h"

namespace rinfer {

std::span<const ModelFamily> model_families() {
  static const ModelFamily kFamilies[] = {
      llama::family(),    // decoder LLMs: GGUF and Hugging Face checkpoints, random: shapes
      bert::family(),     // BERT encoders (Hugging Face checkpoints)
      convnet::family(),  // image classifiers (PyTorch state dicts + the recipe's network)
  };
  return kFamilies;
}

}  // namespace rinfer
