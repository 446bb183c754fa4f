// Finds model files by reference name ("smollm2-135m-instruct-q4_1") in the model cache that
// scripts/fetch-models.sh fills, or takes a path as is.
#pragma once

#include <string>

#include "rinfer/status.h"

namespace rinfer {

// $RINFER_MODEL_DIR, else $XDG_CACHE_HOME/recipes-infer/models, else
// ~/.cache/recipes-infer/models.
std::string model_cache_dir();

// A path that exists (file or directory) is returned as is. Otherwise a bare name is looked up
// in the cache as `<cache>/<name>.gguf`, then `<cache>/<name>.pth` (PyTorch checkpoints), then
// `<cache>/<name>/` (safetensors models).
Result<std::string> resolve_model(const std::string& name_or_path);
// A recipe's `model:` (relative paths already made relative to the recipe): a bare name (no
// '/', no model file extension) that the cache holds is the cache's model even when the working
// directory has a file or folder of that name; anything else as resolve_model.
Result<std::string> resolve_recipe_model(const std::string& ref);
// The same for another file kind: a path that exists, else `<cache>/<name><ext>` (ext ".json":
// class names).
Result<std::string> resolve_cache_file(const std::string& name_or_path, const std::string& ext);

}  // namespace rinfer
