// The model registry (layer 3): a table of model families. Each family registers itself in
// models/<family>/register.cpp with what it matches in a model source's metadata and a factory
// for its task interface (DecoderModel, EncoderModel, ImageClassifierModel); load_model reads a
// source's metadata once, finds the family that claims it and calls its factory. Nothing above
// this layer branches on an architecture name: the CLI, the engines and the server ask the
// table (load_model, check_task).
//
// A model source is a path (a GGUF file; a Hugging Face checkpoint: a directory with
// config.json and safetensors, or a .safetensors / .safetensors.index.json file beside one; a
// PyTorch checkpoint) or `random:<shape>[:<dtype>]`: random weights of a named shape (the llama
// family's shapes: models/llama/shapes.h), made on the load's device.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "models/model.h"
#include "rinfer/status.h"

namespace rinfer {

class GgufFile;
struct HfConfig;
struct ModelInfo;

// What a model source says it is, read before any weight.
struct ModelMetadata {
  // "gguf" | "safetensors" (a Hugging Face checkpoint) | "pytorch" | "random"
  std::string format;
  // GGUF general.architecture; config.json model_type; random: the shape's name.
  std::string architecture;
  // config.json architectures (LlamaForCausalLM, ...); empty for the other formats.
  std::vector<std::string> classes;
};

// A model source opened far enough to read its metadata.
struct ModelSource {
  std::string path;  // as given (random: the whole "random:<shape>:<dtype>")
  ModelMetadata meta;
  std::shared_ptr<const GgufFile> gguf;  // format gguf: the parsed file (weights mapped)
  std::shared_ptr<const HfConfig> hf;    // format safetensors: config.json
  DType random_dtype = DType::kBF16;     // format random: the weights' type
};

struct ModelFamily {
  std::string_view name;  // "llama", "bert", "convnet"
  ModelTask task;
  // What it matches, for the error that lists the table: "GGUF llama, mistral, ...".
  std::string_view matches_text;
  std::function<bool(const ModelMetadata&)> matches;
  std::function<Result<std::unique_ptr<ModelSample>>(const ModelSource&, const LoadOptions&)>
      load;
};

// Every family, in the order they are tried (models/families.cpp lists them).
std::span<const ModelFamily> model_families();

// The family that claims `meta`, or null.
const ModelFamily* find_family(const ModelMetadata& meta);

// Whether `path` names a random-weight source (random:...).
bool is_random_source(std::string_view path);

// Opens `path` as far as its metadata (see above); errors name the path.
Result<ModelSource> open_model_source(const std::string& path);

// The metadata a ModelInfo (formats/model_info.h) gives the table.
ModelMetadata metadata_of(const ModelInfo& info);

// Whether a family claims `meta` for `task`: ok, or an error that says why not (no family for
// it, listing the table; a family of another task).
Status check_task(const ModelMetadata& meta, ModelTask task);

// The families' registrations (models/<family>/register.cpp).
namespace llama {
ModelFamily family();
}  // namespace llama
namespace bert {
ModelFamily family();
}  // namespace bert
namespace convnet {
ModelFamily family();
}  // namespace convnet

}  // namespace rinfer
