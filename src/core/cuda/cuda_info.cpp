// CUDA builds: device queries through the CUDA runtime (host code, compiled by the host compiler).
#include "core/cuda_info.h"

#include "core/cuda/cuda_check.h"

namespace rinfer {

namespace cuda {
cudaError_t launch_probe(int* out32, int value, cudaStream_t stream);  // probe_kernel.cu
}  // namespace cuda

bool cuda_compiled() { return true; }

Result<std::vector<CudaDeviceInfo>> cuda_devices() {
  int n = 0;
  RINFER_CUDA_RETURN(cudaGetDeviceCount(&n));
  if (n == 0) return device_error("no CUDA device found");
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    RINFER_CUDA_RETURN(cudaGetDeviceProperties(&p, i));
    out.push_back({i, p.name, p.major, p.minor, static_cast<uint64_t>(p.totalGlobalMem),
                   p.multiProcessorCount});
  }
  return out;
}

Status cuda_self_test(int index) {
  RINFER_CUDA_RETURN(cudaSetDevice(index));
  int* d = nullptr;
  RINFER_CUDA_RETURN(cudaMalloc(&d, 32 * sizeof(int)));
  Status st = cuda_status(cuda::launch_probe(d, 1000, nullptr), "probe kernel launch");
  int h[32] = {};
  if (st.ok()) st = cuda_status(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy");
  const cudaError_t free_err = cudaFree(d);
  RINFER_RETURN_IF_ERROR(st);
  RINFER_RETURN_IF_ERROR(cuda_status(free_err, "cudaFree"));
  for (int i = 0; i < 32; ++i) {
    if (h[i] != 1000 + i) return internal_error("probe kernel wrote {} at {}", h[i], i);
  }
  return ok_status();
}

Result<CudaMemoryInfo> cuda_memory_info(int index) {
  int current = 0;
  RINFER_CUDA_RETURN(cudaGetDevice(&current));
  RINFER_CUDA_RETURN(cudaSetDevice(index));
  size_t free_bytes = 0, total_bytes = 0;
  const Status st = cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const cudaError_t restore = cudaSetDevice(current);  // leave the caller's device as it was
  RINFER_RETURN_IF_ERROR(st);
  RINFER_RETURN_IF_ERROR(cuda_status(restore, "cudaSetDevice"));
  return CudaMemoryInfo{free_bytes, total_bytes};
}

std::string cuda_versions() {
  int drv = 0, rt = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  auto v = [](int x) {
    return x == 0 ? std::string("none") : fmt::format("{}.{}", x / 1000, (x % 1000) / 10);
  };
  return "driver " + v(drv) + ", runtime " + v(rt);
}

}  // namespace rinfer
