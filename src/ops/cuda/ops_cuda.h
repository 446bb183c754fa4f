// CUDA operators (CUDA builds only). Each takes device pointers and a stream, queues its
// kernels, and returns a Status: bad arguments are kInvalidArgument before anything is queued,
// launch errors kDeviceError. Everything is stream-ordered and allocation-free (callers pass
// workspaces), so a decode step can be captured in a CUDA graph.
//
// Ground truth: the scalar references of src/ops/cpu/ops.h (tests/ops_cuda compares every
// kernel with them); bench/cuda_ops_bench.cpp measures them against the device's limits.
//
// Activations: f32 row-major (outermost first) unless an op says otherwise; "f32 or bf16"
// outputs take a DType (kF32 or kBF16, bf16 rounded to nearest even). bf16 activations feed the
// tensor-core GEMM and the prefill attention output.
//
// Weights live on the device as a DeviceWeight [n_out, n_in] in the kernels' layout:
//   f32, f16, bf16   rows of ld elements (n_in rounded up to 16 bytes, zero-padded)
//   q8_0             int8 quants [n_out, n_in] + f16 scales [n_out, n_in/32]   (repacked)
//   q4_0             nibbles [n_out, n_in/2] (ggml's order within a block) + f16 scales
//   q4_1             nibbles as q4_0 + (d, m) f16 pairs [n_out, n_in/32]
//   q4_k             the GGUF blocks as they are (144-byte blocks are 16-byte aligned)
//   any other dtype  (q5_*, q6_k, q2_k, q3_k, q5_k, f64, f8) dequantized to bf16 at upload
// The repacked 32-element formats put quants and scales in separate arrays so every quant load
// is an aligned 16-byte load (an 18-, 20- or 34-byte block is not 16-byte aligned).
//
// GEMM (prefill) runs on cuBLASLt in bf16 with f32 accumulation. Weights that are not bf16 are
// dequantized per call into a caller-provided bf16 workspace (gemm_workspace_bytes), chosen over
// a bf16 copy made at load time so that weights stay quantized in memory (4x smaller than bf16
// for Q4) and one workspace (the largest matrix) serves every layer. Its cost, measured on the
// H200: ~80 us per 14336x4096 Q4_K matrix, about the GEMM's own time at 512 tokens and a quarter
// of it at 2048 (bench/results/h200/cuda_ops.json); a dequantizing GEMM would remove it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/cuda/cublas_lt.h"
#include "core/cuda/device_allocator.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/cuda/launch.h"  // RowSampleArgs
#include "ops/params/kernel_config.h"
#include "ops/params/op_params.h"  // RopeParams, RopeMode
#include "rinfer/status.h"

namespace rinfer::cuda {

struct DeviceWeight {
  DType dtype = DType::kF32;  // the layout: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k or f8_e4m3
  DType source_dtype = DType::kF32;  // the dtype uploaded (differs when converted to bf16)
  int64_t n_out = 0;
  int64_t n_in = 0;
  int64_t ld = 0;                // scalar layouts: elements between rows; else n_in
  const void* data = nullptr;    // see the layouts above
  const void* scales = nullptr;  // q8_0 / q4_0 / q4_1 (f16), f8_e4m3 (f32 per row), else nullptr
  uint64_t bytes = 0;            // device bytes one matvec reads (quants + scales)
  int device = 0;
  DeviceBuffer storage;  // owns data and scales
};

// Uploads a 2-D CPU weight [n_out, n_in] (rows contiguous; any dtype that dequantizes to float)
// into the device layout. Synchronizes `stream` before returning (loading is not on the hot
// path), so the host tensor may go at once.
Result<DeviceWeight> upload_weight(const Tensor& w, int device, cudaStream_t stream,
                                   DeviceAllocator* allocator = nullptr);

// y[n_out] = W x (+ add[n_out] when add != nullptr; add may alias y). x: [n_in] f32, 16-byte
// aligned, must not alias y. Batch-1 decode; memory-bound. An f8_e4m3 layout is read as weights
// only (code * row scale, x kept in f32: W8A16), unlike matvec_f8's e4m3 activations.
Status matvec(const DeviceWeight& w, const float* x, const float* add, float* y,
              cudaStream_t stream);
// y[n_out] = W (rms_norm(x) * norm_w) for the F16, BF16 and F8 layouts: the RMSNorm of a residual
// row x [n_in] (weights norm_w [n_in], both 16-byte aligned) formed while x is read, so no norm
// kernel runs before a decode matvec. x must not alias y.
bool matvec_rms_norm_supported(DType layout);
Status matvec_rms_norm(const DeviceWeight& w, const float* x, const float* norm_w, float eps,
                       float* y, cudaStream_t stream);

// Small-batch decode: y[n_rows, n_out] = x W^T for 1 <= n_rows <= kMatvecBatchMaxRows rows of
// bf16 activations x [n_rows, n_in] (row stride n_in, 16-byte aligned), every weight byte read
// once for all rows and dequantized in registers (the cuBLASLt GEMM converts quantized weights to
// bf16 in memory first). Layouts: f16, bf16 (n_in a multiple of 8), q8_0, q4_0, q4_1, q4_k.
inline constexpr int kMatvecBatchMaxRows = 8;
bool matvec_batch_supported(const DeviceWeight& w);
Status matvec_batch(const DeviceWeight& w, const uint16_t* x, int64_t n_rows, float* y,
                    cudaStream_t stream);

// The fast path for quantized layouts (q8_0, q4_0, q4_1, q4_k): x quantized once to int16 per
// 32-element block (quantize_activation; one x serves every matvec that reads it, e.g. q/k/v or
// gate/up), then integer dot products (dp2a) against the weight quants. The int16 rounding of x
// is the only error: relative ~1.5e-5 on evenly spread activations, a few times more when a
// block holds an outlier (the f32 matvec above is the exact baseline).
struct QuantizedActivation {
  int16_t* q = nullptr;    // [n]       round(x / scale)
  float* scale = nullptr;  // [n / 32]  absmax / 32767 per block
  float* sum16 = nullptr;  // [n / 16]  exact sums of x
  int64_t n = 0;
};
size_t quantized_activation_bytes(int64_t n);
// Carves a QuantizedActivation for n elements (a multiple of 32) out of `workspace`.
Result<QuantizedActivation> quantized_activation_in(void* workspace, size_t bytes, int64_t n);
Status quantize_activation(const float* x, const QuantizedActivation& out, cudaStream_t stream);
bool matvec_q16_supported(DType layout);
// The Q8_0 / Q4_0 matvec's kernel is KernelConfig::matvec_stream (ops/params): kAuto
// streams the weights of large matrices through shared memory, kAlways wherever the shape
// allows (rows of c = 32, 64, 128 or 256 chunks: 1024 to 8192 Q4_0 elements, 512 to 4096 Q8_0;
// a multiple of 1024 / c rows), kNever keeps the register kernel.
// y[n_out] = W x (+ add) with x.n == n_in; W's layout must be matvec_q16_supported.
// With `norm`, x holds the int16 blocks a matvec_q16_res_norm left for it and y = W x / rms
// (+ add), rms = sqrt(sum(norm->parts) / norm->n + eps): the RMSNorm between two decode matvecs
// without a kernel of its own.
struct SplitNorm {
  const float* parts = nullptr;  // sums of squares, from matvec_q16_res_norm
  int64_t n = 0;                 // the normed row's length, at most kMaxSplitNorm
  float eps = 0.0f;
};
Status matvec_q16(const DeviceWeight& w, const QuantizedActivation& x, const float* add, float* y,
                  cudaStream_t stream, const SplitNorm* norm = nullptr);
// The producer half of that norm: residual[n_out] += W x, then the int16 blocks of
// residual * norm_w (out, n_out elements; the 1 / rms factor is left to the consumer) and
// parts, the sums of squares of 32 residual rows each: split_norm_parts(n_out) floats (n_out / 32
// and zero padding). n_out % 32 == 0 and at most kMaxSplitNorm; residual, norm_w and parts
// 16-byte aligned; out must not be x's storage.
inline constexpr int64_t kMaxSplitNorm = 4096;
constexpr int64_t split_norm_parts(int64_t n) { return (n / 32 + 3) / 4 * 4; }
Status matvec_q16_res_norm(const DeviceWeight& w, const QuantizedActivation& x, float* residual,
                           const float* norm_w, const QuantizedActivation& out, float* parts,
                           cudaStream_t stream);

// FP8 E4M3 weights and activations (W8A8). The f8_e4m3 layout: e4m3 codes [n_out, n_in] (n_in a
// multiple of 64) in `data` and one f32 scale per row in `scales` (w = code * scale[row]), made by
// upload_weight_f8 (per row: scale = max|w| / 448, codes rounded to nearest even as PyTorch's
// float8_e4m3fn cast) or random_device_weight. Activations are quantized the same way per row,
// at run time (dynamic per-token scales).
Result<DeviceWeight> upload_weight_f8(const Tensor& w, int device, cudaStream_t stream,
                                      DeviceAllocator* allocator = nullptr);
// The same layout from codes already quantized (an FP8 checkpoint): w f8_e4m3 [n_out, n_in] and
// scales f32 [n_out, 1], both CPU, copied as they are; a NaN code is an error naming its row.
Result<DeviceWeight> upload_weight_f8_codes(const Tensor& w, const Tensor& scales, int device,
                                            cudaStream_t stream,
                                            DeviceAllocator* allocator = nullptr);
// q [n_rows, n] and scale [n_rows] from x [n_rows, n] (row stride ld; f32 or bf16), bit for bit
// core/quantize_8bit.h's quantize_rows_f8e4m3.
Status quantize_rows_f8(const void* x, DType x_dtype, int64_t n_rows, int64_t n, int64_t ld,
                        uint8_t* q, float* scale, cudaStream_t stream);
// y[n_rows, n_out] = (xq W^T) * w.scales[out] * x_scale[row] (+ add [n_rows, n_out], which may
// alias y) for 1 <= n_rows <= kMatvecBatchMaxRows rows of quantized activations xq [n_rows,
// n_in] (16-byte aligned): decode through tensor-core MMAs, every weight byte read once.
Status matvec_f8(const DeviceWeight& w, const uint8_t* xq, const float* x_scale, int64_t n_rows,
                 const float* add, float* y, cudaStream_t stream);
// The same from rows of f32 or bf16 activations x [n_rows, w.n_in]: quantize_rows_f8 into the
// workspace q [n_rows, w.n_in] (16-byte aligned) and scale [n_rows], then matvec_f8.
Status matvec_f8_rows(const DeviceWeight& w, const void* x, DType x_dtype, int64_t n_rows,
                      uint8_t* q, float* scale, const float* add, float* y, cudaStream_t stream);

// y[n_tokens, n_out] = (xq W^T) * w.scales[out] * x_scale[token] through cuBLASLt's FP8 GEMM
// (outer-vector scales, f32 accumulation; y f32 or bf16); xq [n_tokens, n_in] e4m3 codes.
// gemm_f8_supported: whether this cuBLASLt runs it on the handle's device (probed once).
Status gemm_f8(CublasLt& lt, const DeviceWeight& w, const uint8_t* xq, const float* x_scale,
               int64_t n_tokens, DType y_dtype, void* y, cudaStream_t stream);
Result<bool> gemm_f8_supported(CublasLt& lt);

// out: bf16 [n_out, ld_out] (ld_out >= n_in, a multiple of 8) = W dequantized.
Status dequantize_to_bf16(const DeviceWeight& w, uint16_t* out, int64_t ld_out,
                          cudaStream_t stream);

// y[n_tokens, n_out] = x[n_tokens, n_in] * W^T + beta * y, through cuBLASLt with f32
// accumulation. W: [n_out, ld_w] and x: [n_tokens, ld_x] both bf16 or both f16 (`ab_dtype`);
// y: f32 or bf16 (`y_dtype`), rows n_out apart. beta 0 ignores y's old contents.
Status gemm_lowp(CublasLt& lt, DType ab_dtype, const void* w, int64_t ld_w, const void* x,
                 int64_t ld_x, int64_t n_tokens, int64_t n_out, int64_t n_in, DType y_dtype,
                 void* y, float beta, cudaStream_t stream);

// The GEMM with a DeviceWeight: x bf16 [n_tokens, n_in]. Non-bf16 weights are dequantized into
// `workspace` (gemm_workspace_bytes(w) bytes; 0 for bf16 weights) first; f8_e4m3 weights (beta
// 0) take x's rows quantized to e4m3 in the workspace and gemm_f8 where gemm_f8_supported.
size_t gemm_workspace_bytes(const DeviceWeight& w);
Status gemm(CublasLt& lt, const DeviceWeight& w, const uint16_t* x, int64_t n_tokens, DType y_dtype,
            void* y, float beta, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// out[i, :] = row ids[i] of `table` (any layout), f32 or bf16: [n_ids, n_in]. ids: device
// int32 [n_ids]; an id out of range gives a row of NaN (validate ids on the host when they come
// from outside; sampled ids are always in range).
Status get_rows(const DeviceWeight& table, const int32_t* ids, int64_t n_ids, DType out_dtype,
                void* out, cudaStream_t stream);
// A decode step's input in one kernel: x = row ids[0] of `table` * embd_scale (f32 [n_in]), then
// out = rms_norm(x) * w (f32 [n_in]) and qa its int16 blocks: bit for bit get_rows, scale and
// rms_norm_q16. n_in a multiple of 32, at most kMaxEmbedNorm.
inline constexpr int64_t kMaxEmbedNorm = 8192;
Status embed_rms_norm_q16(const DeviceWeight& table, const int32_t* ids, float embd_scale,
                          const float* w, float eps, float* x, float* out,
                          const QuantizedActivation& qa, cudaStream_t stream);

// out = x / sqrt(mean(x^2) + eps) * w, rows of n. x: [n_rows, n] f32; w: [n] f32 or nullptr;
// out: [n_rows, n] f32 (may alias x) or bf16.
Status rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                DType out_dtype, void* out, cudaStream_t stream);

// Fused residual add + RMSNorm: residual += x, then out = rms_norm(residual) * w.
// residual, x: [n_rows, n] f32; out: [n_rows, n] f32 or bf16 (may alias x, not residual).
Status add_rms_norm(float* residual, const float* x, const float* w, int64_t n_rows, int64_t n,
                    float eps, DType out_dtype, void* out, cudaStream_t stream);

// RoPE in place on x: token t's [n_heads, head_dim] at x + t * token_stride (f32).
// positions: device int32 [n_tokens]. Same semantics as cpu::rope (angles in double).
Status rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t token_stride,
            const int32_t* positions, const RopeParams& p, cudaStream_t stream);

// out[r, i] = silu(gate[r, i]) * up[r, i]; gate and up rows in_stride floats apart (n for
// separate buffers, 2n for the halves of a fused gate|up projection); out [n_rows, n] f32 or
// bf16, not aliasing the inputs when bf16.
Status swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n, int64_t in_stride,
              DType out_dtype, void* out, cudaStream_t stream);

// out[r, i] = gelu_tanh(gate[r, i]) * up[r, i] (GeGLU, Gemma's MLP), gelu_tanh(g) =
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) as cpu::geglu_tanh; layout as swiglu.
Status geglu_tanh(const float* gate, const float* up, int64_t n_rows, int64_t n, int64_t in_stride,
                  DType out_dtype, void* out, cudaStream_t stream);

// Softmax of each row of x [n_rows, n] f32, in place.
Status softmax(float* x, int64_t n_rows, int64_t n, cudaStream_t stream);

// out[i] = bf16(x[i]), round to nearest even. x: [n] f32; out: [n] bf16.
Status convert_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
// out[i] = f32(x[i]) (exact). x: [n] bf16; out: [n] f32.
Status convert_bf16_to_f32(const uint16_t* x, int64_t n, float* out, cudaStream_t stream);

// The KV cache of one layer: K and V [n_rows, n_head_kv, head_dim], rows kv_row_stride elements
// apart (>= n_head_kv * head_dim; rows 16-byte aligned), f32 or bf16. Position p lives in row p
// (n_rows = n_ctx), or in row p % ring_rows for a ring cache (ring_rows > 0: a sliding-window
// layer keeps only window + max_batch - 1 rows; attention then needs ring_rows >= window +
// n_tokens - 1, so that no row a query sees is overwritten by a newer token of the batch).
struct KvLayout {
  DType dtype = DType::kBF16;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t kv_row_stride = 0;
  int64_t ring_rows = 0;  // 0: position p at row p; > 0: at row p % ring_rows
  // A paged cache (the engine core's arena; decode attention only, no ring): position p at row
  // block_table[p / block_size] * block_size + p % block_size, block_table device int32 with an
  // entry for every block the step reads; paged_rows, the cache's rows, bounds the offsets.
  const int32_t* block_table = nullptr;
  int64_t block_size = 0;
  int64_t paged_rows = 0;
};

// Writes k, v [n_tokens, n_head_kv * head_dim] f32 (rows src_stride floats apart) into the cache
// rows of positions [pos0, pos0 + n_tokens) (n_tokens <= ring_rows for a ring). pos0_device
// (device int32, optional) overrides pos0 at run time, so a decode step captured in a CUDA graph
// writes each replay's position; pos0 is then ignored.
Status kv_store(const float* k, const float* v, int64_t n_tokens, int64_t src_stride,
                const KvLayout& kv, void* k_cache, void* v_cache, int64_t pos0, cudaStream_t stream,
                const int32_t* pos0_device = nullptr);

// RoPE and kv_store in one kernel, for a fused qkv buffer: token t's row at qkv + t * token_stride
// holds [q: n_head heads | k: kv.n_head_kv heads | v: kv.n_head_kv heads] of kv.head_dim. q and
// k are rotated in place (as rope over n_head + n_head_kv heads), and the rotated k and the v
// are written to the cache rows of positions[t] (device int32; the row is positions[t] %
// ring_rows for a ring), so a captured decode step stores at each replay's position. Same
// results as rope followed by kv_store.
Status rope_kv_store(float* qkv, int64_t n_tokens, int64_t n_head, int64_t token_stride,
                     const int32_t* positions, const RopeParams& p, const KvLayout& kv,
                     void* k_cache, void* v_cache, cudaStream_t stream);

// Causal GQA attention over the positions [0, n_kv); the n_tokens new tokens are the last
// n_tokens positions (token t at p = n_kv - n_tokens + t attends to positions <= p, and only to
// positions > p - window when window > 0, as cpu::AttentionShape::window); query head h reads kv
// head h / (n_head / n_head_kv). head_dim 64, 128 or 256.
struct AttentionParams {
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
  int64_t n_head = 0;
  KvLayout kv;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
  int64_t window = 0;  // 0: full causal; > 0: position p sees (p - window, p]
  // Decode only (graph replay): the real n_kv read from this device int32 at run time, clamped
  // to [1, n_kv]; n_kv is then the upper bound that sizes the grid and the workspace.
  const int32_t* n_kv_device = nullptr;
};

// Decode (n_tokens == 1), flash-decoding: q [n_head, head_dim] f32 -> out [n_head, head_dim]
// f32. f32 arithmetic throughout (an f32 cache gives ~1e-6 relative error). The workspace for
// n_kv = n_ctx serves every smaller n_kv (with n_kv_device: the workspace of the upper bound).
// The kernels index in 32 bits: n_kv at most kMaxDecodeKv, at most 32767 heads, and a layer's
// cache (rows x kv_row_stride) under 2^31 elements (checked; create_cache checks it up front).
inline constexpr int64_t kMaxDecodeKv = int64_t{1} << 30;
bool decode_kv_fits(int64_t rows, int64_t kv_row_stride);
size_t attention_decode_workspace_bytes(const AttentionParams& p);
Status attention_decode(const AttentionParams& p, const float* q, const void* k_cache,
                        const void* v_cache, float* out, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

// The decode step's RoPE, KV store and attention in one kernel (the splits are merged by the last
// block of each head group, so no second kernel either). qkv: the raw f32 row of the new token,
// [n_head q | n_head_kv k | n_head_kv v] heads of head_dim, at position n_kv - 1 (n_kv from
// p.n_kv_device when set, as attention_decode); q and k are rotated by `rope` exactly as
// rope_kv_store does, k and v go to the cache row of that position (bf16 or f32, as
// attention_decode_rope_supports), and the attention output to out [n_head, head_dim] f32 and,
// when out_q16 is not null (n_head * head_dim elements), to its int16 blocks too. counters:
// attention_decode_counters(p) unsigned ints, zero before the first call; each call leaves them
// zero. workspace as attention_decode.
int64_t attention_decode_counters(const AttentionParams& p);
// attention_decode_rope's attention is KernelConfig::attention_mma: on the tensor cores (the
// default for a bf16 cache of head_dim 64 or 128; q and the probabilities as bf16 pairs hi + lo,
// about 2^-16 relative) or, off, the scalar f32 kernel.
// The caches attention_decode_rope takes: bf16, and f32 of head_dim 64 or 128 (the scalar
// kernel; the others run rope_kv_store and attention_decode).
bool attention_decode_rope_supports(const KvLayout& kv);
Status attention_decode_rope(const AttentionParams& p, const RopeParams& rope, const float* qkv,
                             void* k_cache, void* v_cache, float* out,
                             const QuantizedActivation* out_q16, unsigned* counters,
                             void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Prefill (any n_tokens >= 1), FlashAttention-2 tiles on the tensor cores: q [n_tokens, n_head,
// head_dim] f32 (16-byte aligned) -> out [n_tokens, n_head, head_dim] f32 or bf16. Q, K, V and
// the probabilities are rounded to bf16 (f32 accumulation): bf16-level error for either cache
// dtype. An f32 cache is converted into the workspace first (0 bytes for bf16). n_kv_device
// must be null (prefill is not replayed from a graph).
size_t attention_prefill_workspace_bytes(const AttentionParams& p);
Status attention_prefill(const AttentionParams& p, const float* q, const void* k_cache,
                         const void* v_cache, DType out_dtype, void* out, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream);

// Paged attention for a serving batch (many sequences, each with its new tokens last among its
// kv_len positions; a decode row, a prefill chunk attending to its cached prefix, or a whole
// prompt), over K/V arenas bf16 [n_blocks, block_size, n_head_kv * head_dim] found through each
// sequence's block table. Causal (with an optional sliding window) or bidirectional. q: f32
// token rows q_stride floats apart, heads first (the raw qkv rows after RoPE); out: bf16 rows
// out_stride apart. Tensor cores: q, K, V and the probabilities rounded to bf16, f32
// accumulation (as attention_prefill). head_dim 64, 128 or 256; at most 64 query heads per KV
// head. The device arrays (query_start [n_seq + 1], kv_len [n_seq], tables [n_seq,
// table_stride], work [n_work, 2], 8-byte aligned) come from the host each step; block ids are not
// checked on the device (the caller checks them against the arena).
struct PagedAttentionParams {
  int64_t n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t q_stride = 0, out_stride = 0;
  int32_t block_size = 16, table_stride = 0;
  int64_t window = 0;  // > 0: position p sees (p - window, p] (causal only)
  bool causal = true;
  float scale = 1.0f;
  int32_t n_work = 0, n_splits = 1;
  const int32_t* work = nullptr;
  const int32_t* query_start = nullptr;
  const int32_t* kv_len = nullptr;
  const int32_t* tables = nullptr;
  // The arena's elements: bf16 (the tensor-core kernel, splits as asked) or f32 (scalar f32 on
  // the CUDA cores, one split: the precision baseline).
  DType kv_dtype = DType::kBF16;
  // Query rows a work item holds (its tokens x G): 64, or 128 (paged_attention_rows); the
  // work list must be made with the same.
  int32_t rows = 64;
};
// The work items of a batch, longest first: {sequence, first token} pairs, one per
// paged_attention_rows(...) tokens of a sequence. Host-side.
int64_t paged_attention_tokens_per_item(int64_t n_head, int64_t n_head_kv, int32_t rows = 64);
void paged_attention_work(std::span<const int32_t> query_start, std::span<const int32_t> kv_len,
                          int64_t n_head, int64_t n_head_kv, std::vector<int32_t>& work,
                          int32_t rows = 64);
// The rows a batch's work items take: 128 where the kernel has them (bf16, head dims 64 and 128,
// the default tile) and some sequence brings at least 128 / G new tokens (a prompt chunk that
// fills a 128-row block), else 64.
int32_t paged_attention_rows(std::span<const int32_t> query_start, int64_t n_head,
                             int64_t n_head_kv, int64_t head_dim, DType kv_dtype);
// Splits of each item's KV tiles so that the grid fills the device (1 when it already does),
// at most max_splits.
int32_t paged_attention_splits(int64_t n_work, int64_t n_head_kv, int64_t max_kv_len,
                               int64_t head_dim, int32_t max_splits);
// The KV tile and pipeline of head dims 64 and 128, process-wide: 0 (the default) 64 positions
// in 2 stages, 1: 32 in 3, 2: 32 in 4.
void set_paged_attention_config(int c);
size_t paged_attention_workspace_bytes(int64_t n_tokens, int64_t n_head, int64_t head_dim,
                                       int32_t n_splits);
Status paged_attention(const PagedAttentionParams& p, const void* k_cache, const void* v_cache,
                       const float* q, uint16_t* out, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream);
// Keys and values of n_tokens rows (f32, src_stride floats apart, kv_dim each) into arena rows
// slots[t] (device int32) of K and V arenas with rows kv_dim apart, f32 or bf16; a row whose
// slot is negative (a padding row of a batch graph) is not stored.
Status kv_store_slots(const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
                      int64_t src_stride, DType cache_dtype, void* k_cache, void* v_cache,
                      const int32_t* slots, cudaStream_t stream);

// Greedy: out_id[0] = argmax(logits[n]) (lowest id on ties; NaN never wins). Device int32.
Status argmax(const float* logits, int64_t n, int32_t* out_id, cudaStream_t stream);

// The sampler chain of ops/cpu/sampler.h after its penalties, on the device. temperature <= 0:
// argmax. Else top_k must be in [1, 1024] (top_k 0 or larger k: use the host Sampler), then
// top_p (1: off) and min_p (0: off), and the draw with the uniform [0, 1) number at the device
// pointer `uniform`.
struct DeviceSampling {
  float temperature = 0.7f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
};
inline constexpr int32_t kMaxDeviceTopK = 1024;
Status sample(const float* logits, int64_t n_vocab, const DeviceSampling& s, const float* uniform,
              int32_t* out_id, cudaStream_t stream);

// A decode row's sampling on the device: the penalties of ops/cpu/sampler.h (repetition and
// presence, over the last last_n ids of its history, each distinct id once), then argmax or the
// top-k chain with the row's uniform draw (the same draws as the host Sampler's, in the same
// order).
struct DecodeSampling {
  DeviceSampling chain;  // temperature <= 0: argmax
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;  // not on the device yet: unsupported unless 0
  int32_t last_n = 0;              // 0..kMaxDecodeHistory
};
inline constexpr int32_t kMaxDecodeHistory = 1024;
// OK when the device takes these settings (else kUnsupported or kInvalidArgument, naming the
// setting: top_k 0 or over kMaxDeviceTopK with temperature > 0, last_n over kMaxDecodeHistory,
// a frequency penalty).
Status decode_sampling_supported(const DecodeSampling& s, int64_t n_vocab);

// The ends of a one-row decode step queued ahead, captured in its graph (decode_feed.cu): pull
// copies n words from pinned host memory src + *parity * stride to dst; feed writes the sampled
// id ids[0] to *token, to hist[*feed_at] (when >= 0) and to pinned host_out[*parity], then flips
// *parity.
Status decode_pull(const int32_t* src, int64_t stride, int64_t n, int32_t* dst,
                   const int32_t* parity, cudaStream_t stream);
Status decode_feed(const int32_t* ids, int32_t* token, int32_t* hist, const int32_t* feed_at,
                   int32_t* host_out, int32_t* parity, cudaStream_t stream);

// Rows of a batch sampled on the device, each with its own settings: the penalties of
// ops/cpu/sampler.h over its history window, then the chain with its uniform draw (the same
// draws as the host Sampler's). `args` and `hist` live on the device; out[r] is the id or -1
// when row r held NaN or +inf or no finite value.
using RowSample = kern::RowSampleArgs;
// The row's settings for the device (unsupported: settings it does not take, as
// decode_sampling_supported).
Result<RowSample> row_sample(const DecodeSampling& s, int64_t n_vocab, int32_t hist_off,
                             int32_t hist_len, float uniform);
Status sample_rows(float* logits, int64_t n_rows, int64_t n_vocab, const RowSample* args,
                   const int32_t* hist, int32_t* out, cudaStream_t stream);
// Structured output: the logits of the tokens a row may not take set to -inf, from its bitmask
// of (n_vocab + 31) / 32 words on the device (bit t % 32 of word t / 32 for token t), before
// sample_rows.
Status mask_tokens(float* logits, int64_t n_rows, int64_t n_vocab, const uint32_t* bits,
                   cudaStream_t stream);

// Programmatic dependent launch (sm_90+): the decode-path kernels (matvec, norms, rope, KV
// store, attention decode, quantization, GLU, get_rows) are launched so that each one's launch
// and prologue (a matvec's first weight loads) overlap the previous kernel's tail, in streams and
// in captured CUDA graphs. On by default; KernelConfig::pdl = false turns it off (the
// baseline). Graphs keep the setting they were captured with.
bool programmatic_dependent_launch();

// The kernels' switches (strategies.kernels.cuda), process-wide: every CUDA runner applies its
// recipe's at creation, before it captures graphs; the last one applied holds (one recipe a
// process at a time, as rinfer's commands run them). kernel_config() is what holds now.
void apply_kernel_config(const KernelConfig& c);
KernelConfig kernel_config();

// Random device data for tests and benchmarks (never zeros, deterministic per seed): n values
// of dtype f32, f16 or bf16 uniform in [lo, hi).
Status fill_random(void* p, DType t, int64_t n, float lo, float hi, uint64_t seed,
                   cudaStream_t stream);
// dst = src with a 16-byte vectorized copy kernel (bytes and both pointers 16-byte aligned):
// the benchmark's bandwidth reference, since a device-to-device cudaMemcpy captured in a graph
// may run on the copy engines, which are slower than the SMs.
Status copy_kernel(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// A random weight built on the device in layout `t` (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k):
// uniform [-1, 1) values, or random quants with f16 scales in [0.002, 0.03) (Q8_0: a 16th of
// that, so that its values span what Q4's do).
Result<DeviceWeight> random_device_weight(DType t, int64_t n_out, int64_t n_in, uint64_t seed,
                                          int device, cudaStream_t stream,
                                          DeviceAllocator* allocator = nullptr);

}  // namespace rinfer::cuda
