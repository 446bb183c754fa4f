// The kernel launchers of src/ops/cuda (internal). The .cu files define them: each checks
// nothing, launches, and returns cudaGetLastError(). The Status API in ops_cuda.h validates the
// arguments and calls these. This header stays free of fmt and the host headers (nvcc includes
// it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rinfer::cuda::kern {

// Programmatic dependent launch of the decode kernels (common.cuh, launch_pdl): on by default on
// sm_90+, off with set_pdl(false) (strategies.kernels.cuda.pdl; graphs captured before keep
// what they were captured with).
void set_pdl(bool on);
bool pdl_enabled();

// Multiprocessors of the current device (cached per device; 132 when it cannot be read). Defined
// in matvec.cu; the split choices of matvec and decode attention use it.
int sm_count();
// The decode matvecs' split-K, process-wide: 0 by shape, or 1, 2, 4 forced (matvec.cu).
void set_matvec_split(int split);

// Weight formats of the device layout (see DeviceWeight in ops_cuda.h).
// kWF8: f8_e4m3 codes [n_out, n_in] with an f32 scale per row (scales), read by the decode matvec
// alone (the other kernels' switches refuse it).
enum WFormat : int {
  kWF32 = 0,
  kWF16,
  kWBF16,
  kWQ8_0,
  kWQ4_0,
  kWQ4_1,
  kWQ4_K,
  kWF8,
  kWFormatCount
};

struct WeightView {
  int format = kWF32;
  int64_t n_out = 0;
  int64_t n_in = 0;
  int64_t ld = 0;                // scalar formats: elements between rows (n_in padded to 16 B)
  const void* data = nullptr;    // [n_out, row bytes]
  const void* scales = nullptr;  // Q8_0 / Q4_0: f16 [n_out, n_in/32]; Q4_1: (d, m) f16 pairs;
                                 // F8: f32 [n_out]
};

// The RMSNorm of the matvec's own input (launch_matvec_rms_norm): weights [n_in] f32.
struct RowNorm {
  const float* w = nullptr;
  int64_t n = 0;
  float eps = 0.0f;
};
// y[n_out] = W (rms_norm(x) * nw.w) for the 16-bit layouts (F16, BF16); x: [n_in] f32.
cudaError_t launch_matvec_rms_norm(const WeightView& w, const float* x, const RowNorm& nw, float* y,
                                   cudaStream_t stream);
// y[n_out] = W x (+ add); x: [n_in] f32, 16-byte aligned; add: [n_out] or nullptr.
// Y[n_rows, n_out] = X W^T, X [n_rows, n_in] bf16 (row stride n_in), 1 <= n_rows <= 8; the
// 16-bit and quantized layouts (not f32). matvec_batch.cu.
cudaError_t launch_matvec_batch(const WeightView& w, const uint16_t* x, int n_rows, float* y,
                                cudaStream_t stream);
cudaError_t launch_matvec(const WeightView& w, const float* x, const float* add, float* y,
                          cudaStream_t stream);

// FP8 E4M3 (W8A8, quantize_f8.cu, matvec_f8.cu). Rows of x [n_rows, n] (row stride ld; f32, or
// bf16 when bf16) -> q [n_rows, n] e4m3 and scale [n_rows] = max|x| / 448.
cudaError_t launch_quantize_f8_rows(const void* x, bool bf16, int64_t n_rows, int64_t n, int64_t ld,
                                    uint8_t* q, float* scale, cudaStream_t stream);
// Y[n_rows, n_out] = (Xq W^T) * w_scale * x_scale (+ add, which may alias y); w e4m3 [n_out, n_in],
// n_in % 64 == 0, 1 <= n_rows <= 8. matvec_f8_split: the warps that split each row (1 to 8).
cudaError_t launch_matvec_f8(const uint8_t* w, const float* w_scale, int64_t n_out, int64_t n_in,
                             const uint8_t* xq, const float* x_scale, int n_rows, const float* add,
                             float* y, cudaStream_t stream);
int matvec_f8_split(int64_t n_out, int64_t n_in);
// out[r][c] (bf16, rows ld_out apart) = e4m3 w[r][c] * scale[r] (dequantize_f8.cu).
cudaError_t launch_dequantize_f8_bf16(const uint8_t* w, const float* scale, int64_t n_out,
                                      int64_t n_in, uint16_t* out, int64_t ld_out,
                                      cudaStream_t stream);

// Activations quantized to int16 for the integer matvec: x [n] f32 (n % 32 == 0) ->
// q int16 [n] = round(x / scale), scale f32 [n/32] = absmax / 32767 per 32-element block,
// sum16 f32 [n/16] = exact sums of x per 16 elements (for the offsets and mins of the formats).
cudaError_t launch_quantize_q16(const float* x, int64_t n, int16_t* q, float* scale, float* sum16,
                                cudaStream_t stream);
struct Q16View {
  const int16_t* q = nullptr;
  const float* scale = nullptr;
  const float* sum16 = nullptr;
};
// The RMSNorm split across two decode matvecs (matvec_q16.cu), so that no norm kernel runs
// between them. The producer (the matrix whose output is added to the residual: Wo, ffn_down)
// adds its rows to the residual in place and writes, per 32 rows, the int16 blocks of
// residual * w (the next norm's weight, before the 1 / rms scale) and the rows' sum of squares
// (`parts`, one float per 32 rows, summed in a fixed order: deterministic). The consumer (the
// next matrix: QKV, gate|up, the output) reads those int16 blocks as its x and multiplies its
// sums by 1 / sqrt(sum(parts) / n + eps): the scale is common to every term of a row, so the
// result is the norm's up to f32 rounding.
struct RmsIn {
  const float* parts = nullptr;  // null: x is already normalized; 16-byte aligned
  int n_parts = 0;               // n / 32 rounded up to a multiple of 4, at most 128
  int64_t n = 0;                 // the norm's length
  float eps = 0.0f;
};
struct ResNormOut {
  float* residual = nullptr;  // [n_out], += W x
  const float* w = nullptr;   // [n_out] the next norm's weight
  int16_t* q = nullptr;       // int16 blocks of residual * w (Q16View's layout)
  float* scale = nullptr;
  float* sum16 = nullptr;
  float* parts = nullptr;  // [n_out / 32, rounded up to a multiple of 4 (zero padding)]
  int l2_prefetch = 0;     // the first half's blocks prefetch the second half's rows into L2
};

// Which kernel the Q8_0 / Q4_0 consumers use (process-wide, strategies.kernels.cuda): kAuto, the
// streaming kernel for matrices of many stages (matvec_q16.cu); kAlways, wherever its shape
// rules allow; kNever, the register kernel. The streaming ring's KB a block ([16, 220]), and the
// producers' L2 prefetch (-1 auto, 0 off, 1 rows up to 8192 in every format, 2 every producer).
enum class MatvecStream { kAuto, kAlways, kNever };
MatvecStream matvec_stream_mode();
void set_matvec_stream_mode(MatvecStream m);
void set_matvec_stream_kb(int kb);
void set_producer_l2(int mode);
// y[n_out] = W x (+ add) for the Q8_0, Q4_0, Q4_1 and Q4_K layouts with int16 x (dp2a); with
// rin.parts set, y = W x / rms (+ add).
cudaError_t launch_matvec_q16(const WeightView& w, const Q16View& x, const float* add, float* y,
                              cudaStream_t stream, const RmsIn& rin = {});
// The producer: rn.residual += W x and the next norm's int16 blocks and parts (n_out % 32 == 0).
cudaError_t launch_matvec_q16_res_norm(const WeightView& w, const Q16View& x, const ResNormOut& rn,
                                       cudaStream_t stream);

// out: bf16 [n_out, ld_out] (ld_out >= n_in) = W dequantized; pad columns are left untouched.
cudaError_t launch_dequant_bf16(const WeightView& w, uint16_t* out, int64_t ld_out,
                                cudaStream_t stream);

// out[i, :] = row ids[i] of W as f32 or bf16: [n_ids, n_in]. Out-of-range ids give NaN rows.
cudaError_t launch_get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, bool out_bf16,
                            void* out, cudaStream_t stream);
// One id (decode): x = row ids[0] * embd_scale; out = rms_norm(x) * nw; (q, scale, sum16) its
// int16 blocks. n_in % 32 == 0, n_in <= 8192.
cudaError_t launch_embed_norm_q16(const WeightView& w, const int32_t* ids, float embd_scale,
                                  const float* nw, float eps, float* x, float* out, int16_t* q,
                                  float* scale, float* sum16, cudaStream_t stream);

// residual == nullptr: out = rms_norm(x) * w.  Else: residual += x; out = rms_norm(residual) * w.
// x, residual: [n_rows, n] f32; w: [n] f32 or nullptr; out: [n_rows, n] f32 or bf16.
cudaError_t launch_rms_norm(const float* x, const float* w, float* residual, int64_t n_rows,
                            int64_t n, float eps, bool out_bf16, void* out, cudaStream_t stream);

// In place on x: token t at x + t * token_stride, [n_heads, head_dim] per token.
// inv_freq[j] = freq_base^(-2j / n_rot) for the n_rot / 2 <= kMaxRopePairs pairs, computed on the
// host in double (rope_inv_freq in ops_cuda.cpp) for both RoPE kernels.
inline constexpr int kMaxRopePairs = 128;
struct RopeArgs {
  int64_t n_tokens, n_heads, head_dim, token_stride, n_rot;
  double freq_scale;
  bool neox;
  double inv_freq[kMaxRopePairs];
};
cudaError_t launch_rope(float* x, const int32_t* positions, const RopeArgs& a, cudaStream_t stream);
// RoPE of q and k heads in a fused qkv token row [q heads | k heads | v heads] (a.n_heads = q + k
// heads) plus the KV store: the rotated k heads and the v heads go to the cache rows of their
// positions (positions[t], or positions[t] % ring_rows when ring_rows > 0).
struct RopeKvArgs {
  int64_t n_head_q = 0;  // heads [n_head_q, n_heads) are k heads
  bool cache_bf16 = true;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t kv_row_stride = 0;
  int64_t ring_rows = 0;
};
cudaError_t launch_rope_kv_store(float* x, const int32_t* positions, const RopeArgs& a,
                                 const RopeKvArgs& kv, cudaStream_t stream);

// out[r, i] = silu(gate[r, i]) * up[r, i]; gate/up rows `in_stride` apart, out [n_rows, n].
cudaError_t launch_swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n,
                          int64_t in_stride, bool out_bf16, void* out, cudaStream_t stream);
// out[r, i] = gelu_tanh(gate[r, i]) * up[r, i], same layout as launch_swiglu.
cudaError_t launch_geglu_tanh(const float* gate, const float* up, int64_t n_rows, int64_t n,
                              int64_t in_stride, bool out_bf16, void* out, cudaStream_t stream);

cudaError_t launch_softmax(float* x, int64_t n_rows, int64_t n, cudaStream_t stream);

cudaError_t launch_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
cudaError_t launch_bf16_to_f32(const uint16_t* x, int64_t n, float* out, cudaStream_t stream);

// Writes new keys/values into the cache rows of positions [pos0, pos0 + n_tokens) (position p
// at row p, or p % ring_rows when ring_rows > 0; pos0 read from *pos0_dev when it is not null).
// k, v: [n_tokens, kv_dim] f32, rows src_stride floats apart; caches: rows kv_row_stride
// elements apart, f32 or bf16.
cudaError_t launch_kv_store(const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
                            int64_t src_stride, bool cache_bf16, void* k_cache, void* v_cache,
                            int64_t pos0, int64_t kv_row_stride, cudaStream_t stream,
                            int64_t ring_rows = 0, const int32_t* pos0_dev = nullptr);

struct AttnArgs {
  int64_t n_tokens, n_kv, n_head, n_head_kv, head_dim, kv_row_stride;
  float scale;
  bool kv_bf16;
  int64_t window = 0;                 // > 0: position p sees (p - window, p]
  int64_t ring_rows = 0;              // > 0: position p lives in row p % ring_rows
  const int32_t* n_kv_dev = nullptr;  // decode: the real n_kv (n_kv is then its upper bound)
  const int32_t* block_table = nullptr;  // decode: a paged cache (KvLayout)
  int64_t block_size = 0;
};

// Decode (n_tokens == 1): q [n_head, head_dim] f32 -> out [n_head, head_dim] f32.
// workspace: attn_decode_workspace_bytes(a) bytes.
size_t attn_decode_workspace_bytes(const AttnArgs& a);
int attn_decode_splits(const AttnArgs& a);
cudaError_t launch_attn_decode(const AttnArgs& a, const float* q, const void* k, const void* v,
                               float* out, void* workspace, cudaStream_t stream);

// Decode with the new token's RoPE and KV store fused in and the splits merged by the last block
// of each head group (one kernel): q is the raw qkv row [n_head q | n_head_kv k | n_head_kv v
// heads] of the token at position n_kv - 1; q and k are rotated, k and v written to the bf16
// cache row of that position (k, v non-const here), out [n_head, head_dim] f32 (+ int16 blocks
// when q16 is set). counters: attn_decode_counters(a) ints, zero on entry, left zero.
struct AttnRopeArgs {
  int64_t n_rot = 0;
  double freq_scale = 1.0;
  double inv_freq[kMaxRopePairs] = {};  // as RopeArgs
  bool neox = false;
  unsigned* counters = nullptr;
  int16_t* q16 = nullptr;  // optional int16 output (quantize_q16 layout)
  float* q16_scale = nullptr;
  float* q16_sum16 = nullptr;
};
int attn_decode_counters(const AttnArgs& a);
// The fused step's attention on the tensor cores (bf16 cache, head_dim 64 / 128; the default)
// or, off, with the scalar split (strategies.kernels.cuda.attention_mma).
void set_attn_decode_mma(bool on);
cudaError_t launch_attn_decode_rope(const AttnArgs& a, const AttnRopeArgs& r, const float* qkv,
                                    void* k, void* v, float* out, void* workspace,
                                    cudaStream_t stream);

// Prefill: q [n_tokens, n_head, head_dim] f32 -> out [n_tokens, n_head, head_dim] f32 or bf16.
// k, v bf16 (an f32 cache is converted into `workspace` first by the host side).
cudaError_t launch_attn_prefill(const AttnArgs& a, const float* q, const uint16_t* k,
                                const uint16_t* v, bool out_bf16, void* out, cudaStream_t stream);
// Copies rows [0, n_rows) of an f32 cache (row stride `stride`) to bf16 rows of `width`.
cudaError_t launch_rows_f32_to_bf16(const float* src, int64_t n_rows, int64_t width, int64_t stride,
                                    uint16_t* dst, cudaStream_t stream);

// Paged attention over block tables (attention_paged.cu): a multi-sequence batch, each
// sequence's new tokens the last of its kv_len positions. The grid is n_work items (int2 {seq,
// first token of the item within the sequence}; seq < 0: padding) x n_head_kv x n_splits
// (launched as n_head_kv x n_work x n_splits blocks: n_work at most 65535); an
// item holds rows / G tokens (G = n_head / n_head_kv query heads per KV head).
// q f32 rows q_stride floats apart ([n_head, head_dim] first); k, v bf16 [n_blocks,
// block_size, kv_row_stride]; out bf16 rows out_stride apart. With n_splits > 1 the workspace
// holds part_o f32 [n_splits, n_tokens, n_head, head_dim] and part_ml f32 [n_splits, n_tokens,
// n_head, 2], merged by a second kernel.
struct PagedAttnArgs {
  int64_t n_tokens, n_head, n_head_kv, head_dim, kv_row_stride, q_stride, out_stride;
  int block_size, table_stride, window, n_work, n_splits;
  bool causal;
  float scale;
  const int2* work;        // device [n_work]
  const int* query_start;  // device [n_seq + 1]
  const int* kv_len;       // device [n_seq]
  const int* tables;       // device [n_seq, table_stride]
  int rows;                // query rows a block: 64, or 128 where attn_paged_rows_supported
  // log2 of block_size and of the query heads per KV head where they are powers of two, else -1:
  // the kernel's per-tile table lookups then shift and mask instead of dividing.
  int block_shift = -1, group_shift = -1;
};
int attn_paged_tile(int64_t head_dim);  // KV positions per tile
// The tile and pipeline depth of head dims 64 and 128 (process-wide): 0 (the default) 64
// positions in 2 stages, 1: 32 in 3, 2: 32 in 4.
void set_attn_paged_config(int c);
// Whether blocks of `rows` query rows run at this head dim (and tile configuration).
bool attn_paged_rows_supported(int64_t head_dim, int rows);
cudaError_t launch_attn_paged(const PagedAttnArgs& a, const float* q, const uint16_t* k,
                              const uint16_t* v, uint16_t* out, float* part_o, float* part_ml,
                              cudaStream_t stream);
// The same over an f32 arena (k, v f32 [n_blocks, block_size, kv_row_stride]; head_dim 64, 128 or
// 256; no splits): scalar f32 on the CUDA cores (attention_paged_f32.cu). An item holds
// tokens_per_item tokens.
cudaError_t launch_attn_paged_f32(const PagedAttnArgs& a, int tokens_per_item, const float* q,
                                  const float* k, const float* v, uint16_t* out,
                                  cudaStream_t stream);
// Writes the new tokens' keys and values into their arena rows: k, v [n_tokens, kv_dim] f32 (rows
// src_stride floats apart) to rows slots[t] (device int32) of caches with rows kv_dim apart.
cudaError_t launch_kv_store_slots(const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
                                  int64_t src_stride, bool cache_bf16, void* k_cache, void* v_cache,
                                  const int32_t* slots, cudaStream_t stream);

// Sampling. argmax: lowest id on ties, NaN ignored.
cudaError_t launch_argmax(const float* logits, int64_t n, int32_t* out_id, cudaStream_t stream);
struct SampleArgs {
  int64_t n_vocab;
  int top_k;  // 1..kMaxTopK
  float temperature, top_p, min_p;
};
inline constexpr int kMaxTopK = 1024;
cudaError_t launch_sample_top_k(const float* logits, const SampleArgs& a, const float* uniform,
                                int32_t* out_id, cudaStream_t stream);
// The penalty window of a sampled row: at most kMaxDecodeHistory ids of its history.
inline constexpr int kMaxDecodeHistory = 1024;

// Many rows sampled at once, one block per row, each with its own settings (device
// RowSampleArgs [n_rows]): penalties over hist[hist_off, hist_off + hist_len) (each distinct id
// once), then argmax (temperature <= 0) or the top-k draw with `uniform`. out[r]: the id, or -1
// when the row held NaN or +inf or no finite value. Logits [n_rows, n_vocab], penalized in place.
struct RowSampleArgs {
  int top_k;  // 1..kMaxTopK when temperature > 0
  float temperature, top_p, min_p;
  float repeat_penalty, presence_penalty;
  int hist_off, hist_len;  // hist_len <= kMaxDecodeHistory
  float uniform;
};
cudaError_t launch_sample_rows(float* logits, int64_t n_rows, int64_t n_vocab,
                               const RowSampleArgs* args, const int32_t* hist, int32_t* out,
                               cudaStream_t stream);
// logits[r][t] = -inf where bit t % 32 of bits[r][t / 32] is clear ((n_vocab + 31) / 32 words
// a row).
cudaError_t launch_token_mask(float* logits, int64_t n_rows, int64_t n_vocab, const uint32_t* bits,
                              cudaStream_t stream);

// A one-row decode step queued ahead (decode_feed.cu): dst[i] = src[*parity * stride + i] for i
// < n (src pinned host memory); then, after the step, *token = ids[0], hist[*feed_at] = ids[0]
// when *feed_at >= 0, host_out[*parity] = ids[0] (pinned), and *parity ^= 1.
cudaError_t launch_decode_pull(const int32_t* src, int64_t stride, int64_t n, int32_t* dst,
                               const int32_t* parity, cudaStream_t stream);
cudaError_t launch_decode_feed(const int32_t* ids, int32_t* token, int32_t* hist,
                               const int32_t* feed_at, int32_t* host_out, int32_t* parity,
                               cudaStream_t stream);

// Random data (tests and benchmarks). kind: 0 f32, 1 f16, 2 bf16; values uniform in [lo, hi),
// never 0. q4k_headers: sane f16 d/dmin in every 144-byte block.
cudaError_t launch_fill_uniform(void* p, int kind, int64_t n, float lo, float hi, uint64_t seed,
                                cudaStream_t stream);
cudaError_t launch_fill_bytes(void* p, int64_t n, uint64_t seed, cudaStream_t stream);
// FP8 E4M3 codes, never NaN or zero.
cudaError_t launch_fill_f8(void* p, int64_t n, uint64_t seed, cudaStream_t stream);
// Copies n16 16-byte words (the benchmark's bandwidth reference).
cudaError_t launch_copy16(void* dst, const void* src, int64_t n16, cudaStream_t stream);
cudaError_t launch_q4k_headers(void* p, int64_t n_blocks, uint64_t seed, cudaStream_t stream);

}  // namespace rinfer::cuda::kern
