// Host memory allocators. Every block is 64-byte aligned (a cache line, and the widest SIMD
// load). CachingHostAllocator keeps freed blocks in size classes and hands them out again,
// so a decode loop that allocates the same shapes every step stops calling the OS;
// PlainHostAllocator is the baseline that always calls aligned_alloc/free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

inline constexpr size_t kHostAlignment = 64;

struct AllocatorStats {
  uint64_t live_bytes = 0;    // bytes handed out and not yet returned (rounded sizes)
  uint64_t peak_bytes = 0;    // max of live_bytes
  uint64_t cached_bytes = 0;  // bytes held in free lists (caching allocator only)
  uint64_t hits = 0;          // requests served from the cache
  uint64_t misses = 0;        // requests that went to the system allocator
  uint64_t allocations = 0;   // successful allocate() calls
  uint64_t frees = 0;         // deallocate() calls
};

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // Returns a 64-byte-aligned block of at least `bytes` bytes (a zero-byte request gets a
  // valid, distinct block). Fails with kOutOfMemory, never throws.
  virtual Result<void*> allocate(size_t bytes) = 0;
  // `bytes` must be the size passed to allocate().
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual std::string_view name() const = 0;
};

class PlainHostAllocator final : public HostAllocator {
 public:
  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  AllocatorStats stats() const override;
  std::string_view name() const override { return "plain"; }

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

class CachingHostAllocator : public HostAllocator {
 public:
  // Where blocks come from and go back to: 64-byte-aligned aligned_alloc/free by default;
  // the pinned allocator (src/core/cuda/pinned.h) plugs in cudaHostAlloc/cudaFreeHost.
  struct Backing {
    Result<void*> (*alloc)(size_t bytes);
    void (*free)(void* p);
  };
  static Backing system_backing();

  // Cached (free) bytes above `max_cached_bytes` are returned to the backing.
  explicit CachingHostAllocator(uint64_t max_cached_bytes = uint64_t{1} << 30,
                                Backing backing = system_backing());
  ~CachingHostAllocator() override;
  CachingHostAllocator(const CachingHostAllocator&) = delete;
  CachingHostAllocator& operator=(const CachingHostAllocator&) = delete;

  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  AllocatorStats stats() const override;
  std::string_view name() const override { return "caching"; }

  // Frees every cached block.
  void release_cached();

  // The size class a request is rounded up to: multiples of 64 bytes up to 4 KiB, then four
  // classes per power of two (at most 25% waste).
  static size_t size_class(size_t bytes);

 private:
  void trim_locked(uint64_t limit);

  mutable std::mutex mu_;
  uint64_t max_cached_bytes_;
  Backing backing_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  AllocatorStats stats_;
};

// The process-wide host allocator (caching). Never destroyed, so it outlives every tensor.
HostAllocator& default_host_allocator();
// Gives the default allocator's cached (free) blocks back to the system, so that the next
// measurement of resident memory does not start with another run's cache in it.
void release_default_host_cache();

}  // namespace rinfer
