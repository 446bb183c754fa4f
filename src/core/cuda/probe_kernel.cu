// A trivial kernel: proves the binary carries code for the GPU it runs on (cuda_self_test).
// .cu files hold kernels and thin launchers only; host logic lives in .cpp files compiled by the
// host compiler, which keeps nvcc away from fmt and the rest of the host headers.
#include <cuda_runtime.h>

namespace rinfer::cuda {

namespace {
__global__ void probe_kernel(int* out, int value) {
  out[threadIdx.x] = value + static_cast<int>(threadIdx.x);
}
}  // namespace

cudaError_t launch_probe(int* out32, int value, cudaStream_t stream) {
  probe_kernel<<<1, 32, 0, stream>>>(out32, value);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda
