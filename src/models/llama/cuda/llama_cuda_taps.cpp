#include "models/llama/cuda/llama_cuda_taps.h"

#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace rinfer::llama {

Status tap_device_rows(TapSink* taps, TapKind kind, int64_t layer, const void* device, DType dtype,
                       int64_t n_rows, int64_t width, cudaStream_t stream,
                       std::vector<float>& host) {
  if (taps == nullptr || !taps->wants(kind)) return ok_status();
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return internal_error("tap {}: rows of {}", tap_name(kind), dtype_name(dtype));
  }
  const auto n = static_cast<size_t>(n_rows * width);
  const size_t elem = dtype == DType::kF32 ? 4 : 2;
  host.resize(dtype == DType::kF32 ? n : n + (n + 1) / 2);  // bf16: staged after the f32 rows
  void* staged = dtype == DType::kF32 ? static_cast<void*>(host.data())
                                      : static_cast<void*>(host.data() + n);
  RINFER_CUDA_RETURN(cudaMemcpyAsync(staged, device, n * elem, cudaMemcpyDeviceToHost, stream));
  RINFER_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "tap"));
  if (dtype == DType::kBF16) {
    const auto* b = static_cast<const uint16_t*>(staged);
    for (size_t i = 0; i < n; ++i) host[i] = bf16_to_f32(b[i]);
  }
  taps->record(kind, static_cast<int32_t>(layer), host.data(), n_rows, width);
  return ok_status();
}

}  // namespace rinfer::llama
