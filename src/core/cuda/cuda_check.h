// CUDA errors become Status values: every runtime call goes through RINFER_CUDA_RETURN.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace rinfer {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ok_status();
  const StatusCode code =
      err == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kDeviceError;
  return Status(code,
                fmt::format("{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err)));
}

}  // namespace rinfer

#define RINFER_CUDA_RETURN(call) RINFER_RETURN_IF_ERROR(::rinfer::cuda_status((call), #call))
