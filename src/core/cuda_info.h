// What CUDA devices this process can use. Callable from every build: a CPU-only build, or a
// CUDA build on a machine without a GPU or driver, answers with a clear Status rather than
// failing later in the first kernel launch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  uint64_t total_memory = 0;
  int multiprocessors = 0;
};

// True when this binary was built with the CUDA backend.
bool cuda_compiled();

// The devices, or an error saying why there are none usable ("built without CUDA", "CUDA driver
// version is insufficient", "no CUDA device").
Result<std::vector<CudaDeviceInfo>> cuda_devices();

// Launches a tiny kernel on device `index` and reads its result back: proves that the binary
// holds code for this GPU's architecture and that launches work.
Status cuda_self_test(int index);

// Free and total memory of device `index` now (cudaMemGetInfo), for checking a planned
// allocation before making it.
struct CudaMemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};
Result<CudaMemoryInfo> cuda_memory_info(int index);

// The driver and runtime versions as "13.0 / 13.0", or the reason they cannot be read.
std::string cuda_versions();

}  // namespace rinfer
