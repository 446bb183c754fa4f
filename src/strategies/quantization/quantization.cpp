// strategies.quantization: the weight format the model is converted to at load (which layers
// stay in their stored precision: by default the first and the last), whether the token
// embedding / output projection convert too, and the CPU activation format.
// Hooks: LoadOptions::weight_format, keep_precision_layers, convert_embeddings,
// cpu.ops.quantize_activations, cpu.bf16_matmuls.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

// The host loader converts weights at load (LlamaModel::convert_weights) for every device.
constexpr bool kCpuConvertsWeights = true;

const std::vector<std::string_view> kWeightNames{"keep", "f16",  "bf16", "q8_0",
                                                 "q4_0", "q4_1", "fp8",  "int8"};
constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,   DType::kQ8_0,
                                  DType::kQ4_0, DType::kQ4_1, DType::kF8E4M3, DType::kI8};

constexpr int64_t kMaxLayer = 65535;

// Formats the model runs but no converter writes: named in their own message.
constexpr std::string_view kNoConverter[] = {"f32", "q4_k"};

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys({"weights", "keep_layers", "embeddings", "activations", "smoothing"}));
  QuantizationConfig& q = s.quantization;
  if (auto raw = m.get_string("weights"); raw.ok() && raw->has_value()) {
    for (std::string_view name : kNoConverter) {
      if (**raw != name) continue;
      return m.error("weights",
                     fmt::format("{}: there is no converter to this format at load (keep, f16, "
                                 "bf16, q8_0, q4_0, q4_1, fp8 and int8 are accepted; a file's own "
                                 "q4_k tensors run as they are with weights: keep)",
                                 name));
    }
  }
  RINFER_ASSIGN_OR_RETURN(auto weights, m.get_enum("weights", kWeightNames));
  if (weights) {
    q.weights = *weights == 0 ? std::nullopt : std::optional<DType>(kWeightTypes[*weights]);
  }
  // Negative layers count from the last (-1: the last); the model's layer count bounds them at
  // load.
  RINFER_ASSIGN_OR_RETURN(auto keep, m.get_int_list("keep_layers", -kMaxLayer, kMaxLayer));
  if (keep) {
    for (size_t i = 0; i < keep->size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if ((*keep)[i] == (*keep)[j]) {
          return m.error("keep_layers",
                         fmt::format("item {}: layer {} is listed twice", i, (*keep)[i]));
        }
      }
    }
    q.keep_layers = std::move(*keep);
  }
  RINFER_ASSIGN_OR_RETURN(auto embeddings, m.get_bool("embeddings"));
  if (embeddings) q.embeddings = *embeddings;
  RINFER_ASSIGN_OR_RETURN(auto act, m.get_enum("activations", {"int8", "float", "bf16"}));
  if (act) {
    constexpr ActivationFormat kFormats[] = {ActivationFormat::kInt8, ActivationFormat::kFloat,
                                             ActivationFormat::kBf16};
    q.activations = kFormats[*act];
  }
  RINFER_ASSIGN_OR_RETURN(auto smoothing, m.get_string("smoothing"));
  if (smoothing) {
    if (smoothing->empty()) return m.error("smoothing", "an empty path");
    const std::filesystem::path p(*smoothing);
    q.smoothing =
        p.is_absolute()
            ? p.string()
            : (std::filesystem::path(m.file()).parent_path() / p).lexically_normal().string();
  }
  for (const char* k : {"weights", "keep_layers", "embeddings", "activations", "smoothing"}) {
    note_origin(m, k, s);
  }
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  const QuantizationConfig& q = s.quantization;
  if (!q.weights) {
    if (q.keep_layers && !q.keep_layers->empty()) {
      return key_conflict(s.origins, "strategies.quantization.keep_layers",
                          "strategies.quantization.weights",
                          "lists layers to keep in their stored precision, but the weights are "
                          "not converted (weights: keep); set weights or remove keep_layers");
    }
    if (q.embeddings) {
      return key_conflict(s.origins, "strategies.quantization.embeddings",
                          "strategies.quantization.weights",
                          "true converts the embeddings along with the weights, but the weights "
                          "are not converted (weights: keep)");
    }
  }
  if (q.weights == DType::kF8E4M3 && !device.is_cuda()) {
    return key_conflict(s.origins, "strategies.quantization.weights", "device",
                        fmt::format("fp8 (E4M3 weights and activations on the tensor cores) runs "
                                    "on CUDA devices, not {}",
                                    device.to_string()));
  }
  if (q.weights == DType::kF8E4M3 && q.embeddings) {
    return key_conflict(s.origins, "strategies.quantization.embeddings",
                        "strategies.quantization.weights",
                        "true: the embedding table and the output projection have no FP8 kernels "
                        "(fp8 converts the layer matrices; they keep their stored format)");
  }
  if (q.weights == DType::kI8 && !device.is_cpu()) {
    return key_conflict(s.origins, "strategies.quantization.weights", "device",
                        fmt::format("int8 (W8A8: int8 weights with a scale per row, int8 "
                                    "activations per token) runs on the CPU; on {} use fp8",
                                    device.to_string()));
  }
  if (q.weights == DType::kI8 && q.embeddings) {
    return key_conflict(s.origins, "strategies.quantization.embeddings",
                        "strategies.quantization.weights",
                        "true: int8 converts the layer matrices only (the embedding table and "
                        "the output projection keep their stored format)");
  }
  if (q.weights == DType::kI8 && q.activations != ActivationFormat::kInt8) {
    return key_conflict(s.origins, "strategies.quantization.activations",
                        "strategies.quantization.weights",
                        fmt::format("{}: int8 weights run W8A8, with int8 activations",
                                    activation_format_name(q.activations)));
  }
  if (!q.smoothing.empty() && q.weights != DType::kI8) {
    return key_conflict(s.origins, "strategies.quantization.smoothing",
                        "strategies.quantization.weights",
                        fmt::format("smooths the int8 (W8A8) conversion; the weights are {}",
                                    weight_format_name(q.weights)));
  }
  if (q.weights && device.is_cpu() && !kCpuConvertsWeights) {
    return key_conflict(s.origins, "strategies.quantization.weights", "device",
                        fmt::format("{}: converting weights at load is not implemented on the "
                                    "CPU model (it runs the file's stored formats); use keep or "
                                    "device cuda:N",
                                    weight_format_name(q.weights)));
  }
  if (device.is_cuda() && s.origins.has("strategies.quantization.activations")) {
    return key_conflict(s.origins, "strategies.quantization.activations", "device",
                        fmt::format("is a CPU kernel setting (int8 activations with integer dot "
                                    "products); not applicable on {}",
                                    device.to_string()));
  }
  return ok_status();
}

std::string describe(const StrategyConfig& s, const Device& device) {
  const QuantizationConfig& q = s.quantization;
  std::string out;
  if (q.weights) {
    const std::vector<int64_t> keep = q.effective_keep_layers();
    out = fmt::format("weights {} (layers kept: {}{})", weight_format_name(q.weights),
                      keep.empty() ? std::string("none") : fmt::format("{}", fmt::join(keep, " ")),
                      q.embeddings ? ", embeddings converted" : "");
    if (!q.smoothing.empty()) {
      out +=
          fmt::format(", smoothed by {}", std::filesystem::path(q.smoothing).filename().string());
    }
  }
  if (device.is_cpu()) {
    if (!out.empty()) out += ", ";
    out += fmt::format("activations {}", activation_format_name(q.activations));
  }
  return out;
}

}  // namespace

std::vector<int64_t> QuantizationConfig::effective_keep_layers() const {
  if (!weights) return {};
  if (keep_layers) return *keep_layers;
  return {0, -1};
}

std::string_view activation_format_name(ActivationFormat a) {
  switch (a) {
    case ActivationFormat::kInt8: return "int8";
    case ActivationFormat::kFloat: return "float";
    case ActivationFormat::kBf16: return "bf16";
  }
  return "?";
}

std::string weight_format_name(const std::optional<DType>& weights) {
  if (!weights) return "keep";
  if (*weights == DType::kI8) return "int8";
  return std::string(dtype_name(*weights));
}

const StrategyInfo& quantization_strategy() {
  static const StrategyInfo info{
      "quantization",
      "weight format at load (some layers kept in higher precision) and CPU activation format",
      {{"weights", "keep|f16|bf16|q8_0|q4_0|q4_1|fp8|int8", "keep",
        "convert the block matrices at load; keep: the file's stored formats; fp8 (CUDA): "
        "E4M3 weights and activations; int8 (CPU): W8A8, int8 weights with a scale per row "
        "and int8 activations with a scale per token"},
       {"keep_layers", "list of int in [-65535, 65535]", "[0, -1] when weights converts",
        "blocks left in their stored format; negative from the last (-1: the last)"},
       {"embeddings", "bool", "false", "convert the token embedding / output projection too"},
       {"activations", "int8|float|bf16", "int8",
        "CPU fast kernels: int8 activations with integer dot products, f32, or (encoders on "
        "a CPU with AMX-BF16) bf16 matrices and activations on AMX tiles"},
       {"smoothing", "path", "none",
        "int8: a `rinfer calibrate` file; SmoothQuant moves the activations' outlier channels "
        "into the weights of q, k, v, gate and up (relative paths from the recipe's folder)"}},
      "{weights: keep, activations: float}",
      "LoadOptions::weight_format, keep_precision_layers, convert_embeddings, smoothing, "
      "cpu.ops.quantize_activations, cpu.bf16_matmuls",
      "weights: cpu, cuda; activations: cpu",
      "docs/strategies/quantization.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
