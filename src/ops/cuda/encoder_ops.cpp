// The Status API of encoder_ops.h: argument checks, then the launchers of encoder_launch.h.
#include "ops/cuda/encoder_ops.h"

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/encoder_launch.h"

namespace rinfer::cuda {

namespace {

Status launched(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return ok_status();
  return cuda_status(err, op);
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

Status check_rows(const char* op, int64_t n_rows, int64_t n) {
  if (n_rows < 0 || n_rows > INT32_MAX || n <= 0 || n > kMaxLayerNorm) {
    return invalid_argument("{}: {} rows of {} (rows of 1 to {})", op, n_rows, n, kMaxLayerNorm);
  }
  return ok_status();
}

}  // namespace

Status layer_norm(const float* x, const float* bias, const float* residual, const float* gamma,
                  const float* beta, int64_t n_rows, int64_t n, float eps, float* out,
                  uint16_t* out_bf16, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_rows("layer_norm", n_rows, n));
  if (!(eps > 0.0f)) return invalid_argument("layer_norm: eps {} must be > 0", eps);
  if (x == nullptr || gamma == nullptr || beta == nullptr ||
      (out == nullptr && out_bf16 == nullptr)) {
    return invalid_argument("layer_norm: null pointer (x, gamma, beta and an output are needed)");
  }
  if (n_rows == 0) return ok_status();
  return launched(kern::launch_layer_norm(x, bias, residual, gamma, beta, n_rows, n, eps, out,
                                          out_bf16, stream),
                  "layer_norm launch");
}

Status bias_gelu_erf(const void* x, DType x_dtype, const float* bias, int64_t n_rows, int64_t n,
                     uint16_t* out, cudaStream_t stream) {
  if (x_dtype != DType::kF32 && x_dtype != DType::kBF16) {
    return invalid_argument("bias_gelu_erf: input dtype {} (f32 or bf16)", dtype_name(x_dtype));
  }
  if (n_rows < 0 || n <= 0 || n % 2 != 0) {
    return invalid_argument("bias_gelu_erf: {} rows of {} (an even row length)", n_rows, n);
  }
  if (x == nullptr || out == nullptr) return invalid_argument("bias_gelu_erf: null pointer");
  if (!aligned(x, 8) || !aligned(out, 4)) {
    return invalid_argument("bias_gelu_erf: x and out must be aligned to an element pair");
  }
  if (n_rows == 0) return ok_status();
  return launched(
      kern::launch_bias_gelu_erf(x, x_dtype == DType::kBF16, bias, n_rows, n, out, stream),
      "bias_gelu_erf launch");
}

Status embed_sum(const EmbedTables& t, const int32_t* ids, const int32_t* positions,
                 const int32_t* types, int64_t n_rows, float* out, cudaStream_t stream) {
  if (n_rows < 0 || n_rows > INT32_MAX || t.n <= 0) {
    return invalid_argument("embed_sum: {} rows of {}", n_rows, t.n);
  }
  if (t.word == nullptr || t.pos == nullptr || t.type == nullptr || ids == nullptr ||
      positions == nullptr || out == nullptr) {
    return invalid_argument("embed_sum: null pointer");
  }
  if (n_rows == 0) return ok_status();
  return launched(kern::launch_embed_sum(t.word, t.pos, t.type, t.n, ids, positions, types, n_rows,
                                         out, stream),
                  "embed_sum launch");
}

Status attention_varlen(const VarlenAttentionParams& p, const uint16_t* qkv, uint16_t* out,
                        cudaStream_t stream) {
  if (p.head_dim != 32 && p.head_dim != 64 && p.head_dim != 128) {
    return unsupported("attention_varlen: head_dim {} (32, 64 or 128)", p.head_dim);
  }
  if (p.n_seqs < 0 || p.n_seqs > 65535 || p.n_head <= 0 || p.n_head > 65535 || p.max_len < 0) {
    return invalid_argument("attention_varlen: {} sequences (at most 65535), {} heads, max_len {}",
                            p.n_seqs, p.n_head, p.max_len);
  }
  const int64_t width = p.n_head * p.head_dim;
  if (p.qkv_stride < 3 * width || p.qkv_stride % 8 != 0 || p.out_stride < width ||
      p.out_stride % 2 != 0) {
    return invalid_argument(
        "attention_varlen: qkv rows of {} (a multiple of 8, at least {}), out rows of {} (even, "
        "at least {})",
        p.qkv_stride, 3 * width, p.out_stride, width);
  }
  if (p.n_seqs == 0 || p.max_len == 0) return ok_status();
  if (qkv == nullptr || out == nullptr || p.starts == nullptr || p.lengths == nullptr) {
    return invalid_argument("attention_varlen: null pointer");
  }
  if (!aligned(qkv, 16) || (p.bias != nullptr && !aligned(p.bias, 16))) {
    return invalid_argument("attention_varlen: qkv and the bias must be 16-byte aligned");
  }
  kern::VarlenAttnArgs a{};
  a.n_seqs = static_cast<int>(p.n_seqs);
  a.n_head = static_cast<int>(p.n_head);
  a.head_dim = static_cast<int>(p.head_dim);
  a.max_len = p.max_len;
  a.qkv_stride = p.qkv_stride;
  a.out_stride = p.out_stride;
  a.scale = p.scale;
  a.starts = p.starts;
  a.lengths = p.lengths;
  a.bias = p.bias;
  return launched(kern::launch_attn_varlen(a, qkv, out, stream), "attention_varlen launch");
}

Status pool_rows(PoolKind kind, bool normalize, const float* hidden, int64_t n,
                 const int32_t* starts, const int32_t* lengths, int64_t n_seqs, float* out,
                 cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_rows("pool_rows", n_seqs, n));
  if (n_seqs == 0) return ok_status();
  if (hidden == nullptr || starts == nullptr || lengths == nullptr || out == nullptr) {
    return invalid_argument("pool_rows: null pointer");
  }
  return launched(kern::launch_pool_rows(kind == PoolKind::kCls, normalize, hidden, n, starts,
                                         lengths, n_seqs, out, stream),
                  "pool_rows launch");
}

}  // namespace rinfer::cuda
