// Bidirectional attention of the encoders on AMX tiles: each sequence's queries see all of its
// own keys, per head; q, k and v rounded to bf16, the scores and the softmax in f32, the
// probabilities rounded to bf16 for the product with v, accumulated in f32. The fast attention
// of `quantization: {activations: bf16}` (the BERT sample); docs/cpu-kernels.md.
#pragma once

#include <cstdint>
#include <span>

#include "ops/cpu/ops.h"
#include "rinfer/status.h"

namespace rinfer::cpu {

struct EncoderAttentionShape {
  int64_t n_head = 0;
  int64_t head_dim = 0;    // a multiple of 32, at most 256
  int64_t row_stride = 0;  // floats between rows of q, k, v and out (>= n_head * head_dim)
  float scale = 1.0f;      // applied to q k^T before the softmax
};

// For each sequence (q_start, n_tokens; n_kv must equal n_tokens, block_table is not read) and
// head h: out[r, h] = softmax(scale q[r, h] k[j, h]^T over the sequence's rows j) v[j, h].
// Rows outside every sequence are not written. Needs amx_bf16_available() (an error otherwise);
// threads over (sequence, head). Error against the f64 reference (paged_attention, reference
// kernels): relative L2 ~3e-3 on random data, that of bf16 rounding.
Status attention_bf16(const OpContext& ctx, const EncoderAttentionShape& s,
                      std::span<const AttentionSeq> seqs, const float* q, const float* k,
                      const float* v, float* out);

}  // namespace rinfer::cpu
