// The CUDA runner's multi-row pass, kernel by kernel (LlamaCudaRunner::encode, see
// llama_cuda_runner.h): every row of the batch through each layer, taps and per-op profiling
// included.
#include "models/llama/cuda/llama_cuda_runner.h"

namespace rinfer::llama {

// Queues a staged pass's kernels (eagerly, or into a graph being captured: b.cancel is then
// null); max_len bounds its sequences' lengths (it sets the attention's splits).
Status LlamaCudaRunner::encode(const ForwardBatch& b, kv::KvArena& arena, int64_t max_len,
                               bool sampled) {
  const DecoderHParams& hp = m_.hp_;
  const kv::KvSpec& spec = arena.spec();
  cudaStream_t st = stream_;
  const Layout& L = layout_;
  const int64_t nt = b.n_tokens(), e = hp.n_embd, ff = hp.n_ff, hd = hp.head_dim;
  const int64_t qkv_dim = m_.qkv_dim_, q_dim = m_.q_dim_, kv_dim = m_.kv_dim_;
  auto* x = x_.as<float>();
  auto* hb = hb_.as<uint16_t>();
  auto* qkv = qkv_.as<float>();
  auto* attnb = attnb_.as<uint16_t>();
  auto* o = o_.as<float>();
  auto* gu = gu_.as<float>();
  auto* actb = actb_.as<uint16_t>();
  cuda::PagedAttentionParams ap = attention_params(b, spec, max_len);
  auto tap = [&](TapKind kind, int64_t il, const void* p, DType t, int64_t rows, int64_t w) {
    return tap_device_rows(b.taps, kind, il, p, t, rows, w, st, tap_host_);
  };
  // What the ops move (only when profiled: pass_costs()).
  const PassCosts pc = timer_ != nullptr ? pass_costs(hp, b, spec) : PassCosts{};
  // Gemma's RMSNorm of a block's output before the residual (w null: none).
  auto post_norm = [&](const float* w, int64_t il) -> Status {
    if (w == nullptr) return ok_status();
    OpScope op(timer_, "post_norm", il, pc.row);
    return cuda::rms_norm(o, w, nt, e, hp.norm_eps, DType::kF32, o, st);
  };

  {
    OpScope op(timer_, "embed", -1, pc.row);
    RINFER_RETURN_IF_ERROR(cuda::get_rows(m_.tok_embd_, dev(L.tokens), nt, DType::kF32, x, st));
    if (hp.embd_scale != 1.0f) RINFER_RETURN_IF_ERROR(cuda::scale(x, nt * e, hp.embd_scale, st));
  }
  RINFER_RETURN_IF_ERROR(tap(TapKind::kEmbed, -1, x, DType::kF32, nt, e));

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (b.cancel != nullptr && b.cancel->load()) {
      return Status(StatusCode::kCancelled, "forward: interrupted");
    }
    const DeviceLayer& d = m_.layers_[static_cast<size_t>(il)];
    RINFER_RETURN_IF_ERROR(timed("norm", il, pc.norm, [&] {
      return il == 0
                 ? cuda::rms_norm(x, d.attn_norm, nt, e, hp.norm_eps, DType::kBF16, hb, st)
                 : cuda::add_rms_norm(x, o, d.attn_norm, nt, e, hp.norm_eps, DType::kBF16, hb, st);
    }));
    if (il > 0) RINFER_RETURN_IF_ERROR(tap(TapKind::kBlockOut, il - 1, x, DType::kF32, nt, e));
    RINFER_RETURN_IF_ERROR(tap(TapKind::kAttnNorm, il, hb, DType::kBF16, nt, e));
    std::optional<OpScope> qkv_op(
        std::in_place, timer_, "qkv", il,
        d.merged_qkv() ? weight_cost(d.wqkv, nt) : weights_cost({&d.wq, &d.wk, &d.wv}, nt));
    if (d.merged_qkv()) {
      RINFER_RETURN_IF_ERROR(gemm(d.wqkv, hb, nt, qkv));
    } else {
      const std::pair<const DeviceWeight*, int64_t> parts[] = {
          {&d.wq, 0}, {&d.wk, q_dim}, {&d.wv, q_dim + kv_dim}};
      for (auto [w, off] : parts) {
        RINFER_RETURN_IF_ERROR(gemm(*w, hb, nt, gu));
        RINFER_CUDA_RETURN(cudaMemcpy2DAsync(qkv + off, qkv_dim * 4, gu, w->n_out * 4, w->n_out * 4,
                                             nt, cudaMemcpyDeviceToDevice, st));
      }
    }
    if (d.bqkv != nullptr) {
      RINFER_RETURN_IF_ERROR(cuda::add_bias_rows(qkv, d.bqkv, nt, qkv_dim, qkv_dim, st));
    }
    qkv_op.reset();
    float* k = qkv + q_dim;
    float* v = qkv + q_dim + kv_dim;
    if (hp.qk_norm) {
      OpScope op(timer_, "qk_norm", il, pc.heads);
      RINFER_RETURN_IF_ERROR(
          cuda::rms_norm_heads(qkv, d.q_norm, nt, hp.n_head, hd, qkv_dim, hp.norm_eps, st));
      RINFER_RETURN_IF_ERROR(
          cuda::rms_norm_heads(k, d.k_norm, nt, hp.n_head_kv, hd, qkv_dim, hp.norm_eps, st));
    }
    cpu::RopeParams rope = hp.rope;
    if (!hp.layer_attn.empty()) {
      const DecoderHParams::LayerAttn& la = hp.layer_attn[static_cast<size_t>(il)];
      rope.freq_base = la.rope_base;
      rope.freq_scale = la.rope_scale;
    }
    RINFER_RETURN_IF_ERROR(timed("rope", il, pc.heads, [&] {
      return cuda::rope(qkv, nt, hp.n_head + hp.n_head_kv, hd, qkv_dim, dev(L.positions), rope, st);
    }));
    const int32_t grp = spec.group_of_layer[static_cast<size_t>(il)];
    RINFER_RETURN_IF_ERROR(timed("kv_store", il, pc.kv_store, [&] {
      return cuda::kv_store_slots(k, v, nt, kv_dim, qkv_dim, spec.dtype, arena.k(il), arena.v(il),
                                  dev(L.slots + static_cast<size_t>(grp) * nt), st);
    }));
    ap.window = spec.groups[static_cast<size_t>(grp)].window;
    ap.tables = dev(L.tables + static_cast<size_t>(grp) * b.n_seq() * b.table_stride);
    RINFER_RETURN_IF_ERROR(timed("attention", il, pc.attention_of(grp), [&] {
      return cuda::paged_attention(ap, arena.k(il), arena.v(il), qkv, attnb, attn_ws_.data(),
                                   attn_ws_bytes_, st);
    }));
    RINFER_RETURN_IF_ERROR(
        timed("wo", il, weight_cost(d.wo, nt), [&] { return gemm(d.wo, attnb, nt, o); }));
    RINFER_RETURN_IF_ERROR(post_norm(d.post_attn_norm, il));
    RINFER_RETURN_IF_ERROR(tap(TapKind::kAttnOut, il, o, DType::kF32, nt, e));
    RINFER_RETURN_IF_ERROR(timed("norm", il, pc.norm, [&] {
      return cuda::add_rms_norm(x, o, d.ffn_norm, nt, e, hp.norm_eps, DType::kBF16, hb, st);
    }));
    RINFER_RETURN_IF_ERROR(tap(TapKind::kMlpNorm, il, hb, DType::kBF16, nt, e));
    std::optional<OpScope> gu_op(
        std::in_place, timer_, "gate_up", il,
        d.merged_gu() ? weight_cost(d.wgu, nt) : weights_cost({&d.w_gate, &d.w_up}, nt));
    const float* gate = gu;
    const float* up = gu + ff;
    int64_t in_stride = 2 * ff;
    if (d.merged_gu()) {
      RINFER_RETURN_IF_ERROR(gemm(d.wgu, hb, nt, gu));
    } else {
      RINFER_RETURN_IF_ERROR(gemm(d.w_gate, hb, nt, gu));
      RINFER_RETURN_IF_ERROR(gemm(d.w_up, hb, nt, gu + nt * ff));
      up = gu + nt * ff;
      in_stride = ff;
    }
    gu_op.reset();
    std::optional<OpScope> act_op(std::in_place, timer_, "act", il, pc.act);
    if (hp.gelu_ffn) {
      RINFER_RETURN_IF_ERROR(cuda::geglu_tanh(gate, up, nt, ff, in_stride, DType::kBF16, actb, st));
    } else {
      RINFER_RETURN_IF_ERROR(cuda::swiglu(gate, up, nt, ff, in_stride, DType::kBF16, actb, st));
    }
    act_op.reset();
    RINFER_RETURN_IF_ERROR(
        timed("down", il, weight_cost(d.w_down, nt), [&] { return gemm(d.w_down, actb, nt, o); }));
    RINFER_RETURN_IF_ERROR(post_norm(d.post_ffn_norm, il));
    RINFER_RETURN_IF_ERROR(tap(TapKind::kMlpOut, il, o, DType::kF32, nt, e));
  }
  RINFER_RETURN_IF_ERROR(
      timed("add", hp.n_layer, pc.norm, [&] { return cuda::add(x, o, nt * e, x, st); }));
  RINFER_RETURN_IF_ERROR(tap(TapKind::kBlockOut, hp.n_layer - 1, x, DType::kF32, nt, e));
  const auto n_out = static_cast<int64_t>(b.logit_rows.size());
  if (n_out == 0) return cuda_status(cudaStreamSynchronize(st), "forward");
  // The logit rows: gathered into o, normed to bf16, projected.
  std::optional<OpScope> logits_op(std::in_place, timer_, "logits", hp.n_layer,
                                   weight_cost(m_.output_weight(), n_out));
  RINFER_RETURN_IF_ERROR(cuda::gather_rows(x, e, dev(L.rows), n_out, e, o, st));
  RINFER_RETURN_IF_ERROR(
      cuda::rms_norm(o, m_.output_norm_.as<float>(), n_out, e, hp.norm_eps, DType::kBF16, hb, st));
  RINFER_RETURN_IF_ERROR(gemm(m_.output_weight(), hb, n_out, logits_.as<float>()));
  logits_op.reset();
  RINFER_RETURN_IF_ERROR(
      tap(TapKind::kLogits, hp.n_layer, logits_.as<float>(), DType::kF32, n_out, hp.n_vocab));
  if (!sampled) return ok_status();
  OpScope op(timer_, "sample", hp.n_layer, stream_cost(n_out * hp.n_vocab, n_out, 4, 1));
  return cuda::sample_rows(logits_.as<float>(), n_out, hp.n_vocab,
                           reinterpret_cast<const cuda::RowSample*>(dev(L.samples)), dev(L.hist),
                           ids_dev_, st);
}

}  // namespace rinfer::llama
