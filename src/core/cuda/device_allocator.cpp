#include "core/cuda/device_allocator.h"

#include <algorithm>
#include <bit>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace rinfer::cuda {

namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

void note_alloc(AllocatorStats& s, size_t bytes) {
  s.live_bytes += bytes;
  s.peak_bytes = std::max(s.peak_bytes, s.live_bytes);
  s.allocations++;
}

// cudaMalloc on `device`; out-of-memory clears the (non-sticky) error so later calls are clean.
Result<void*> raw_malloc(int device, size_t bytes) {
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return cuda_status(err, "cudaMalloc")
        .with_context(fmt::format("device {}: allocating {} bytes", device, bytes));
  }
  return p;
}

void raw_free(int device, void* p) {
  auto g = DeviceGuard::set(device);
  static_cast<void>(cudaFree(p));
}

}  // namespace

// ---- PlainDeviceAllocator ----

Result<void*> PlainDeviceAllocator::allocate(size_t bytes, cudaStream_t /*stream*/) {
  const size_t n = round_up(std::max<size_t>(bytes, 1), kDeviceAlignment);
  if (n < bytes) return out_of_memory("device allocation of {} bytes overflows", bytes);
  RINFER_ASSIGN_OR_RETURN(void* p, raw_malloc(device_, n));
  std::lock_guard lock(mu_);
  live_[p] = n;
  note_alloc(stats_, n);
  stats_.misses++;
  return p;
}

void PlainDeviceAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  size_t n = 0;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: ignore rather than corrupt the stats
    n = it->second;
    live_.erase(it);
    stats_.live_bytes -= n;
    stats_.frees++;
  }
  raw_free(device_, p);
}

AllocatorStats PlainDeviceAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---- CachingDeviceAllocator ----

CachingDeviceAllocator::CachingDeviceAllocator(int device, uint64_t max_cached_bytes)
    : device_(device), max_cached_bytes_(max_cached_bytes) {}

CachingDeviceAllocator::~CachingDeviceAllocator() { release_cached(); }

size_t CachingDeviceAllocator::size_class(size_t bytes) {
  constexpr size_t kSmall = 64 * 1024;
  if (bytes <= kSmall) return round_up(std::max<size_t>(bytes, 1), 512);
  // Eight classes between consecutive powers of two: step = 2^(floor(log2(bytes)) - 3).
  const int log2 = static_cast<int>(std::bit_width(bytes)) - 1;
  const size_t step = size_t{1} << (log2 - 3);
  const size_t c = round_up(bytes, step);
  return c < bytes ? round_up(bytes, kDeviceAlignment) : c;  // overflow: near-exact size
}

Result<void*> CachingDeviceAllocator::allocate(size_t bytes, cudaStream_t stream) {
  const size_t cls = size_class(bytes);
  if (cls < bytes) return out_of_memory("device allocation of {} bytes overflows", bytes);
  {
    std::lock_guard lock(mu_);
    auto it = free_.find({stream, cls});
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_.erase(it);
      stats_.cached_bytes -= cls;
      stats_.hits++;
      note_alloc(stats_, cls);
      live_[p] = {cls, stream};
      return p;
    }
  }
  auto r = raw_malloc(device_, cls);
  if (!r.ok() && r.status().code() == StatusCode::kOutOfMemory) {
    // Give the cache back to the driver and try once more before failing.
    uint64_t cached = 0;
    {
      std::lock_guard lock(mu_);
      cached = stats_.cached_bytes;
    }
    release_cached();
    r = raw_malloc(device_, cls);
    if (!r.ok()) {
      return Status(r.status().code(), fmt::format("{} (after freeing {} cached bytes)",
                                                   r.status().message(), cached));
    }
  }
  if (!r.ok()) return r.status();
  std::lock_guard lock(mu_);
  stats_.misses++;
  note_alloc(stats_, cls);
  live_[*r] = {cls, stream};
  return r;
}

void CachingDeviceAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours
  const Block b = it->second;
  live_.erase(it);
  stats_.live_bytes -= b.bytes;
  stats_.frees++;
  free_[{b.stream, b.bytes}].push_back(p);
  stats_.cached_bytes += b.bytes;
  if (stats_.cached_bytes > max_cached_bytes_) trim_locked(max_cached_bytes_);
}

void CachingDeviceAllocator::trim_locked(uint64_t limit) {
  // Largest blocks first: they free the most memory per cudaFree.
  std::vector<FreeKey> keys;
  keys.reserve(free_.size());
  for (const auto& [k, v] : free_) keys.push_back(k);
  std::sort(keys.begin(), keys.end(),
            [](const FreeKey& a, const FreeKey& b) { return a.second > b.second; });
  for (const FreeKey& k : keys) {
    if (stats_.cached_bytes <= limit) break;
    auto& blocks = free_[k];
    while (!blocks.empty() && stats_.cached_bytes > limit) {
      raw_free(device_, blocks.back());
      blocks.pop_back();
      stats_.cached_bytes -= k.second;
    }
    if (blocks.empty()) free_.erase(k);
  }
}

void CachingDeviceAllocator::release_cached() {
  std::lock_guard lock(mu_);
  trim_locked(0);
  free_.clear();
}

AllocatorStats CachingDeviceAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---- process-wide allocators ----

namespace {

Result<DeviceAllocator*> global_allocator(int device, bool caching) {
  static std::mutex mu;
  static auto* table = new std::map<std::pair<int, bool>, DeviceAllocator*>();  // never freed
  int n = 0;
  RINFER_CUDA_RETURN(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n) {
    return invalid_argument("CUDA device {} does not exist ({} devices)", device, n);
  }
  std::lock_guard lock(mu);
  DeviceAllocator*& a = (*table)[{device, caching}];
  if (a == nullptr) {
    if (caching) {
      a = new CachingDeviceAllocator(device);
    } else {
      a = new PlainDeviceAllocator(device);
    }
  }
  return a;
}

}  // namespace

Result<DeviceAllocator*> default_device_allocator(int device) {
  return global_allocator(device, true);
}

Result<DeviceAllocator*> plain_device_allocator(int device) {
  return global_allocator(device, false);
}

Result<DeviceAllocator*> device_allocator(int device, bool plain) {
  return plain ? plain_device_allocator(device) : default_device_allocator(device);
}

// ---- DeviceBuffer ----

Result<DeviceBuffer> DeviceBuffer::create(size_t bytes, int device, cudaStream_t stream,
                                          DeviceAllocator* allocator) {
  if (allocator == nullptr) {
    RINFER_ASSIGN_OR_RETURN(allocator, default_device_allocator(device));
  } else if (allocator->device() != device) {
    return invalid_argument("DeviceBuffer: allocator of device {} asked for device {}",
                            allocator->device(), device);
  }
  RINFER_ASSIGN_OR_RETURN(void* p, allocator->allocate(bytes, stream));
  DeviceBuffer b;
  b.ptr_ = p;
  b.bytes_ = bytes;
  b.allocator_ = allocator;
  return b;
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr && allocator_ != nullptr) allocator_->deallocate(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  allocator_ = nullptr;
}

}  // namespace rinfer::cuda
