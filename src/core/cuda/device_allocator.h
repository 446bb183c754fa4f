// Device memory allocators (CUDA builds only).
//
// CachingDeviceAllocator keeps freed blocks in size-class free lists per stream and hands them
// out again, so a decode loop that allocates the same shapes every step stops calling
// cudaMalloc/cudaFree (which synchronize the device). A block freed on stream S is reused only
// by later requests on S: work on S is ordered, so the next user runs after the last one, and no
// event is needed. PlainDeviceAllocator is the baseline: cudaMalloc and cudaFree every time.
//
// When cudaMalloc runs out of memory, the caching allocator frees its cache and tries once more,
// then fails with kOutOfMemory (never a crash, never a sticky CUDA error).
//
// DeviceBuffer owns one allocation (RAII, move-only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"  // AllocatorStats
#include "rinfer/status.h"

namespace rinfer::cuda {

inline constexpr size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee, kept by the cache

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // A block of at least `bytes` bytes on this allocator's device, 256-byte aligned, for use on
  // `stream` (a zero-byte request gets a valid, distinct block). Fails with kOutOfMemory or
  // kDeviceError, never throws.
  virtual Result<void*> allocate(size_t bytes, cudaStream_t stream) = 0;
  // Returns a block from allocate(); work queued on its stream may still use it.
  virtual void deallocate(void* p) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual std::string_view name() const = 0;
  virtual int device() const = 0;
};

class PlainDeviceAllocator final : public DeviceAllocator {
 public:
  explicit PlainDeviceAllocator(int device) : device_(device) {}
  Result<void*> allocate(size_t bytes, cudaStream_t stream) override;
  void deallocate(void* p) override;
  AllocatorStats stats() const override;
  std::string_view name() const override { return "plain"; }
  int device() const override { return device_; }

 private:
  int device_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> bytes
  AllocatorStats stats_;
};

class CachingDeviceAllocator final : public DeviceAllocator {
 public:
  // Cached (free) bytes above `max_cached_bytes` are returned with cudaFree.
  explicit CachingDeviceAllocator(int device, uint64_t max_cached_bytes = uint64_t{8} << 30);
  ~CachingDeviceAllocator() override;
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  Result<void*> allocate(size_t bytes, cudaStream_t stream) override;
  void deallocate(void* p) override;
  AllocatorStats stats() const override;
  std::string_view name() const override { return "caching"; }
  int device() const override { return device_; }

  // Frees every cached block (cudaFree synchronizes the device first).
  void release_cached();

  // The size class a request is rounded up to: multiples of 512 bytes up to 64 KiB, then eight
  // classes per power of two (at most 12.5% waste).
  static size_t size_class(size_t bytes);

 private:
  struct Block {
    size_t bytes;  // size class
    cudaStream_t stream;
  };
  using FreeKey = std::pair<cudaStream_t, size_t>;  // (stream, size class)

  void trim_locked(uint64_t limit);

  int device_;
  uint64_t max_cached_bytes_;
  mutable std::mutex mu_;
  std::map<FreeKey, std::vector<void*>> free_;  // cached blocks
  std::unordered_map<void*, Block> live_;       // blocks handed out
  AllocatorStats stats_;
};

// The process-wide caching allocator of device `device` (never destroyed, so it outlives every
// buffer, and never calls CUDA at exit). Fails for a device index out of range.
Result<DeviceAllocator*> default_device_allocator(int device);
// The process-wide plain (baseline) allocator of device `device`.
Result<DeviceAllocator*> plain_device_allocator(int device);
// One of the two, as a runner's strategies.allocator picks it.
Result<DeviceAllocator*> device_allocator(int device, bool plain);

// One device allocation, freed (to its allocator) when destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `allocator` nullptr: default_device_allocator(device).
  static Result<DeviceBuffer> create(size_t bytes, int device, cudaStream_t stream,
                                     DeviceAllocator* allocator = nullptr);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(ptr_, o.ptr_);
      std::swap(bytes_, o.bytes_);
      std::swap(allocator_, o.allocator_);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }
  void reset();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DeviceAllocator* allocator_ = nullptr;
};

}  // namespace rinfer::cuda
