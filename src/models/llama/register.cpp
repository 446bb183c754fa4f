// The llama family in the model registry: decoder-only LLMs (text generation).
//   GGUF          general.architecture llama, mistral, qwen2, gemma3
//   safetensors   config.json architectures LlamaForCausalLM, MistralForCausalLM,
//                 Qwen2ForCausalLM
//   random        random:<shape>[:<dtype>] with a shape of models/llama/shapes.h
// A host model stays on the CPU or moves its weights to the load's CUDA device.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "models/llama/llama_model.h"
#include "models/llama/random_weights.h"
#include "models/llama/shapes.h"
#include "models/registry.h"
#if RINFER_WITH_CUDA
#include "models/llama/cuda/llama_cuda_model.h"
#endif

namespace rinfer::llama {

namespace {

constexpr const char* kHfClasses[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                      "Qwen2ForCausalLM"};

bool matches(const ModelMetadata& m) {
  if (m.format == "gguf") return supports_architecture(m.architecture);
  if (m.format == "safetensors") {
    return std::ranges::any_of(m.classes, [](const std::string& c) {
      return std::ranges::find(kHfClasses, c) != std::end(kHfClasses);
    });
  }
  if (m.format == "random") {
    const std::vector<std::string> names = shape_names();
    return std::ranges::find(names, m.architecture) != names.end();
  }
  return false;
}

Result<std::unique_ptr<ModelSample>> place_on_device(std::unique_ptr<LlamaModel> m,
                                                     const LoadOptions& opts,
                                                     const std::string& path) {
  if (opts.device.is_cpu()) {
    if (opts.kv_dtype && *opts.kv_dtype != DType::kF32 && *opts.kv_dtype != DType::kI8) {
      return unsupported("{}: the CPU keeps its KV cache in f32 or int8, not {}", path,
                         dtype_name(*opts.kv_dtype));
    }
    return std::unique_ptr<ModelSample>(std::move(m));
  }
#if RINFER_WITH_CUDA
  auto g = make_cuda_model(std::move(m), opts);
  if (!g.ok()) return g.status().with_context(path + " on " + opts.device.to_string());
  return std::unique_ptr<ModelSample>(std::move(g).value());
#else
  return unsupported("{}: device {}: this build has no CUDA backend (build the cuda preset)", path,
                     opts.device.to_string());
#endif
}

// The seed of every random-weight model: the same shape and type give the same weights.
constexpr uint64_t kRandomSeed = 1234;

Result<std::unique_ptr<ModelSample>> load_random(const ModelSource& src, const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(const DecoderHParams hp, named_shape(src.meta.architecture));
  if (opts.device.is_cuda()) {
#if RINFER_WITH_CUDA
    auto m = make_random_cuda_model(hp, src.random_dtype, kRandomSeed, opts);
    if (!m.ok()) return m.status().with_context(src.path + " on " + opts.device.to_string());
    return std::unique_ptr<ModelSample>(std::move(m).value());
#else
    return unsupported("{}: device {}: this build has no CUDA backend (build the cuda preset)",
                       src.path, opts.device.to_string());
#endif
  }
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m,
                          make_random_host_model(hp, src.random_dtype, kRandomSeed, opts));
  return place_on_device(std::move(m), opts, src.path);
}

Result<std::unique_ptr<ModelSample>> load(const ModelSource& src, const LoadOptions& opts) {
  if (src.meta.format == "random") return load_random(src, opts);
  if (src.meta.format == "safetensors") {
    RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, LlamaModel::load_hf(src.path, opts));
    return place_on_device(std::move(m), opts, src.path);
  }
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, LlamaModel::load(src.gguf, opts));
  return place_on_device(std::move(m), opts, src.path);
}

}  // namespace

ModelFamily family() {
  static const std::string text = fmt::format(
      "GGUF llama, mistral, qwen2, gemma3; config.json LlamaForCausalLM, MistralForCausalLM, "
      "Qwen2ForCausalLM; random:<shape>[:<dtype>] with shape {}",
      fmt::join(shape_names(), ", "));
  return ModelFamily{"llama", ModelTask::kTextGeneration, text, matches, load};
}

}  // namespace rinfer::llama
