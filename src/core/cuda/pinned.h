// Page-locked (pinned) host memory (CUDA builds only): copies from and to it run asynchronously
// at full PCIe/NVLink speed, where pageable memory is staged through a driver buffer.
//
// PinnedHostAllocator is a HostAllocator, so `Tensor::empty(shape, dtype, pinned_host_allocator())`
// makes a pinned CPU tensor. It is the caching host allocator over cudaHostAlloc/cudaFreeHost
// (slow, synchronizing calls), with the same size classes and stats.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/allocator.h"

namespace rinfer::cuda {

class PinnedHostAllocator final : public CachingHostAllocator {
 public:
  // allocate() fails with kOutOfMemory (or kDeviceError when there is no usable CUDA driver).
  explicit PinnedHostAllocator(uint64_t max_cached_bytes = uint64_t{1} << 30);
  std::string_view name() const override { return "pinned"; }
};

// The process-wide pinned allocator (never destroyed).
PinnedHostAllocator& pinned_host_allocator();

}  // namespace rinfer::cuda
