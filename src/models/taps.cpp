#include "models/taps.h"

#include <array>

namespace rinfer {

namespace {
constexpr std::array<std::string_view, kTapKindCount> kNames = {
    "embed",     "attn_norm", "attn_out", "mlp_norm", "mlp_out",
    "block_out", "pooled",    "logits",   "mlp_act",  "attn_ctx"};
}  // namespace

std::string_view tap_name(TapKind kind) { return kNames[static_cast<size_t>(kind)]; }

std::optional<TapKind> tap_kind_of(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<TapKind>(i);
  }
  return std::nullopt;
}

}  // namespace rinfer
