// The attention step of one layer in the engine core's one-row decode steps (LlamaCudaModel::
// attention, from LlamaCudaRunner through forward()): RoPE of q and k, the new keys and values
// into the runner's paged arena, attention, by the fused decode kernel reading and writing rows
// through the block table (KvLayout::block_table); without fusion.qkv, RoPE, the slot store and
// the paged attention.
#include "models/llama/cuda/llama_cuda_model_internal.h"

namespace rinfer::llama {

Status LlamaCudaModel::attention(int64_t il, const Scratch& s, bool& aq) {
  aq = false;
  cudaStream_t st = stream_.get();
  const DeviceLayer& d = layers_[static_cast<size_t>(il)];
  const int64_t hd = hp_.head_dim, nt = 1;
  float* q = s.qkv;
  float* k = s.qkv + q_dim_;
  float* v = s.qkv + q_dim_ + kv_dim_;
  cpu::RopeParams rope = hp_.rope;
  if (!hp_.layer_attn.empty()) {
    const DecoderHParams::LayerAttn& la = hp_.layer_attn[static_cast<size_t>(il)];
    rope.freq_base = la.rope_base;
    rope.freq_scale = la.rope_scale;
  }
  if (paged_ == nullptr) return internal_error("attention: no paged arena for the decode step");
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
    // RoPE, the K/V store into the position's slot, attention through the block table and the
    // int16 form of the output, in one kernel.
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

}  // namespace rinfer::llama
