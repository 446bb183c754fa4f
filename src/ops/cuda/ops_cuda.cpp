// The Status API of ops_cuda.h: argument checks, then the launchers of launch.h.
#include "ops/cuda/ops_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/launch.h"

namespace rinfer::cuda {

namespace {

Status launched(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return ok_status();
  return cuda_status(err, op);
}

// allow_f8: the op reads f8_e4m3 weights (the decode matvecs); the others name the layout.
Result<kern::WeightView> view_of(const DeviceWeight& w, const char* op, bool allow_f8 = false) {
  kern::WeightView v;
  if (w.dtype == DType::kF8E4M3 && !allow_f8) {
    return invalid_argument(
        "{}: weight layout f8_e4m3 is read by matvec, matvec_rms_norm and "
        "matvec_f8 only",
        op);
  }
  switch (w.dtype) {
    case DType::kF32: v.format = kern::kWF32; break;
    case DType::kF16: v.format = kern::kWF16; break;
    case DType::kBF16: v.format = kern::kWBF16; break;
    case DType::kQ8_0: v.format = kern::kWQ8_0; break;
    case DType::kQ4_0: v.format = kern::kWQ4_0; break;
    case DType::kQ4_1: v.format = kern::kWQ4_1; break;
    case DType::kQ4_K: v.format = kern::kWQ4_K; break;
    case DType::kF8E4M3: v.format = kern::kWF8; break;
    default:
      return invalid_argument("{}: weight layout {} is not a device layout", op,
                              dtype_name(w.dtype));
  }
  if (w.data == nullptr || w.n_out <= 0 || w.n_in <= 0) {
    return invalid_argument("{}: empty or unloaded weight", op);
  }
  v.n_out = w.n_out;
  v.n_in = w.n_in;
  v.ld = w.ld;
  v.data = w.data;
  v.scales = w.scales;
  return v;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status check_act_dtype(DType t, const char* op) {
  if (t == DType::kF32 || t == DType::kBF16) return ok_status();
  return invalid_argument("{}: output dtype must be f32 or bf16, not {}", op, dtype_name(t));
}

Status check_rows(int64_t n_rows, int64_t n, const void* a, const void* b, const char* op) {
  if (n_rows < 0 || n <= 0) return invalid_argument("{}: bad shape [{}, {}]", op, n_rows, n);
  if (n_rows > 0 && (a == nullptr || b == nullptr)) {
    return invalid_argument("{}: null pointer", op);
  }
  if (n_rows > INT32_MAX) return invalid_argument("{}: {} rows is too many", op, n_rows);
  return ok_status();
}

}  // namespace

Status matvec(const DeviceWeight& w, const float* x, const float* add, float* y,
              cudaStream_t stream) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(w, "matvec", true));
  if (x == nullptr || y == nullptr) return invalid_argument("matvec: null pointer");
  if (!aligned16(x)) return invalid_argument("matvec: x must be 16-byte aligned");
  if (x == y) return invalid_argument("matvec: x and y must not alias");
  return launched(kern::launch_matvec(v, x, add, y, stream), "matvec launch");
}

bool matvec_batch_supported(const DeviceWeight& w) {
  switch (w.dtype) {
    case DType::kF16:
    case DType::kBF16: return w.n_in % 8 == 0;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K: return true;
    default: return false;
  }
}

Status matvec_batch(const DeviceWeight& w, const uint16_t* x, int64_t n_rows, float* y,
                    cudaStream_t stream) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(w, "matvec_batch"));
  if (!matvec_batch_supported(w)) {
    return invalid_argument("matvec_batch: layout {} with {} columns (f16 and bf16 with a multiple "
                            "of 8 columns, q8_0, q4_0, q4_1, q4_k)",
                            dtype_name(w.dtype), w.n_in);
  }
  if (n_rows < 1 || n_rows > kMatvecBatchMaxRows) {
    return invalid_argument("matvec_batch: {} rows (1 to {})", n_rows, kMatvecBatchMaxRows);
  }
  if (x == nullptr || y == nullptr) return invalid_argument("matvec_batch: null pointer");
  if (!aligned16(x)) return invalid_argument("matvec_batch: x must be 16-byte aligned");
  return launched(kern::launch_matvec_batch(v, x, static_cast<int>(n_rows), y, stream),
                  "matvec_batch launch");
}

bool matvec_rms_norm_supported(DType layout) {
  return layout == DType::kBF16 || layout == DType::kF16 || layout == DType::kF8E4M3;
}

Status matvec_rms_norm(const DeviceWeight& w, const float* x, const float* norm_w, float eps,
                       float* y, cudaStream_t stream) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(w, "matvec_rms_norm", true));
  if (!matvec_rms_norm_supported(w.dtype)) {
    return invalid_argument("matvec_rms_norm: layout {} (only f16, bf16 and f8_e4m3)",
                            dtype_name(w.dtype));
  }
  if (x == nullptr || y == nullptr || norm_w == nullptr) {
    return invalid_argument("matvec_rms_norm: null pointer");
  }
  if (!aligned16(x) || !aligned16(norm_w)) {
    return invalid_argument("matvec_rms_norm: x and the norm weights must be 16-byte aligned");
  }
  if (x == y) return invalid_argument("matvec_rms_norm: x and y must not alias");
  const kern::RowNorm nw{norm_w, w.n_in, eps};
  return launched(kern::launch_matvec_rms_norm(v, x, nw, y, stream), "matvec_rms_norm launch");
}

size_t quantized_activation_bytes(int64_t n) {
  if (n <= 0) return 0;
  const auto un = static_cast<size_t>(n);
  auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  return up(2 * un) + up(un / 32 * 4) + up(un / 16 * 4);
}

Result<QuantizedActivation> quantized_activation_in(void* workspace, size_t bytes, int64_t n) {
  if (n <= 0 || n % 32 != 0) {
    return invalid_argument("quantized activation: n {} must be a positive multiple of 32", n);
  }
  const size_t need = quantized_activation_bytes(n);
  if (workspace == nullptr || bytes < need || reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return invalid_argument("quantized activation: needs {} bytes, 256-byte aligned; got {}", need,
                            bytes);
  }
  const auto un = static_cast<size_t>(n);
  auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  auto* base = static_cast<uint8_t*>(workspace);
  QuantizedActivation q;
  q.q = reinterpret_cast<int16_t*>(base);
  q.scale = reinterpret_cast<float*>(base + up(2 * un));
  q.sum16 = reinterpret_cast<float*>(base + up(2 * un) + up(un / 32 * 4));
  q.n = n;
  return q;
}

Status quantize_activation(const float* x, const QuantizedActivation& out, cudaStream_t stream) {
  if (x == nullptr || out.q == nullptr || out.scale == nullptr || out.sum16 == nullptr ||
      out.n <= 0 || out.n % 32 != 0) {
    return invalid_argument("quantize_activation: bad arguments (n {})", out.n);
  }
  return launched(kern::launch_quantize_q16(x, out.n, out.q, out.scale, out.sum16, stream),
                  "quantize_activation launch");
}

bool matvec_q16_supported(DType layout) {
  return layout == DType::kQ8_0 || layout == DType::kQ4_0 || layout == DType::kQ4_1 ||
         layout == DType::kQ4_K;
}

namespace {

Result<kern::WeightView> q16_view_of(const DeviceWeight& w, const QuantizedActivation& x,
                                     const char* op) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(w, op));
  if (!matvec_q16_supported(w.dtype)) {
    return invalid_argument("{}: layout {} has no integer path (use matvec)", op,
                            dtype_name(w.dtype));
  }
  if (x.n != w.n_in || x.q == nullptr) {
    return invalid_argument("{}: activation of {} elements for n_in {}", op, x.n, w.n_in);
  }
  return v;
}

}  // namespace

Status matvec_q16(const DeviceWeight& w, const QuantizedActivation& x, const float* add, float* y,
                  cudaStream_t stream, const SplitNorm* norm) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, q16_view_of(w, x, "matvec_q16"));
  if (y == nullptr) return invalid_argument("matvec_q16: null output");
  kern::RmsIn rin;
  if (norm != nullptr) {
    if (norm->n != w.n_in || norm->n % 32 != 0 || norm->n > kMaxSplitNorm) {
      return invalid_argument(
          "matvec_q16: the split norm's length {} must be n_in {}, a multiple of 32 up to {}",
          norm->n, w.n_in, kMaxSplitNorm);
    }
    if (norm->parts == nullptr || !aligned16(norm->parts)) {
      return invalid_argument("matvec_q16: the split norm's parts must be 16-byte aligned");
    }
    rin = {norm->parts, static_cast<int>(split_norm_parts(norm->n)), norm->n, norm->eps};
  }
  const kern::Q16View xv{x.q, x.scale, x.sum16};
  return launched(kern::launch_matvec_q16(v, xv, add, y, stream, rin), "matvec_q16 launch");
}

Status matvec_q16_res_norm(const DeviceWeight& w, const QuantizedActivation& x, float* residual,
                           const float* norm_w, const QuantizedActivation& out, float* parts,
                           cudaStream_t stream) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, q16_view_of(w, x, "matvec_q16_res_norm"));
  if (residual == nullptr || norm_w == nullptr || parts == nullptr) {
    return invalid_argument("matvec_q16_res_norm: null residual, norm weights or parts");
  }
  if (w.n_out % 32 != 0 || w.n_out > kMaxSplitNorm || out.n != w.n_out || out.q == nullptr) {
    return invalid_argument(
        "matvec_q16_res_norm: n_out {} must be a multiple of 32 up to {} and equal the output "
        "activation's {}",
        w.n_out, kMaxSplitNorm, out.n);
  }
  if (!aligned16(residual) || !aligned16(norm_w) || !aligned16(parts)) {
    return invalid_argument(
        "matvec_q16_res_norm: residual, norm weights and parts must be 16-byte aligned");
  }
  if (out.q == x.q) return invalid_argument("matvec_q16_res_norm: out is x's storage");
  const kern::Q16View xv{x.q, x.scale, x.sum16};
  const kern::ResNormOut rn{residual, norm_w, out.q, out.scale, out.sum16, parts};
  return launched(kern::launch_matvec_q16_res_norm(v, xv, rn, stream),
                  "matvec_q16_res_norm launch");
}

Status dequantize_to_bf16(const DeviceWeight& w, uint16_t* out, int64_t ld_out,
                          cudaStream_t stream) {
  if (w.dtype == DType::kF8E4M3) {
    if (w.data == nullptr || w.scales == nullptr || w.n_in % 64 != 0 || out == nullptr ||
        ld_out < w.n_in || ld_out % 8 != 0 || !aligned16(out)) {
      return invalid_argument("dequantize_to_bf16: f8_e4m3 [{}, {}] into rows of {} (aligned)",
                              w.n_out, w.n_in, ld_out);
    }
    return launched(kern::launch_dequantize_f8_bf16(static_cast<const uint8_t*>(w.data),
                                                    static_cast<const float*>(w.scales), w.n_out,
                                                    w.n_in, out, ld_out, stream),
                    "dequantize launch");
  }
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(w, "dequantize_to_bf16"));
  if (out == nullptr) return invalid_argument("dequantize_to_bf16: null output");
  if (ld_out < w.n_in || ld_out % 8 != 0 || !aligned16(out)) {
    return invalid_argument(
        "dequantize_to_bf16: ld_out {} must be >= n_in {} and a multiple of "
        "8, out 16-byte aligned",
        ld_out, w.n_in);
  }
  return launched(kern::launch_dequant_bf16(v, out, ld_out, stream), "dequantize launch");
}

Status get_rows(const DeviceWeight& table, const int32_t* ids, int64_t n_ids, DType out_dtype,
                void* out, cudaStream_t stream) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(table, "get_rows"));
  RINFER_RETURN_IF_ERROR(check_act_dtype(out_dtype, "get_rows"));
  RINFER_RETURN_IF_ERROR(check_rows(n_ids, table.n_in, ids, out, "get_rows"));
  return launched(kern::launch_get_rows(v, ids, n_ids, out_dtype == DType::kBF16, out, stream),
                  "get_rows launch");
}

Status embed_rms_norm_q16(const DeviceWeight& table, const int32_t* ids, float embd_scale,
                          const float* w, float eps, float* x, float* out,
                          const QuantizedActivation& qa, cudaStream_t stream) {
  RINFER_ASSIGN_OR_RETURN(kern::WeightView v, view_of(table, "embed_rms_norm_q16"));
  const int64_t n = table.n_in;
  if (n <= 0 || n % 32 != 0 || n > kMaxEmbedNorm) {
    return invalid_argument("embed_rms_norm_q16: rows of {} must be a multiple of 32, at most {}",
                            n, kMaxEmbedNorm);
  }
  if (qa.n != n || qa.q == nullptr || qa.scale == nullptr || qa.sum16 == nullptr) {
    return invalid_argument("embed_rms_norm_q16: the quantized activation holds {}, not {}", qa.n,
                            n);
  }
  if (ids == nullptr || w == nullptr || x == nullptr || out == nullptr) {
    return invalid_argument("embed_rms_norm_q16: null pointer");
  }
  return launched(kern::launch_embed_norm_q16(v, ids, embd_scale, w, eps, x, out, qa.q, qa.scale,
                                              qa.sum16, stream),
                  "embed_rms_norm_q16 launch");
}

Status rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                DType out_dtype, void* out, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_act_dtype(out_dtype, "rms_norm"));
  RINFER_RETURN_IF_ERROR(check_rows(n_rows, n, x, out, "rms_norm"));
  if (out_dtype == DType::kBF16 && out == x) {
    return invalid_argument("rms_norm: a bf16 output cannot alias x");
  }
  return launched(
      kern::launch_rms_norm(x, w, nullptr, n_rows, n, eps, out_dtype == DType::kBF16, out, stream),
      "rms_norm launch");
}

Status add_rms_norm(float* residual, const float* x, const float* w, int64_t n_rows, int64_t n,
                    float eps, DType out_dtype, void* out, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_act_dtype(out_dtype, "add_rms_norm"));
  RINFER_RETURN_IF_ERROR(check_rows(n_rows, n, x, out, "add_rms_norm"));
  if (residual == nullptr) return invalid_argument("add_rms_norm: null residual");
  if (out == residual || x == residual) {
    return invalid_argument("add_rms_norm: out and x must not alias the residual");
  }
  return launched(
      kern::launch_rms_norm(x, w, residual, n_rows, n, eps, out_dtype == DType::kBF16, out, stream),
      "add_rms_norm launch");
}

namespace {

// freq_base^(-2j / n_rot) in double for the pairs j < n_rot / 2 (the CPU reference's expression).
void rope_inv_freq(const RopeParams& p, double* out) {
  for (int64_t j = 0; j < p.n_rot / 2 && j < kern::kMaxRopePairs; ++j) {
    out[j] = std::pow(static_cast<double>(p.freq_base),
                      -2.0 * static_cast<double>(j) / static_cast<double>(p.n_rot));
  }
}

Result<kern::RopeArgs> rope_args(const RopeParams& p, int64_t n_tokens, int64_t n_heads,
                                 int64_t head_dim, int64_t token_stride, const char* op) {
  if (p.n_rot / 2 > kern::kMaxRopePairs) {
    return unsupported("{}: n_rot {} (at most {})", op, p.n_rot, 2 * kern::kMaxRopePairs);
  }
  kern::RopeArgs a{};
  a.n_tokens = n_tokens;
  a.n_heads = n_heads;
  a.head_dim = head_dim;
  a.token_stride = token_stride;
  a.n_rot = p.n_rot;
  a.freq_scale = static_cast<double>(p.freq_scale);
  a.neox = p.mode == RopeMode::kNeox;
  rope_inv_freq(p, a.inv_freq);
  return a;
}

}  // namespace

Status rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t token_stride,
            const int32_t* positions, const RopeParams& p, cudaStream_t stream) {
  if (n_tokens < 0 || n_heads <= 0 || head_dim <= 0) {
    return invalid_argument("rope: bad shape [{}, {}, {}]", n_tokens, n_heads, head_dim);
  }
  if (p.n_rot <= 0 || p.n_rot > head_dim || p.n_rot % 2 != 0) {
    return invalid_argument("rope: n_rot {} must be even and in (0, head_dim {}]", p.n_rot,
                            head_dim);
  }
  if (token_stride < n_heads * head_dim) {
    return invalid_argument("rope: token_stride {} < n_heads * head_dim", token_stride);
  }
  if (n_tokens > 0 && (x == nullptr || positions == nullptr)) {
    return invalid_argument("rope: null pointer");
  }
  RINFER_ASSIGN_OR_RETURN(const kern::RopeArgs a,
                          rope_args(p, n_tokens, n_heads, head_dim, token_stride, "rope"));
  return launched(kern::launch_rope(x, positions, a, stream), "rope launch");
}

Status swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n, int64_t in_stride,
              DType out_dtype, void* out, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_act_dtype(out_dtype, "swiglu"));
  RINFER_RETURN_IF_ERROR(check_rows(n_rows, n, gate, out, "swiglu"));
  if (up == nullptr) return invalid_argument("swiglu: null pointer");
  if (in_stride < n) return invalid_argument("swiglu: in_stride {} < n {}", in_stride, n);
  return launched(
      kern::launch_swiglu(gate, up, n_rows, n, in_stride, out_dtype == DType::kBF16, out, stream),
      "swiglu launch");
}

Status geglu_tanh(const float* gate, const float* up, int64_t n_rows, int64_t n, int64_t in_stride,
                  DType out_dtype, void* out, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_act_dtype(out_dtype, "geglu_tanh"));
  RINFER_RETURN_IF_ERROR(check_rows(n_rows, n, gate, out, "geglu_tanh"));
  if (up == nullptr) return invalid_argument("geglu_tanh: null pointer");
  if (in_stride < n) return invalid_argument("geglu_tanh: in_stride {} < n {}", in_stride, n);
  return launched(kern::launch_geglu_tanh(gate, up, n_rows, n, in_stride, out_dtype == DType::kBF16,
                                          out, stream),
                  "geglu_tanh launch");
}

Status softmax(float* x, int64_t n_rows, int64_t n, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_rows(n_rows, n, x, x, "softmax"));
  return launched(kern::launch_softmax(x, n_rows, n, stream), "softmax launch");
}

Status convert_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n < 0) return invalid_argument("convert_f32_to_bf16: n {}", n);
  if (n > 0 && (x == nullptr || out == nullptr)) {
    return invalid_argument("convert_f32_to_bf16: null pointer");
  }
  return launched(kern::launch_f32_to_bf16(x, n, out, stream), "convert launch");
}

Status convert_bf16_to_f32(const uint16_t* x, int64_t n, float* out, cudaStream_t stream) {
  if (n < 0) return invalid_argument("convert_bf16_to_f32: n {}", n);
  if (n > 0 && (x == nullptr || out == nullptr)) {
    return invalid_argument("convert_bf16_to_f32: null pointer");
  }
  return launched(kern::launch_bf16_to_f32(x, n, out, stream), "convert launch");
}

namespace {

Status check_kv(const KvLayout& kv, const void* k, const void* v, const char* op) {
  if (kv.dtype != DType::kF32 && kv.dtype != DType::kBF16) {
    return invalid_argument("{}: KV cache dtype must be f32 or bf16, not {}", op,
                            dtype_name(kv.dtype));
  }
  if (kv.n_head_kv <= 0 || kv.head_dim <= 0 || kv.kv_row_stride < kv.n_head_kv * kv.head_dim) {
    return invalid_argument("{}: bad KV layout (n_head_kv {}, head_dim {}, row stride {})", op,
                            kv.n_head_kv, kv.head_dim, kv.kv_row_stride);
  }
  if (kv.ring_rows < 0 || kv.ring_rows > INT32_MAX / 2) {
    return invalid_argument("{}: ring_rows {} out of range", op, kv.ring_rows);
  }
  if (k == nullptr || v == nullptr) return invalid_argument("{}: null KV cache", op);
  if (kv.block_table != nullptr || kv.block_size != 0) {
    return invalid_argument("{}: a paged KV layout is for the decode attention only", op);
  }
  return ok_status();
}

// check_kv for the decode kernels, which also take a paged layout (KvLayout::block_table).
Status check_decode_kv(const KvLayout& kv, const void* k, const void* v, const char* op) {
  KvLayout flat = kv;
  flat.block_table = nullptr;
  flat.block_size = 0;
  RINFER_RETURN_IF_ERROR(check_kv(flat, k, v, op));
  if (kv.block_table == nullptr && kv.block_size == 0) return ok_status();
  if (kv.block_table == nullptr || kv.block_size <= 0 || kv.block_size > 65536 ||
      kv.ring_rows != 0 || kv.paged_rows < kv.block_size) {
    return invalid_argument(
        "{}: bad paged KV layout (block table {}, block size {}, {} rows, ring {})", op,
        kv.block_table == nullptr ? "null" : "set", kv.block_size, kv.paged_rows, kv.ring_rows);
  }
  return ok_status();
}

Result<kern::AttnArgs> attn_args(const AttentionParams& p, const void* q, const void* k,
                                 const void* v, const void* out, const char* op) {
  RINFER_RETURN_IF_ERROR(p.n_tokens == 1 ? check_decode_kv(p.kv, k, v, op)
                                         : check_kv(p.kv, k, v, op));
  const int64_t d = p.kv.head_dim;
  if (d != 64 && d != 128 && d != 256)
    return unsupported("{}: head_dim {} (64, 128 or 256)", op, d);
  if (p.n_tokens <= 0 || p.n_kv < p.n_tokens) {
    return invalid_argument("{}: n_tokens {} must be in [1, n_kv {}]", op, p.n_tokens, p.n_kv);
  }
  if (p.n_head <= 0 || p.n_head % p.kv.n_head_kv != 0) {
    return invalid_argument("{}: n_head {} is not a multiple of n_head_kv {}", op, p.n_head,
                            p.kv.n_head_kv);
  }
  if (p.window < 0) return invalid_argument("{}: negative window {}", op, p.window);
  if (p.kv.ring_rows > 0) {
    // Every position some query sees, the oldest to the newest, needs its own row.
    const int64_t span = p.window > 0 ? std::min(p.n_kv, p.window + p.n_tokens - 1) : p.n_kv;
    if (p.kv.ring_rows < span) {
      return invalid_argument(
          "{}: a ring of {} rows cannot hold the {} positions the queries see (window {}, "
          "n_tokens {}, n_kv {})",
          op, p.kv.ring_rows, span, p.window, p.n_tokens, p.n_kv);
    }
  }
  const int64_t elem = p.kv.dtype == DType::kBF16 ? 2 : 4;
  if ((p.kv.kv_row_stride * elem) % 16 != 0 || !aligned16(k) || !aligned16(v) || !aligned16(q)) {
    return invalid_argument("{}: q, K/V rows must be 16-byte aligned", op);
  }
  if (q == nullptr || out == nullptr) return invalid_argument("{}: null pointer", op);
  if (p.n_kv > INT32_MAX / 2 || p.n_head > 65535) {
    return invalid_argument("{}: n_kv {} / n_head {} too large", op, p.n_kv, p.n_head);
  }
  kern::AttnArgs a{p.n_tokens, p.n_kv,
                   p.n_head,   p.kv.n_head_kv,
                   d,          p.kv.kv_row_stride,
                   p.scale,    p.kv.dtype == DType::kBF16};
  a.window = p.window;
  a.ring_rows = p.kv.ring_rows;
  a.n_kv_dev = p.n_kv_device;
  a.block_table = p.kv.block_table;
  a.block_size = p.kv.block_size;
  return a;
}

// Cache rows an f32 prefill converts to bf16: every row that holds a position < n_kv.
int64_t prefill_rows(const AttentionParams& p) {
  return p.kv.ring_rows > 0 ? std::min(p.n_kv, p.kv.ring_rows) : p.n_kv;
}

}  // namespace

Status kv_store(const float* k, const float* v, int64_t n_tokens, int64_t src_stride,
                const KvLayout& kv, void* k_cache, void* v_cache, int64_t pos0, cudaStream_t stream,
                const int32_t* pos0_device) {
  RINFER_RETURN_IF_ERROR(check_kv(kv, k_cache, v_cache, "kv_store"));
  const int64_t kv_dim = kv.n_head_kv * kv.head_dim;
  if (n_tokens < 0 || pos0 < 0 || src_stride < kv_dim) {
    return invalid_argument("kv_store: bad n_tokens {}, pos0 {} or src_stride {}", n_tokens, pos0,
                            src_stride);
  }
  if (kv.ring_rows > 0 && n_tokens > kv.ring_rows) {
    return invalid_argument("kv_store: {} tokens do not fit a ring of {} rows", n_tokens,
                            kv.ring_rows);
  }
  if (n_tokens > 0 && (k == nullptr || v == nullptr)) {
    return invalid_argument("kv_store: null pointer");
  }
  return launched(
      kern::launch_kv_store(k, v, n_tokens, kv_dim, src_stride, kv.dtype == DType::kBF16, k_cache,
                            v_cache, pos0, kv.kv_row_stride, stream, kv.ring_rows, pos0_device),
      "kv_store launch");
}

Status rope_kv_store(float* qkv, int64_t n_tokens, int64_t n_head, int64_t token_stride,
                     const int32_t* positions, const RopeParams& p, const KvLayout& kv,
                     void* k_cache, void* v_cache, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_kv(kv, k_cache, v_cache, "rope_kv_store"));
  const int64_t hd = kv.head_dim;
  const int64_t n_heads = n_head + kv.n_head_kv;
  if (n_tokens < 0 || n_head <= 0 || token_stride < (n_heads + kv.n_head_kv) * hd) {
    return invalid_argument("rope_kv_store: bad shape: {} tokens, {} + {} heads of {}, stride {}",
                            n_tokens, n_head, kv.n_head_kv, hd, token_stride);
  }
  if (p.n_rot <= 0 || p.n_rot > hd || p.n_rot % 2 != 0) {
    return invalid_argument("rope_kv_store: n_rot {} must be even and in (0, head_dim {}]", p.n_rot,
                            hd);
  }
  if (kv.ring_rows > 0 && n_tokens > kv.ring_rows) {
    return invalid_argument("rope_kv_store: {} tokens do not fit a ring of {} rows", n_tokens,
                            kv.ring_rows);
  }
  if (n_tokens > 0 && (qkv == nullptr || positions == nullptr)) {
    return invalid_argument("rope_kv_store: null pointer");
  }
  RINFER_ASSIGN_OR_RETURN(const kern::RopeArgs a,
                          rope_args(p, n_tokens, n_heads, hd, token_stride, "rope_kv_store"));
  kern::RopeKvArgs k;
  k.n_head_q = n_head;
  k.cache_bf16 = kv.dtype == DType::kBF16;
  k.k_cache = k_cache;
  k.v_cache = v_cache;
  k.kv_row_stride = kv.kv_row_stride;
  k.ring_rows = kv.ring_rows;
  return launched(kern::launch_rope_kv_store(qkv, positions, a, k, stream), "rope_kv_store launch");
}

size_t attention_decode_workspace_bytes(const AttentionParams& p) {
  if (p.kv.n_head_kv <= 0 || p.n_head <= 0 || p.n_kv <= 0) return 0;
  kern::AttnArgs a{1,
                   p.n_kv,
                   p.n_head,
                   p.kv.n_head_kv,
                   p.kv.head_dim,
                   p.kv.kv_row_stride,
                   p.scale,
                   p.kv.dtype == DType::kBF16};
  a.window = p.window;
  return kern::attn_decode_workspace_bytes(a);
}

bool decode_kv_fits(int64_t rows, int64_t kv_row_stride) {
  return rows > 0 && rows <= kMaxDecodeKv && kv_row_stride > 0 && rows <= INT32_MAX / kv_row_stride;
}

namespace {

// The decode kernels index positions, heads and the elements of a layer's cache in 32 bits
// (attention_decode.cu: DecArgs).
Status check_decode_sizes(const AttentionParams& p, const char* op) {
  const int64_t rows = p.kv.block_table != nullptr ? p.kv.paged_rows
                       : p.kv.ring_rows > 0       ? p.kv.ring_rows
                                                  : p.n_kv;
  if (p.n_kv > kMaxDecodeKv || p.n_head > 32767 || !decode_kv_fits(rows, p.kv.kv_row_stride)) {
    return invalid_argument(
        "{}: {} positions / {} heads / {} rows of {} elements: decode attention takes at most {} "
        "positions, 32767 heads and 2^31 - 1 cache elements a layer",
        op, p.n_kv, p.n_head, rows, p.kv.kv_row_stride, kMaxDecodeKv);
  }
  return ok_status();
}

}  // namespace

Status attention_decode(const AttentionParams& p, const float* q, const void* k_cache,
                        const void* v_cache, float* out, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  if (p.n_tokens != 1) {
    return invalid_argument("attention_decode: n_tokens {} (decode takes one token)", p.n_tokens);
  }
  RINFER_ASSIGN_OR_RETURN(kern::AttnArgs a,
                          attn_args(p, q, k_cache, v_cache, out, "attention_decode"));
  RINFER_RETURN_IF_ERROR(check_decode_sizes(p, "attention_decode"));
  const size_t need = kern::attn_decode_workspace_bytes(a);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need)) {
    return invalid_argument("attention_decode: needs a {}-byte workspace, got {}", need,
                            workspace_bytes);
  }
  return launched(kern::launch_attn_decode(a, q, k_cache, v_cache, out, workspace, stream),
                  "attention_decode launch");
}

int64_t attention_decode_counters(const AttentionParams& p) {
  if (p.kv.n_head_kv <= 0 || p.n_head <= 0) return 0;
  kern::AttnArgs a{1,
                   std::max<int64_t>(p.n_kv, 1),
                   p.n_head,
                   p.kv.n_head_kv,
                   p.kv.head_dim,
                   p.kv.kv_row_stride,
                   p.scale,
                   true};
  return kern::attn_decode_counters(a);
}

bool attention_decode_rope_supports(const KvLayout& kv) {
  return kv.dtype == DType::kBF16 ||
         (kv.dtype == DType::kF32 && (kv.head_dim == 64 || kv.head_dim == 128));
}

Status attention_decode_rope(const AttentionParams& p, const RopeParams& rope, const float* qkv,
                             void* k_cache, void* v_cache, float* out,
                             const QuantizedActivation* out_q16, unsigned* counters,
                             void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "attention_decode_rope";
  if (p.n_tokens != 1)
    return invalid_argument("{}: n_tokens {} (decode takes one token)", op, p.n_tokens);
  if (!attention_decode_rope_supports(p.kv)) {
    return unsupported(
        "{}: KV cache dtype {} with head_dim {} (bf16, or f32 of head_dim 64 or 128)", op,
        dtype_name(p.kv.dtype), p.kv.head_dim);
  }
  RINFER_ASSIGN_OR_RETURN(kern::AttnArgs a, attn_args(p, qkv, k_cache, v_cache, out, op));
  RINFER_RETURN_IF_ERROR(check_decode_sizes(p, op));
  const int64_t hd = p.kv.head_dim;
  if (rope.n_rot <= 0 || rope.n_rot > hd || rope.n_rot % 2 != 0) {
    return invalid_argument("{}: n_rot {} must be even and in (0, head_dim {}]", op, rope.n_rot,
                            hd);
  }
  const size_t need = kern::attn_decode_workspace_bytes(a);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need)) {
    return invalid_argument("{}: needs a {}-byte workspace, got {}", op, need, workspace_bytes);
  }
  if (counters == nullptr) return invalid_argument("{}: null counters", op);
  if (!aligned16(out)) return invalid_argument("{}: out must be 16-byte aligned", op);
  kern::AttnRopeArgs r;
  r.n_rot = rope.n_rot;
  r.freq_scale = static_cast<double>(rope.freq_scale);
  rope_inv_freq(rope, r.inv_freq);  // as rope and rope_kv_store
  r.neox = rope.mode == RopeMode::kNeox;
  r.counters = counters;
  if (out_q16 != nullptr) {
    if (out_q16->n != p.n_head * hd || out_q16->q == nullptr) {
      return invalid_argument("{}: int16 output of {} elements for {} heads of {}", op, out_q16->n,
                              p.n_head, hd);
    }
    r.q16 = out_q16->q;
    r.q16_scale = out_q16->scale;
    r.q16_sum16 = out_q16->sum16;
  }
  return launched(
      kern::launch_attn_decode_rope(a, r, qkv, k_cache, v_cache, out, workspace, stream),
      "attention_decode_rope launch");
}

size_t attention_prefill_workspace_bytes(const AttentionParams& p) {
  if (p.kv.dtype != DType::kF32 || p.n_kv <= 0) return 0;
  return 2 * static_cast<size_t>(prefill_rows(p)) * static_cast<size_t>(p.kv.n_head_kv) *
         static_cast<size_t>(p.kv.head_dim) * 2;
}

Status attention_prefill(const AttentionParams& p, const float* q, const void* k_cache,
                         const void* v_cache, DType out_dtype, void* out, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_act_dtype(out_dtype, "attention_prefill"));
  if (p.n_kv_device != nullptr) {
    return invalid_argument("attention_prefill: n_kv_device is for decode only");
  }
  if (p.kv.block_table != nullptr) {
    return invalid_argument("attention_prefill: a paged KV layout is for decode only");
  }
  RINFER_ASSIGN_OR_RETURN(kern::AttnArgs a,
                          attn_args(p, q, k_cache, v_cache, out, "attention_prefill"));
  const bool out_bf16 = out_dtype == DType::kBF16;
  if (p.kv.dtype == DType::kBF16) {
    return launched(
        kern::launch_attn_prefill(a, q, static_cast<const uint16_t*>(k_cache),
                                  static_cast<const uint16_t*>(v_cache), out_bf16, out, stream),
        "attention_prefill launch");
  }
  const size_t need = attention_prefill_workspace_bytes(p);
  if (workspace == nullptr || workspace_bytes < need || !aligned16(workspace)) {
    return invalid_argument("attention_prefill: an f32 cache needs a {}-byte workspace, got {}",
                            need, workspace_bytes);
  }
  const int64_t width = p.kv.n_head_kv * p.kv.head_dim;
  const int64_t rows = prefill_rows(p);
  auto* kb = static_cast<uint16_t*>(workspace);  // [rows, n_head_kv * head_dim] bf16
  uint16_t* vb = kb + rows * width;              // [rows, n_head_kv * head_dim] bf16
  RINFER_RETURN_IF_ERROR(
      launched(kern::launch_rows_f32_to_bf16(static_cast<const float*>(k_cache), rows, width,
                                             p.kv.kv_row_stride, kb, stream),
               "attention_prefill K conversion"));
  RINFER_RETURN_IF_ERROR(
      launched(kern::launch_rows_f32_to_bf16(static_cast<const float*>(v_cache), rows, width,
                                             p.kv.kv_row_stride, vb, stream),
               "attention_prefill V conversion"));
  a.kv_row_stride = width;
  a.kv_bf16 = true;
  return launched(kern::launch_attn_prefill(a, q, kb, vb, out_bf16, out, stream),
                  "attention_prefill launch");
}

Status argmax(const float* logits, int64_t n, int32_t* out_id, cudaStream_t stream) {
  if (n <= 0 || n > INT32_MAX) return invalid_argument("argmax: n {} out of range", n);
  if (logits == nullptr || out_id == nullptr) return invalid_argument("argmax: null pointer");
  return launched(kern::launch_argmax(logits, n, out_id, stream), "argmax launch");
}

Status sample(const float* logits, int64_t n_vocab, const DeviceSampling& s, const float* uniform,
              int32_t* out_id, cudaStream_t stream) {
  if (s.temperature <= 0.0f) return argmax(logits, n_vocab, out_id, stream);
  if (n_vocab <= 0 || n_vocab > INT32_MAX) {
    return invalid_argument("sample: n_vocab {} out of range", n_vocab);
  }
  if (logits == nullptr || out_id == nullptr || uniform == nullptr) {
    return invalid_argument("sample: null pointer");
  }
  const int64_t k = s.top_k > n_vocab ? n_vocab : s.top_k;
  if (k < 1 || k > kMaxDeviceTopK) {
    return unsupported("sample: top_k {} on the device must be in [1, {}] (use the host Sampler)",
                       s.top_k, kMaxDeviceTopK);
  }
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f) || !(s.min_p >= 0.0f && s.min_p < 1.0f)) {
    return invalid_argument("sample: top_p {} must be in (0, 1], min_p {} in [0, 1)", s.top_p,
                            s.min_p);
  }
  const kern::SampleArgs a{n_vocab, static_cast<int>(k), s.temperature, s.top_p, s.min_p};
  return launched(kern::launch_sample_top_k(logits, a, uniform, out_id, stream), "sample launch");
}

bool programmatic_dependent_launch() { return kern::pdl_enabled(); }

namespace {
std::mutex g_kernel_config_mu;
KernelConfig g_kernel_config;
}  // namespace

void apply_kernel_config(const KernelConfig& c) {
  std::lock_guard<std::mutex> lock(g_kernel_config_mu);
  g_kernel_config = c;
  kern::set_matvec_split(c.matvec_split);
  using kern::MatvecStream;
  kern::set_matvec_stream_mode(c.matvec_stream == MatvecKernel::kAlways  ? MatvecStream::kAlways
                               : c.matvec_stream == MatvecKernel::kNever ? MatvecStream::kNever
                                                                         : MatvecStream::kAuto);
  kern::set_matvec_stream_kb(c.matvec_stream_kb);
  kern::set_producer_l2(c.producer_l2 == ProducerL2::kAuto     ? -1
                        : c.producer_l2 == ProducerL2::kOff    ? 0
                        : c.producer_l2 == ProducerL2::kNarrow ? 1
                                                               : 2);
  kern::set_attn_decode_mma(c.attention_mma);
  kern::set_pdl(c.pdl);
}

KernelConfig kernel_config() {
  std::lock_guard<std::mutex> lock(g_kernel_config_mu);
  return g_kernel_config;
}

}  // namespace rinfer::cuda
