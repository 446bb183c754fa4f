// strategies.fusion: one kernel per fused group of ops instead of separate kernels with
// intermediate tensors in memory. Per op: attention, residual_norm, swiglu, qkv (the decoders) and
// batchnorm, conv_epilogue (the image classifiers). The decoders' four apply to the CUDA model; on
// the CPU only qkv and swiglu (the projections that share one quantized input) switch, its
// attention and residual+norm kernels are fixed. Hook: LoadOptions::fusion.
#include <fmt/format.h>

#include <array>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

struct Op {
  const char* key;
  bool FusionOptions::*field;
};
constexpr std::array<Op, 7> kOps{{{"attention", &FusionOptions::attention},
                                  {"residual_norm", &FusionOptions::residual_norm},
                                  {"swiglu", &FusionOptions::swiglu},
                                  {"qkv", &FusionOptions::qkv},
                                  {"batchnorm", &FusionOptions::batchnorm},
                                  {"conv_epilogue", &FusionOptions::conv_epilogue},
                                  {"blocks", &FusionOptions::blocks}}};

// The image classifiers' knobs: switchable on every device, described only where written.
bool is_conv_op(std::string_view key) {
  return key == "batchnorm" || key == "conv_epilogue" || key == "blocks";
}

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys(
      {"attention", "residual_norm", "swiglu", "qkv", "batchnorm", "conv_epilogue", "blocks"}));
  for (const Op& op : kOps) {
    RINFER_ASSIGN_OR_RETURN(auto v, m.get_bool(op.key));
    if (v) s.fusion.*op.field = *v;
    note_origin(m, op.key, s);
  }
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  for (const Op& op : kOps) {
    const std::string key = std::string("strategies.fusion.") + op.key;
    const bool cpu_switchable = std::string_view(op.key) == "qkv" ||
                                std::string_view(op.key) == "swiglu" || is_conv_op(op.key);
    if (device.is_cpu() && s.origins.has(key) && !cpu_switchable) {
      return key_conflict(s.origins, key, "device",
                          "on the CPU only qkv and swiglu (the projections that share one "
                          "quantized input) are switchable; its attention and residual+norm "
                          "kernels are fixed (remove the key, or use device cuda:N)");
    }
  }
  if (device.is_cuda() && !s.fusion.attention) {
    return key_conflict(
        s.origins, "strategies.fusion.attention", "device",
        fmt::format("false (scores, softmax and the weighted sum as separate kernels) is not "
                    "implemented on {}: its attention is always the fused kernel",
                    device.to_string()));
  }
  return ok_status();
}

std::string describe(const StrategyConfig& s, const Device& device) {
  std::string on;
  std::string off;
  for (const Op& op : kOps) {
    // The CPU switches only the shared-input projections; the rest is fixed there.
    const std::string_view key = op.key;
    if (is_conv_op(key) && !s.origins.has(std::string("strategies.fusion.") + op.key)) continue;
    if (device.is_cpu() && key != "qkv" && key != "swiglu" && !is_conv_op(key)) continue;
    std::string& list = s.fusion.*op.field ? on : off;
    if (!list.empty()) list += "+";
    list += op.key;
  }
  if (off.empty()) return "fusion " + on;
  if (on.empty()) return "fusion off";
  return fmt::format("fusion {} (unfused {})", on, off);
}

}  // namespace

const StrategyInfo& fusion_strategy() {
  static const StrategyInfo info{
      "fusion",
      "fused kernels per op group instead of separate kernels with tensors in memory between",
      {{"attention", "bool", "true", "one flash-attention kernel (CUDA: always on)"},
       {"residual_norm", "bool", "true",
        "residual add + RMSNorm in one kernel (CUDA decode: inside the matvecs around it)"},
       {"swiglu", "bool", "true", "gate/up activation in one pass"},
       {"qkv", "bool", "true", "Q, K, V (and gate, up) projections from one read of the input"},
       {"batchnorm", "bool", "true",
        "image classifiers: batch norms folded into the convolutions at load"},
       {"conv_epilogue", "bool", "true",
        "image classifiers: bias, residual and activation inside the convolution"},
       {"blocks", "bool", "true",
        "image classifiers: inverted-residual blocks band by band (needs batchnorm, "
        "conv_epilogue)"}},
      "{residual_norm: false, swiglu: false, qkv: false, batchnorm: false, conv_epilogue: false, "
      "blocks: false}",
      "LoadOptions::fusion",
      "attention, residual_norm: cuda; qkv, swiglu, batchnorm, conv_epilogue, blocks: cpu, cuda",
      "docs/strategies/fusion.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
