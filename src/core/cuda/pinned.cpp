#include "core/cuda/pinned.h"

#include "core/cuda/cuda_check.h"

namespace rinfer::cuda {

namespace {

Result<void*> pinned_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear it: the caller may retry after trimming
    return cuda_status(err, "cudaHostAlloc").with_context(fmt::format("pinning {} bytes", bytes));
  }
  return p;
}

void pinned_free(void* p) { static_cast<void>(cudaFreeHost(p)); }

}  // namespace

PinnedHostAllocator::PinnedHostAllocator(uint64_t max_cached_bytes)
    : CachingHostAllocator(max_cached_bytes, Backing{pinned_alloc, pinned_free}) {}

PinnedHostAllocator& pinned_host_allocator() {
  static auto* a = new PinnedHostAllocator();  // intentionally never destroyed
  return *a;
}

}  // namespace rinfer::cuda
