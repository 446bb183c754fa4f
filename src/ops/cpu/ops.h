// CPU operators. Each op has a scalar reference (the ground truth every backend and every fused
// or SIMD variant is tested against) and, where it pays, a fast version (Google Highway SIMD
// with runtime dispatch, parallel over the thread pool). OpContext picks one.
//
// Layout conventions: activations are f32, row-major, outermost first. A weight matrix W is a
// Tensor [n_out, n_in] (n_in contiguous, any dtype: f32, f16, bf16 or a GGUF block format).
// Pointers passed to these ops must not alias unless an op says so. docs/cpu-kernels.md
// describes the kernels, their error bounds and measured speed.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/params/op_params.h"
#include "rinfer/status.h"

namespace rinfer::cpu {

enum class Impl : uint8_t {
  kReference,  // plain scalar loops, one thread: the baseline and the test oracle
  kFast,       // SIMD + threads
};

struct OpContext {
  Impl impl = Impl::kFast;
  ThreadPool* pool = nullptr;  // nullptr: run on the calling thread
  // Fast matmul with block-quantized weights: true quantizes the activations to 8 bits on the
  // fly and uses integer dot products (as ggml does; relative error ~4e-3, see matmul);
  // false dequantizes the weights to f32 instead (error ~1e-6, slower).
  bool quantize_activations = true;
  // Batch invariance: the first `single_rows` rows of a fast matmul are each computed exactly as
  // a call with that row alone would compute it (the matrix-vector kernel where a format has
  // one), so a decode row batched with other sequences gives the bits it gives alone. The other
  // rows go through the tiled kernel, whose result for a row never depends on the other rows.
  int64_t single_rows = 0;
};

// The SIMD target the fast kernels run on ("AVX3_DL", "AVX2", "SSE4", "NEON", "SCALAR").
std::string_view simd_target_name();

// y[n_tokens, n_out] = x[n_tokens, n_in] * W^T, with W = w, a 2-D CPU tensor [n_out, n_in]
// whose rows are whole blocks (the outer dim may be strided, e.g. a slice of rows).
//
// Reference (Impl::kReference), the exact semantics:
//   Wf[o, :] = dequantize_row(W[o, :])
//   y[t, o]  = float( sum_i double(Wf[o, i]) * double(x[t, i]) )
// i.e. each weight row is dequantized bit-exactly as ggml does and the dot product is
// accumulated in double, then rounded once.
//
// Fast (Impl::kFast), any dtype:
//  - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K with ctx.quantize_activations: x is quantized
//    per token to int8 in blocks of 32 with an f32 scale per block (finer than ggml's Q8_0 /
//    Q8_K), and the products use exact integer dot products (AVX-512 VNNI where present).
//    The only error is the activation rounding: relative L2 error vs the reference <= 1e-2
//    (measured ~4e-3 on uniform random data).
//  - F32, F16, BF16 (and every other dtype through dequantize_row): f32 FMA on dequantized
//    weight tiles, relative L2 error ~1e-6.
// n_tokens == 1 runs a matrix-vector kernel (memory bound); more tokens run a tiled
// matrix-matrix kernel that unpacks each weight tile once and reuses it across all tokens.
// Work is split over ctx.pool by output rows. x and y must not overlap.
//
//
// W8A8 (row_scale given): w holds int8 codes packed by pack_w8a8 (u8 [ceil(n_out / 16),
// 16 * n_in]) and row_scale [n_out] f32 the scale of each row (value = code * row_scale[o]), so
// n_out is row_scale's length and n_in w.dim(1) / 16; the reference is the formula above over
// those values. Fast with ctx.quantize_activations: x is quantized per token to int8 with a scale
// per 64 columns (max|x| / 127 over them), each group's sum is exact int32 (AVX-512 VNNI where
// present), the groups add in f32 and the row's scale multiplies once; the error is the
// activations' rounding (relative L2 error vs the reference under 2e-2 on uniform random data).
// Without quantize_activations it runs the reference.
Status matmul(const OpContext& ctx, const Tensor& w, const float* x, int64_t n_tokens, float* y,
              const Tensor* row_scale = nullptr);

// Several matmuls that share their input, e.g. Q, K and V, or the FFN's gate and up:
// ys[i][n_tokens, n_out_i] = x[n_tokens, n_in] * ws[i]^T, every ws[i] with the same n_in.
// Same results as calling matmul for each; the fast path quantizes x once and, for one token,
// splits the rows of all the matrices over the pool in a single round trip.
// row_scales (empty, or one per matrix, nullptr where none): as matmul's row_scale; W8A8
// matrices quantize x once and split all their panels over the pool together.
Status matmul_multi(const OpContext& ctx, std::span<const Tensor* const> ws, const float* x,
                    int64_t n_tokens, std::span<float* const> ys,
                    std::span<const Tensor* const> row_scales = {});

// The W8A8 layout of int8 codes [n_out, n_in] (n_in a multiple of 4) for matmul's row_scale
// form: panels of 16 rows, each 4-column step of the 16 rows in 64 bytes, as code + 128 (the
// unsigned operand of the integer dot products); u8 [ceil(n_out / 16), 16 * n_in], rows past
// n_out zero codes.
Result<Tensor> pack_w8a8(const Tensor& codes);

// out[i, :] = table[ids[i], :] as f32, for a 2-D CPU table [n_rows, n] of any dtype.
// out: [ids.size(), n]. Ids out of range are an error naming the id and its position.
Status get_rows(const Tensor& table, std::span<const int32_t> ids, float* out);

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (w ? w : 1), for n_rows rows of n.
// x, y: [n_rows, n]; w: [n] or nullptr. y may alias x.
void rms_norm(const OpContext& ctx, const float* x, const float* w, int64_t n_rows, int64_t n,
              float eps, float* y);

using rinfer::RopeMode;    // ops/params/op_params.h
using rinfer::RopeParams;  // ops/params/op_params.h

// In place on x[n_tokens, n_heads, head_dim]; token t is at position positions[t]
// (positions.size() == n_tokens). Pair i (0 <= i < n_rot/2) of a head at position p rotates by
// the angle p * freq_scale * freq_base^(-2i/n_rot), computed in double in both versions.
void rope(const OpContext& ctx, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          std::span<const int32_t> positions, const RopeParams& p);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(const OpContext& ctx, const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU, Gemma), with
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias gate or up.
// Reference: double precision. Fast: f32 as g / (1 + exp(-2u)) (scalar, not vectorized yet).
void geglu_tanh(const OpContext& ctx, const float* gate, const float* up, int64_t n, float* out);

// out[i] = a[i] + b[i] (out may alias a or b)
void add(const OpContext& ctx, const float* a, const float* b, int64_t n, float* out);

// Numerically stable softmax of one row, in place (scalar reference, double sums).
void softmax(float* x, int64_t n);

// Causal multi-head attention with grouped-query heads, reading the KV cache in place.
// q:   [n_tokens, n_head, head_dim]       queries of the new tokens
// k,v: [n_kv, n_head_kv, head_dim]        keys/values of all positions 0..n_kv-1 (f32),
//                                         the new tokens being the last n_tokens of them;
//                                         position j, kv head h starts at (j*kv_row_stride +
//                                         h*head_dim) floats
// out: [n_tokens, n_head, head_dim]
// Token t (absolute position n_kv - n_tokens + t) attends to positions <= its own. Query head h
// reads kv head h / (n_head / n_head_kv). scale is usually 1/sqrt(head_dim).
// window > 0 (sliding-window attention, Gemma's local layers): token at position p sees only
// positions j with p - window < j <= p.
// kv_rows > 0: k and v are a ring of kv_rows rows (a sliding-window layer's KV cache), position
// j in row j % kv_rows; the rows must hold every position the tokens see:
// kv_rows >= min(n_kv, n_tokens + window - 1) (window > 0), kv_rows >= n_kv (window 0).
// Reference: per (token, head) scores in double, exact softmax, output accumulated in double.
// Fast: flash-attention style tiles (online softmax) over blocks of kv positions, the query
// heads of a GQA group and several tokens sharing each K/V tile; f32, relative error ~1e-6.
struct AttentionShape {
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t kv_row_stride = 0;  // floats between positions in k and v (>= n_head_kv * head_dim)
  float scale = 1.0f;
  int64_t window = 0;   // 0: full causal attention; > 0: only the last `window` positions
  int64_t kv_rows = 0;  // 0: position j in row j; > 0: a ring, position j in row j % kv_rows
};
Status attention(const OpContext& ctx, const AttentionShape& s, const float* q, const float* k,
                 const float* v, float* out);

// Attention for many sequences in one call over a paged KV cache (the serving engine's batch).
// Each sequence has its own queries (rows q_start .. q_start + n_tokens - 1 of q and out) and its
// own positions 0 .. n_kv - 1, stored in fixed-size blocks of k/v listed by its block table;
// otherwise the semantics are attention()'s (causal, GQA, sliding window), plus a non-causal
// mode for encoders.
// q, out: [total query rows, n_head, head_dim] (rows of no sequence are neither read nor written)
// k, v:   [n_blocks, block_size, kv_row_stride]  position j of a sequence, kv head h starts at
//         ((block_table[j / block_size] * block_size + j % block_size) * kv_row_stride +
//         h * head_dim) floats
// Errors (invalid_argument naming the sequence and the field): a bad shape, n_tokens > n_kv,
// q_start < 0, a null table with n_kv > 0, a table entry that some query sees but is not in
// [0, n_blocks) (-1 is allowed only for blocks wholly before every query's window), a window with
// causal == false, null pointers.
// Reference: attention()'s reference per sequence with the paged row addressing; a sequence's
// output is bit-identical whatever other sequences share the call (and equals attention()'s
// reference on a contiguous copy of its K/V).
// Fast: one work list over all sequences, run over ctx.pool in one round trip: prefill items
// (sequence, kv head, block of 4 tokens) and decode items (n_tokens == 1: sequence, kv head,
// slice of its positions; slices merged as in flash-decoding). The slices are sized from the
// whole call's work and the pool size, so a few long sequences still fill every thread while
// many sequences are not split. Relative error ~1e-7; the slicing, hence the last bits of a
// decode sequence's output, depends on the rest of the batch and on the pool size.
struct AttentionSeq {
  int64_t q_start = 0;   // first query row of this sequence in q / out (rows are tokens)
  int64_t n_tokens = 0;  // its queries: the last n_tokens of its n_kv positions (causal)
  int64_t n_kv = 0;      // positions 0 .. n_kv-1 (n_tokens <= n_kv)
  // [ceil(n_kv / block_size)] physical block of positions [b*block_size, (b+1)*block_size);
  // an entry that no query of the sequence can see (before its sliding window) may be -1
  // and must not be read.
  const int32_t* block_table = nullptr;
};
struct PagedAttentionShape {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  // f32, or i8: each K/V row holds n_head_kv * head_dim int8 codes (KV head h from h * head_dim)
  // then an f32 scale per group of kv_group codes (value = code * scale; kv::KvSpec::row_bytes).
  // Fast: the codes of each block of positions are widened to f32 once per work item, then the
  // f32 path runs.
  DType kv_dtype = DType::kF32;
  int64_t kv_group = 0;  // i8: codes per scale, a divisor of head_dim (0: head_dim)
  // Between rows of k/v: floats (>= n_head_kv * head_dim), or bytes for i8 (>= the codes and
  // the scales).
  int64_t kv_row_stride = 0;
  int64_t block_size = 0;     // rows per block (> 0)
  int64_t n_blocks = 0;       // blocks in k/v: every table entry read must be in [0, n_blocks)
  float scale = 1.0f;
  int64_t window = 0;  // > 0: a token at position p sees only p - window < j <= p
  bool causal = true;  // false: every query sees all n_kv positions (encoders); window must be 0
};
Status paged_attention(const OpContext& ctx, const PagedAttentionShape& s,
                       std::span<const AttentionSeq> seqs, const float* q, const void* k,
                       const void* v, float* out);

// ---- encoder ops (BERT) ----------------------------------------------------------------------

// y[r, :] = (z - mean(z)) / sqrt(var(z) + eps) * gamma + beta with z = x[r, :] + res[r, :]
// (res may be nullptr: z = x), the biased variance, for n_rows rows of n. y may alias x or res.
// Reference: mean and variance in double. Fast: f32 two-pass sums, relative error ~1e-7.
void layer_norm(const OpContext& ctx, const float* x, const float* res, const float* gamma,
                const float* beta, int64_t n_rows, int64_t n, float eps, float* y);

// x[r, :] += bias[:] in place, for n_rows rows of n.
void add_bias(const OpContext& ctx, float* x, const float* bias, int64_t n_rows, int64_t n);

// x[r, i] = gelu(x[r, i] + bias[i]) in place (bias may be nullptr), the exact (erf) GELU:
// gelu(z) = 0.5 z (1 + erf(z / sqrt(2))). Reference: double, as 0.5 z erfc(-z / sqrt(2)). Fast:
// f32, erf from Abramowitz-Stegun 7.1.26 (absolute error <= 1.5e-7) with the negative tail taken as
// erfc, so small outputs keep their relative accuracy.
void gelu_erf(const OpContext& ctx, float* x, const float* bias, int64_t n_rows, int64_t n);

using rinfer::PoolKind;  // ops/params/op_params.h
// out[s, :] = pool of hidden rows [starts[s], starts[s] + lengths[s]) (each length >= 1), for
// n_seqs sequences of rows of n; normalize: each out row divided by its L2 norm (a zero row
// stays zero). Reference and fast: sums in double.
void pool_rows(PoolKind kind, bool normalize, const float* hidden, int64_t n,
               std::span<const int32_t> starts, std::span<const int32_t> lengths, float* out);

}  // namespace rinfer::cpu
