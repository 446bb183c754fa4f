// The attention step of one layer (LlamaCudaModel::attention): RoPE of q and k, the new keys and
// values into the cache, attention. Over the model's contiguous cache (one sequence: decode with
// the fused kernels, prefill with the tiled one), or, for the engine core's one-row decode steps
// (LlamaCudaRunner through forward()), over the runner's paged arena: the same fused decode kernel
// reading and writing rows through the block table (KvLayout::block_table).
#include "models/llama/cuda/llama_cuda_model_internal.h"

namespace rinfer::llama {

Status LlamaCudaModel::attention(int64_t il, int64_t nt, int64_t n_past, DeviceKvStorage* kv,
                                 const Scratch& s, bool& aq) {
  aq = false;
  cudaStream_t st = stream_.get();
  const DeviceLayer& d = layers_[static_cast<size_t>(il)];
  const int64_t hd = hp_.head_dim;
  const bool decode = nt == 1;
  float* q = s.qkv;
  float* k = s.qkv + q_dim_;
  float* v = s.qkv + q_dim_ + kv_dim_;
  cpu::RopeParams rope = hp_.rope;
  int64_t window = 0;
  if (!hp_.layer_attn.empty()) {
    const DecoderHParams::LayerAttn& la = hp_.layer_attn[static_cast<size_t>(il)];
    rope.freq_base = la.rope_base;
    rope.freq_scale = la.rope_scale;
    window = la.window;
  }
  if (paged_ != nullptr) {
    const PagedPass& pp = *paged_;
    const kv::KvSpec& spec = pp.arena->spec();
    const int32_t grp = spec.group_of_layer[static_cast<size_t>(il)];
    const int32_t* table = pp.tables + static_cast<int64_t>(grp) * pp.group_stride;
    void* kc = pp.arena->k(il);
    void* vc = pp.arena->v(il);
    cuda::KvLayout kl;
    kl.dtype = spec.dtype;
    kl.n_head_kv = hp_.n_head_kv;
    kl.head_dim = hd;
    kl.kv_row_stride = kv_dim_;
    kl.block_table = table;
    kl.block_size = spec.block_size;
    kl.paged_rows = static_cast<int64_t>(pp.arena->n_blocks(grp)) * spec.block_size;
    cuda::AttentionParams ap;
    ap.n_tokens = 1;
    ap.n_kv = pp.n_kv;
    ap.n_kv_device = pp.ap.kv_len;
    ap.n_head = hp_.n_head;
    ap.kv = kl;
    ap.scale = pp.ap.scale;
    ap.window = spec.groups[static_cast<size_t>(grp)].window;
    if (opts_.fusion.qkv && cuda::attention_decode_rope_supports(kl) &&
        cuda::decode_kv_fits(kl.paged_rows, kl.kv_row_stride) &&
        cuda::attention_decode_workspace_bytes(ap) <= pp.workspace_bytes) {
      // As over the contiguous cache: RoPE, the K/V store into the position's slot, attention
      // through the block table and the int16 form of the output, in one kernel.
      std::optional<cuda::QuantizedActivation> oq;
      if (any_q16({&d.wo}) && q_dim_ % 32 == 0) {
        RINFER_ASSIGN_OR_RETURN(oq, cuda::quantized_activation_in(s.q16, s.q16_bytes, q_dim_));
      }
      RINFER_RETURN_IF_ERROR(cuda::attention_decode_rope(
          ap, rope, q, kc, vc, s.attn, oq ? &*oq : nullptr, attn_counters_.as<unsigned>(),
          pp.workspace, pp.workspace_bytes, st));
      aq = oq.has_value();
      return ok_status();
    }
    // Unfused: q and k rotated in place, the K/V rows into their slots, the paged attention
    // (bf16 out) widened to the f32 the decode matvecs read.
    if (pp.slots == nullptr) {
      return unsupported("attention: the one-row decode graph needs the fused decode attention");
    }
    RINFER_RETURN_IF_ERROR(
        cuda::rope(q, nt, hp_.n_head + hp_.n_head_kv, hd, qkv_dim_, s.positions, rope, st));
    RINFER_RETURN_IF_ERROR(cuda::kv_store_slots(k, v, nt, kv_dim_, qkv_dim_, spec.dtype, kc, vc,
                                                pp.slots + static_cast<int64_t>(grp) * nt, st));
    cuda::PagedAttentionParams pa = pp.ap;
    pa.window = ap.window;
    pa.tables = table;
    RINFER_RETURN_IF_ERROR(
        cuda::paged_attention(pa, kc, vc, q, pp.out, pp.workspace, pp.workspace_bytes, st));
    return cuda::convert_bf16_to_f32(pp.out, nt * q_dim_, s.attn, st);
  }
  if (kv == nullptr) return invalid_argument("attention: no KV cache");
  const int64_t rows = kv->rows[static_cast<size_t>(il)];
  cuda::KvLayout kl;
  kl.dtype = kv_dtype_;
  kl.n_head_kv = hp_.n_head_kv;
  kl.head_dim = hd;
  kl.kv_row_stride = kv_dim_;
  kl.ring_rows = rows < kv_n_ctx_ ? rows : 0;
  void* kc = kv->k[static_cast<size_t>(il)].data();
  void* vc = kv->v[static_cast<size_t>(il)].data();
  cuda::AttentionParams ap;
  ap.n_tokens = nt;
  ap.n_kv = n_past + nt;
  ap.n_head = hp_.n_head;
  ap.kv = kl;
  ap.scale = hp_.attn_scale > 0 ? hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  ap.window = window;
  if (decode && opts_.fusion.qkv && cuda::attention_decode_rope_supports(kl)) {
    // RoPE, the K/V store, attention and (for a quantized Wo) the int16 form of its output in
    // one kernel (an f32 cache of head_dim 256 takes the kernels below).
    ap.n_kv_device = s.n_kv;
    ap.n_kv = graph_bound_ > 0 ? graph_bound_ : kv_n_ctx_;  // the upper bound: a graph serves
                                                            // every length up to it
    std::optional<cuda::QuantizedActivation> oq;
    if (any_q16({&d.wo}) && q_dim_ % 32 == 0) {
      RINFER_ASSIGN_OR_RETURN(oq, cuda::quantized_activation_in(s.q16, s.q16_bytes, q_dim_));
    }
    RINFER_RETURN_IF_ERROR(
        cuda::attention_decode_rope(ap, rope, q, kc, vc, s.attn, oq ? &*oq : nullptr,
                                    attn_counters_.as<unsigned>(), s.attn_ws, s.attn_ws_bytes, st));
    aq = oq.has_value();
    return ok_status();
  }
  if (opts_.fusion.qkv) {
    // RoPE of q and k and the K/V store in one kernel (rows at s.positions).
    RINFER_RETURN_IF_ERROR(
        cuda::rope_kv_store(q, nt, hp_.n_head, qkv_dim_, s.positions, rope, kl, kc, vc, st));
  } else {
    // q and k heads are adjacent in each qkv row and rotate alike: one launch for both.
    RINFER_RETURN_IF_ERROR(
        cuda::rope(q, nt, hp_.n_head + hp_.n_head_kv, hd, qkv_dim_, s.positions, rope, st));
    RINFER_RETURN_IF_ERROR(cuda::kv_store(k, v, nt, qkv_dim_, kl, kc, vc, n_past, st,
                                          decode ? s.positions : nullptr));
  }
  if (decode) {
    ap.n_kv_device = s.n_kv;
    ap.n_kv = graph_bound_ > 0 ? graph_bound_ : kv_n_ctx_;  // the upper bound: a graph serves
                                                            // every length up to it
    return cuda::attention_decode(ap, q, kc, vc, s.attn, s.attn_ws, s.attn_ws_bytes, st);
  }
  // The prefill kernel reads contiguous queries.
  RINFER_CUDA_RETURN(cudaMemcpy2DAsync(s.q, q_dim_ * 4, q, qkv_dim_ * 4, q_dim_ * 4, nt,
                                       cudaMemcpyDeviceToDevice, st));
  return cuda::attention_prefill(ap, s.q, kc, vc, DType::kBF16, s.attnb, s.attn_ws,
                                 s.attn_ws_bytes, st);
}

}  // namespace rinfer::llama
