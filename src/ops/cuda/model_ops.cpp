// The Status API of model_ops.h.
#include "ops/cuda/model_ops.h"

#include "core/cuda/cuda_check.h"
#include "ops/cuda/launch_model.h"

namespace rinfer::cuda {

namespace {

Status launched(cudaError_t err, const char* op) { return cuda_status(err, op); }

Status check_ptrs(int64_t n, const void* a, const void* b, const char* op) {
  if (n < 0) return invalid_argument("{}: negative size {}", op, n);
  if (n > 0 && (a == nullptr || b == nullptr)) return invalid_argument("{}: null pointer", op);
  return ok_status();
}

}  // namespace

Status add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_ptrs(n, a, b, "add"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, out, out, "add"));
  return launched(kern::launch_add(a, b, n, out, stream), "add launch");
}

Status scale(float* x, int64_t n, float s, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_ptrs(n, x, x, "scale"));
  return launched(kern::launch_scale(x, n, s, stream), "scale launch");
}

Status add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t n, int64_t stride,
                     cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_ptrs(n_rows * n, x, bias, "add_bias_rows"));
  if (n_rows < 0 || n < 0 || stride < n) {
    return invalid_argument("add_bias_rows: bad shape [{}, {}] stride {}", n_rows, n, stride);
  }
  return launched(kern::launch_add_bias_rows(x, bias, n_rows, n, stride, stream),
                  "add_bias_rows launch");
}

Status rms_norm_heads(float* x, const float* w, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      int64_t token_stride, float eps, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_ptrs(n_tokens * n_heads, x, w, "rms_norm_heads"));
  if (n_tokens < 0 || n_heads < 0 || head_dim <= 0 || token_stride < n_heads * head_dim) {
    return invalid_argument("rms_norm_heads: bad shape [{}, {}, {}] token stride {}", n_tokens,
                            n_heads, head_dim, token_stride);
  }
  return launched(
      kern::launch_rms_norm_heads(x, w, n_tokens, n_heads, head_dim, token_stride, eps, stream),
      "rms_norm_heads launch");
}

Status gather_rows(const float* src, int64_t src_stride, const int32_t* rows, int64_t n_rows,
                   int64_t n, float* dst, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_ptrs(n_rows * n, src, dst, "gather_rows"));
  if (n_rows < 0 || n < 0 || src_stride < n || (n_rows > 0 && rows == nullptr)) {
    return invalid_argument("gather_rows: bad arguments [{}, {}] stride {}", n_rows, n, src_stride);
  }
  return launched(kern::launch_gather_rows(src, src_stride, rows, n_rows, n, dst, stream),
                  "gather_rows launch");
}

namespace {

Status check_q16(int64_t n, const QuantizedActivation& qa, const char* op) {
  if (n <= 0 || n % 32 != 0 || qa.n != n || qa.q == nullptr) {
    return invalid_argument(
        "{}: n {} must be a positive multiple of 32 equal to the quantized "
        "activation's {}",
        op, n, qa.n);
  }
  return ok_status();
}

}  // namespace

constexpr int64_t kMaxNormRow = 32768;
// The norm that also writes e4m3 codes holds more registers a thread: rows of up to 16384.
constexpr int64_t kMaxNormRowF8 = 16384;

Status rms_norm_q16(const float* x, float* residual, const float* w, int64_t n, float eps,
                    float* out, const QuantizedActivation& qa, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_q16(n, qa, "rms_norm_q16"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, x, w, "rms_norm_q16"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, out, out, "rms_norm_q16"));
  if (n > kMaxNormRow) return invalid_argument("rms_norm_q16: n {} over {}", n, kMaxNormRow);
  return launched(kern::launch_rms_norm_q16(x, residual, w, n, eps, out, qa.q, qa.scale, qa.sum16,
                                            nullptr, nullptr, stream),
                  "rms_norm_q16 launch");
}

Status rms_norm_row(const float* x, float* residual, const float* w, int64_t n, float eps,
                    float* out, cudaStream_t stream) {
  if (n <= 0 || n % 32 != 0 || n > kMaxNormRow) {
    return invalid_argument("rms_norm_row: n {} must be a positive multiple of 32, at most {}", n,
                            kMaxNormRow);
  }
  RINFER_RETURN_IF_ERROR(check_ptrs(n, x, w, "rms_norm_row"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, out, out, "rms_norm_row"));
  return launched(kern::launch_rms_norm_q16(x, residual, w, n, eps, out, nullptr, nullptr, nullptr,
                                            nullptr, nullptr, stream),
                  "rms_norm_row launch");
}

Status rms_norm_row_f8(const float* x, float* residual, const float* w, int64_t n, float eps,
                       float* out, uint8_t* f8, float* f8_scale, cudaStream_t stream) {
  if (n <= 0 || n % 32 != 0 || n > kMaxNormRowF8) {
    return invalid_argument("rms_norm_row_f8: n {} must be a positive multiple of 32, at most {}",
                            n, kMaxNormRowF8);
  }
  RINFER_RETURN_IF_ERROR(check_ptrs(n, x, w, "rms_norm_row_f8"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, out, out, "rms_norm_row_f8"));
  if (f8 == nullptr || f8_scale == nullptr || reinterpret_cast<uintptr_t>(f8) % 4 != 0) {
    return invalid_argument("rms_norm_row_f8: null or unaligned codes");
  }
  return launched(kern::launch_rms_norm_q16(x, residual, w, n, eps, out, nullptr, nullptr, nullptr,
                                            f8, f8_scale, stream),
                  "rms_norm_row_f8 launch");
}

Status glu_q16(const float* gate, const float* up, int64_t n, bool gelu, float* out,
               const QuantizedActivation& qa, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_q16(n, qa, "glu_q16"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, gate, up, "glu_q16"));
  RINFER_RETURN_IF_ERROR(check_ptrs(n, out, out, "glu_q16"));
  return launched(kern::launch_glu_q16(gate, up, n, gelu, out, qa.q, qa.scale, qa.sum16, stream),
                  "glu_q16 launch");
}

}  // namespace rinfer::cuda
