// The Llama-family forward pass (see llama_model.h for the math).
#include "models/llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"

namespace rinfer::llama {

namespace {

// Hands rows [n_rows, width] to the sink when it wants this kind.
void tap(TapSink* taps, TapKind kind, int64_t layer, const float* rows, int64_t n_rows,
         int64_t width) {
  if (taps != nullptr && taps->wants(kind)) {
    taps->record(kind, static_cast<int32_t>(layer), rows, n_rows, width);
  }
}

// x[r, :] += b for n rows of width n.
void add_bias(const cpu::OpContext& ctx, float* x, const Tensor& bias, int64_t n_rows, int64_t n) {
  if (!bias.defined()) return;
  const float* b = bias.data_as<float>();
  for (int64_t r = 0; r < n_rows; ++r) cpu::add(ctx, x + r * n, b, n, x + r * n);
}

// The row scales of an int8 matrix (weights: int8), nullptr for the other formats.
const Tensor* row_scale(const Tensor& s) { return s.defined() ? &s : nullptr; }

}  // namespace

float LlamaModel::attention_scale() const {
  return hp_.attn_scale > 0 ? hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
}

Status LlamaModel::run_layers(const cpu::OpContext& ctx, ForwardScratch& s,
                              std::span<const int32_t> tokens, std::span<const float> embeddings,
                              std::span<const int32_t> positions, KvAccess& kv, int64_t pos0,
                              const std::atomic<bool>* cancel, TapSink* taps,
                              OpTimer* timer) const {
  const auto nt = static_cast<int64_t>(tokens.size());
  const int64_t e = hp_.n_embd, hd = hp_.head_dim, kv_dim = hp_.kv_dim();
  const int64_t q_dim = hp_.n_head * hd, n_ff = hp_.n_ff;
  if (nt > s.rows) {
    return internal_error("forward: {} tokens for scratch of {} rows", nt, s.rows);
  }

  float* x = s.x.mutable_data_as<float>();        // [nt, n_embd]
  float* h = s.h.mutable_data_as<float>();        // [nt, n_embd]
  float* q = s.q.mutable_data_as<float>();        // [nt, n_head, head_dim]
  float* attn = s.attn.mutable_data_as<float>();  // [nt, n_head, head_dim]
  float* gate = s.gate.mutable_data_as<float>();  // [nt, n_ff]
  float* up = s.up.mutable_data_as<float>();      // [nt, n_ff]

  // What each op moves and computes (f32 activations; a weight's own bytes).
  const auto mm = [nt](const Tensor& w) {
    return matmul_cost(nt, w.dim(-1), w.dim(0), static_cast<double>(w.nbytes()), 4, 4);
  };
  const auto mm_sum = [&](std::initializer_list<const Tensor*> ws) {
    OpCost c;
    for (const Tensor* w : ws) {
      const OpCost p = mm(*w);
      c.bytes += p.bytes;
      c.flops += p.flops;
    }
    return c;
  };
  const OpCost row_norm = stream_cost(nt * e, nt * e, 4, 4);
  const OpCost row_add = stream_cost(2 * nt * e, nt * e, 4, 0.5);
  if (embeddings.empty()) {
    OpScope op(timer, "embed", -1, stream_cost(nt * e, nt * e, 4, 0));
    RINFER_RETURN_IF_ERROR(cpu::get_rows(tok_embd_, tokens, x));
    if (hp_.embd_scale != 1.0f) {
      for (int64_t i = 0; i < nt * e; ++i) x[i] *= hp_.embd_scale;
    }
  } else {
    std::memcpy(x, embeddings.data(), static_cast<size_t>(nt * e) * sizeof(float));
  }
  if (observer_) observer_(-1, pos0, x, nt, e);
  tap(taps, TapKind::kEmbed, -1, x, nt, e);

  cpu::RopeParams rope = hp_.rope;
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      return cancelled_error("cancelled before layer {} of {} (position {})", il, hp_.n_layer,
                             pos0);
    }
    const LayerWeights& l = layers_[static_cast<size_t>(il)];
    float* k_new = nullptr;  // [nt, n_head_kv, head_dim]
    float* v_new = nullptr;
    kv.new_kv(il, &k_new, &v_new);

    {
      OpScope op(timer, "norm", il, row_norm);
      cpu::rms_norm(ctx, x, l.attn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    }
    tap(taps, TapKind::kAttnNorm, il, h, nt, e);
    std::optional<OpScope> qkv_op(std::in_place, timer, "qkv", il, mm_sum({&l.wq, &l.wk, &l.wv}));
    if (opts_.fusion.qkv) {
      // One pass: h quantized once, the rows of all three matrices split over the pool together.
      const Tensor* ws[] = {&l.wq, &l.wk, &l.wv};
      const Tensor* ss[] = {row_scale(l.scales.wq), row_scale(l.scales.wk), row_scale(l.scales.wv)};
      float* ys[] = {q, k_new, v_new};
      RINFER_RETURN_IF_ERROR(cpu::matmul_multi(ctx, ws, h, nt, ys, ss));
    } else {
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wq, h, nt, q, row_scale(l.scales.wq)));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wk, h, nt, k_new, row_scale(l.scales.wk)));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wv, h, nt, v_new, row_scale(l.scales.wv)));
    }
    add_bias(ctx, q, l.bq, nt, q_dim);
    add_bias(ctx, k_new, l.bk, nt, kv_dim);
    add_bias(ctx, v_new, l.bv, nt, kv_dim);
    qkv_op.reset();
    if (hp_.qk_norm) {  // per head: [nt * n_head, head_dim]
      OpScope op(timer, "qk_norm", il,
                 stream_cost(nt * (q_dim + kv_dim), nt * (q_dim + kv_dim), 4, 4));
      cpu::rms_norm(ctx, q, l.q_norm.data_as<float>(), nt * hp_.n_head, hd, hp_.norm_eps, q);
      cpu::rms_norm(ctx, k_new, l.k_norm.data_as<float>(), nt * hp_.n_head_kv, hd, hp_.norm_eps,
                    k_new);
    }
    if (!hp_.layer_attn.empty()) {
      const DecoderHParams::LayerAttn& la = hp_.layer_attn[static_cast<size_t>(il)];
      rope.freq_base = la.rope_base;
      rope.freq_scale = la.rope_scale;
    }
    {
      OpScope op(timer, "rope", il,
                 stream_cost(nt * (q_dim + kv_dim), nt * (q_dim + kv_dim), 4, 6));
      cpu::rope(ctx, q, nt, hp_.n_head, hd, positions, rope);
      cpu::rope(ctx, k_new, nt, hp_.n_head_kv, hd, positions, rope);
    }
    {
      OpScope op(timer, "attention", il, kv.attend_cost(il));
      RINFER_RETURN_IF_ERROR(kv.attend(il, q, attn));
    }
    tap(taps, TapKind::kAttnCtx, il, attn, nt, q_dim);
    {
      OpScope op(timer, "wo", il, mm(l.wo));
      RINFER_RETURN_IF_ERROR(
          cpu::matmul(ctx, l.wo, attn, nt, h, row_scale(l.scales.wo)));  // h: [nt, n_embd]
    }
    if (hp_.post_norms) {
      OpScope op(timer, "post_norm", il, row_norm);
      cpu::rms_norm(ctx, h, l.post_attn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    }
    tap(taps, TapKind::kAttnOut, il, h, nt, e);
    {
      OpScope op(timer, "add", il, row_add);
      cpu::add(ctx, x, h, nt * e, x);
    }
    {
      OpScope op(timer, "norm", il, row_norm);
      cpu::rms_norm(ctx, x, l.ffn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    }
    tap(taps, TapKind::kMlpNorm, il, h, nt, e);
    std::optional<OpScope> gu_op(std::in_place, timer, "gate_up", il, mm_sum({&l.w_gate, &l.w_up}));
    if (opts_.fusion.swiglu) {
      const Tensor* ws[] = {&l.w_gate, &l.w_up};
      const Tensor* ss[] = {row_scale(l.scales.w_gate), row_scale(l.scales.w_up)};
      float* ys[] = {gate, up};
      RINFER_RETURN_IF_ERROR(cpu::matmul_multi(ctx, ws, h, nt, ys, ss));
    } else {
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w_gate, h, nt, gate, row_scale(l.scales.w_gate)));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w_up, h, nt, up, row_scale(l.scales.w_up)));
    }
    gu_op.reset();
    {
      OpScope op(timer, "act", il, stream_cost(2 * nt * n_ff, nt * n_ff, 4, 4));
      if (hp_.gelu_ffn) {
        cpu::geglu_tanh(ctx, gate, up, nt * n_ff, gate);
      } else {
        cpu::swiglu(ctx, gate, up, nt * n_ff, gate);
      }
    }
    tap(taps, TapKind::kMlpAct, il, gate, nt, n_ff);
    {
      OpScope op(timer, "down", il, mm(l.w_down));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w_down, gate, nt, h, row_scale(l.scales.w_down)));
    }
    if (hp_.post_norms) {
      OpScope op(timer, "post_norm", il, row_norm);
      cpu::rms_norm(ctx, h, l.post_ffn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    }
    tap(taps, TapKind::kMlpOut, il, h, nt, e);
    {
      OpScope op(timer, "add", il, row_add);
      cpu::add(ctx, x, h, nt * e, x);
    }
    if (observer_) observer_(il, pos0, x, nt, e);
    tap(taps, TapKind::kBlockOut, il, x, nt, e);
  }
  return ok_status();
}

Status LlamaModel::compute_logits(const cpu::OpContext& ctx, ForwardScratch& s,
                                  std::span<const int32_t> rows, float* logits, TapSink* taps,
                                  OpTimer* timer) const {
  const int64_t e = hp_.n_embd;
  float* x = s.x.mutable_data_as<float>();
  float* h = s.h.mutable_data_as<float>();
  // Only the requested rows go through the output norm and the (large) output projection.
  const auto n_out = static_cast<int64_t>(rows.size());
  OpCost cost = matmul_cost(n_out, e, hp_.n_vocab, static_cast<double>(output_.nbytes()), 4, 4);
  cost.bytes += 2.0 * static_cast<double>(n_out * e) * 4;  // the norm
  OpScope op(timer, "logits", hp_.n_layer, cost);
  for (int64_t r = 0; r < n_out; ++r) {
    const int64_t src = rows[static_cast<size_t>(r)];
    if (src != r) std::memcpy(x + r * e, x + src * e, static_cast<size_t>(e) * sizeof(float));
  }
  cpu::rms_norm(ctx, x, output_norm_.data_as<float>(), n_out, e, hp_.norm_eps, h);
  RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, output_, h, n_out, logits));  // [n_out, n_vocab]
  tap(taps, TapKind::kLogits, hp_.n_layer, logits, n_out, hp_.n_vocab);
  return ok_status();
}

}  // namespace rinfer::llama
