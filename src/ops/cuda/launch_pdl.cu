// The switch of programmatic dependent launch (launch.h, common.cuh's launch_pdl).
#include <atomic>

#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

// strategies.kernels.cuda.pdl: asked for (the default) or not.
std::atomic<bool> g_pdl_wanted{true};
// Whether the current device has it (sm_90+): -1 not asked yet, 0 no, 1 yes.
std::atomic<int> g_pdl_device{-1};

bool device_has_pdl() {
  int v = g_pdl_device.load(std::memory_order_relaxed);
  if (v < 0) {
    int dev = 0, major = 0;
    v = cudaGetDevice(&dev) == cudaSuccess &&
                cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                    cudaSuccess &&
                major >= 9
            ? 1
            : 0;
    g_pdl_device.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

}  // namespace

void set_pdl(bool on) { g_pdl_wanted.store(on, std::memory_order_relaxed); }

bool pdl_enabled() { return g_pdl_wanted.load(std::memory_order_relaxed) && device_has_pdl(); }

}  // namespace rinfer::cuda::kern
