// Taps: named activations of a forward pass, handed to a caller that asks for them (rinfer diff
// compares two recipes layer by layer through them). The names are the same on every backend:
//
//   embed      the token embeddings entering layer 0 (after Gemma's scale)   layer -1
//   attn_norm  the attention block's normed input                            layer il
//   attn_out   the attention block's output (after Wo, and Gemma's post-norm), before the residual
//   mlp_norm   the MLP block's normed input
//   mlp_out    the MLP block's output (after Wdown, and Gemma's post-norm), before the residual
//   block_out  the residual stream after layer il
//   pooled     an encoder's pooled (and normalized) vector per sequence      layer n_layer
//   logits     the output rows (the pass's logit rows)                       layer n_layer
//   mlp_act    the MLP's activation, the input of Wdown (silu(gate) * up): the CPU llama models
//              only, for rinfer calibrate; rinfer diff does not ask for it
//   attn_ctx   the attention's output before Wo (its input: [rows, n_head * head_dim]): the
//              CPU llama models only, for rinfer calibrate; rinfer diff does not ask for it
//
// An encoder (BERT, post-norm) taps embed (after the embeddings' LayerNorm), attn_out (after Wo
// and its bias), mlp_norm (the LayerNorm of the residual sum after attention: the MLP's input),
// mlp_out (after W2 and its bias), block_out (after the second LayerNorm) and pooled; its rows
// are the batch's rows, padding included.
//
// A runner asked for taps (ForwardBatch::taps) hands each kind the sink wants to record(), in
// the order computed, as f32 host rows: row r is the pass's token r (logits: its logit row r). A
// sink only reads; taps are off (null) by default and then cost nothing. A runner that cannot
// tap says so (kUnsupported) rather than running without them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace rinfer {

enum class TapKind : uint8_t {
  kEmbed,
  kAttnNorm,
  kAttnOut,
  kMlpNorm,
  kMlpOut,
  kBlockOut,
  kPooled,
  kLogits,
  kMlpAct,
  kAttnCtx
};
inline constexpr int kTapKindCount = 10;

// "embed", "attn_norm", ... (above).
std::string_view tap_name(TapKind kind);
// The kind of a name above, or nullopt.
std::optional<TapKind> tap_kind_of(std::string_view name);

class TapSink {
 public:
  virtual ~TapSink() = default;
  // Whether to hand out this kind (the runner skips the copy otherwise).
  virtual bool wants(TapKind kind) const = 0;
  // rows [n_rows, width], valid during the call only.
  virtual void record(TapKind kind, int32_t layer, const float* rows, int64_t n_rows,
                      int64_t width) = 0;
};

}  // namespace rinfer
