// CPU-only builds: no CUDA backend. The CUDA build uses src/core/cuda/cuda_info.cu instead.
#ifndef RINFER_WITH_CUDA

#include "core/cuda_info.h"

#include "core/error.h"

namespace rinfer {

bool cuda_compiled() { return false; }

Result<std::vector<CudaDeviceInfo>> cuda_devices() {
  return unsupported("this rinfer was built without CUDA (use the `cuda` CMake preset)");
}

Status cuda_self_test(int) { return cuda_devices().status(); }

Result<CudaMemoryInfo> cuda_memory_info(int) { return cuda_devices().status(); }

std::string cuda_versions() { return "built without CUDA"; }

}  // namespace rinfer

#endif  // RINFER_WITH_CUDA
