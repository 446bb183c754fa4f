// Page-locked (pinned) host memory (CUDA builds only): copies from and to it run asynchronously
// at full PCIe/NVLink speed, where pageable memory is staged through a driver buffer.
//
// PinnedHostAllocator is a HostAllocator, so `Tensor::empty(shape, dtype, pinned_host_allocator())`
// makes a pinned CPU tensor. It caches freed blocks in size classes (cudaHostAlloc and
// cudaFreeHost are slow and synchronize), with the same stats as the other allocators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/allocator.h"

namespace rinfer::cuda {

class PinnedHostAllocator final : public HostAllocator {
 public:
  explicit PinnedHostAllocator(uint64_t max_cached_bytes = uint64_t{1} << 30);
  ~PinnedHostAllocator() override;
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  // Fails with kOutOfMemory (or kDeviceError when there is no usable CUDA driver).
  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  AllocatorStats stats() const override;
  std::string_view name() const override { return "pinned"; }

  void release_cached();

 private:
  void trim_locked(uint64_t limit);

  mutable std::mutex mu_;
  uint64_t max_cached_bytes_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  AllocatorStats stats_;
};

// The process-wide pinned allocator (never destroyed).
PinnedHostAllocator& pinned_host_allocator();

}  // namespace rinfer::cuda
