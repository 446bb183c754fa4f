// The Status API of the FP8 E4M3 ops (ops_cuda.h): argument checks, then the launchers of
// quantize_f8.cu and matvec_f8.cu.
#include "core/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::cuda {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

Status quantize_rows_f8(const void* x, DType x_dtype, int64_t n_rows, int64_t n, int64_t ld,
                        uint8_t* q, float* scale, cudaStream_t stream) {
  if (x_dtype != DType::kF32 && x_dtype != DType::kBF16) {
    return invalid_argument("quantize_rows_f8: activations of {} (f32 or bf16)",
                            dtype_name(x_dtype));
  }
  if (n_rows < 0 || n <= 0 || ld < n || n_rows > INT32_MAX) {
    return invalid_argument("quantize_rows_f8: bad shape [{}, {}] (row stride {})", n_rows, n, ld);
  }
  if (n_rows > 0 && (x == nullptr || q == nullptr || scale == nullptr)) {
    return invalid_argument("quantize_rows_f8: null pointer");
  }
  return cuda_status(
      kern::launch_quantize_f8_rows(x, x_dtype == DType::kBF16, n_rows, n, ld, q, scale, stream),
      "quantize_rows_f8 launch");
}

Status matvec_f8(const DeviceWeight& w, const uint8_t* xq, const float* x_scale, int64_t n_rows,
                 const float* add, float* y, cudaStream_t stream) {
  if (w.dtype != DType::kF8E4M3 || w.data == nullptr || w.scales == nullptr) {
    return invalid_argument("matvec_f8: the weight is {}, not a loaded f8_e4m3 layout",
                            dtype_name(w.dtype));
  }
  if (w.n_out <= 0 || w.n_in <= 0 || w.n_in % 64 != 0 || w.n_in > INT32_MAX) {
    return invalid_argument("matvec_f8: weight [{}, {}] (rows of a multiple of 64 elements)",
                            w.n_out, w.n_in);
  }
  if (n_rows < 1 || n_rows > kMatvecBatchMaxRows) {
    return invalid_argument("matvec_f8: {} rows (1 to {})", n_rows, kMatvecBatchMaxRows);
  }
  if (xq == nullptr || x_scale == nullptr || y == nullptr) {
    return invalid_argument("matvec_f8: null pointer");
  }
  if (!aligned16(xq) || !aligned16(w.data)) {
    return invalid_argument("matvec_f8: the codes must be 16-byte aligned");
  }
  return cuda_status(kern::launch_matvec_f8(static_cast<const uint8_t*>(w.data),
                                            static_cast<const float*>(w.scales), w.n_out, w.n_in,
                                            xq, x_scale, static_cast<int>(n_rows), add, y, stream),
                     "matvec_f8 launch");
}

Status matvec_f8_rows(const DeviceWeight& w, const void* x, DType x_dtype, int64_t n_rows,
                      uint8_t* q, float* scale, const float* add, float* y, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(quantize_rows_f8(x, x_dtype, n_rows, w.n_in, w.n_in, q, scale, stream));
  return matvec_f8(w, q, scale, n_rows, add, y, stream);
}

}  // namespace rinfer::cuda
