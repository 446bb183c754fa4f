// The switch of programmatic dependent launch (launch.h, common.cuh's launch_pdl).
#include <atomic>
#include <cstdlib>

#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

// -1: not decided yet; 0 off; 1 on.
std::atomic<int> g_pdl{-1};

bool default_pdl() {
  const char* e = std::getenv("RINFER_CUDA_PDL");
  if (e != nullptr && e[0] == '0') return false;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    return false;
  }
  return major >= 9;
}

}  // namespace

void set_pdl(bool on) { g_pdl.store(on ? 1 : 0); }

bool pdl_enabled() {
  int v = g_pdl.load(std::memory_order_relaxed);
  if (v < 0) {
    v = default_pdl() ? 1 : 0;
    g_pdl.store(v);
  }
  return v == 1;
}

}  // namespace rinfer::cuda::kern
