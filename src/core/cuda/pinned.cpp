#include "core/cuda/pinned.h"

#include <algorithm>

#include "core/cuda/cuda_check.h"

namespace rinfer::cuda {

PinnedHostAllocator::PinnedHostAllocator(uint64_t max_cached_bytes)
    : max_cached_bytes_(max_cached_bytes) {}

PinnedHostAllocator::~PinnedHostAllocator() { release_cached(); }

Result<void*> PinnedHostAllocator::allocate(size_t bytes) {
  const size_t cls = CachingHostAllocator::size_class(bytes);
  {
    std::lock_guard lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= cls;
      stats_.hits++;
      stats_.live_bytes += cls;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
      stats_.allocations++;
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, cls, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    static_cast<void>(cudaGetLastError());
    release_cached();
    err = cudaHostAlloc(&p, cls, cudaHostAllocPortable);
  }
  if (err != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return cuda_status(err, "cudaHostAlloc").with_context(fmt::format("pinning {} bytes", bytes));
  }
  std::lock_guard lock(mu_);
  stats_.misses++;
  stats_.live_bytes += cls;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
  stats_.allocations++;
  return p;
}

void PinnedHostAllocator::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  const size_t cls = CachingHostAllocator::size_class(bytes);
  std::lock_guard lock(mu_);
  stats_.live_bytes -= cls;
  stats_.frees++;
  free_[cls].push_back(p);
  stats_.cached_bytes += cls;
  if (stats_.cached_bytes > max_cached_bytes_) trim_locked(max_cached_bytes_);
}

void PinnedHostAllocator::trim_locked(uint64_t limit) {
  for (auto it = free_.rbegin(); it != free_.rend() && stats_.cached_bytes > limit; ++it) {
    auto& blocks = it->second;
    while (!blocks.empty() && stats_.cached_bytes > limit) {
      static_cast<void>(cudaFreeHost(blocks.back()));
      blocks.pop_back();
      stats_.cached_bytes -= it->first;
    }
  }
}

void PinnedHostAllocator::release_cached() {
  std::lock_guard lock(mu_);
  trim_locked(0);
  free_.clear();
}

AllocatorStats PinnedHostAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

PinnedHostAllocator& pinned_host_allocator() {
  static auto* a = new PinnedHostAllocator();  // intentionally never destroyed
  return *a;
}

}  // namespace rinfer::cuda
