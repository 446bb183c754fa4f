#include "core/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "core/error.h"

namespace rinfer {

namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

Result<void*> system_alloc(size_t bytes) {
  const size_t n = round_up(std::max<size_t>(bytes, 1), kHostAlignment);
  if (n < bytes) return out_of_memory("host allocation of {} bytes overflows", bytes);
  void* p = std::aligned_alloc(kHostAlignment, n);
  if (p == nullptr) return out_of_memory("host allocation of {} bytes failed", bytes);
  return p;
}

void note_alloc(AllocatorStats& s, size_t bytes) {
  s.live_bytes += bytes;
  s.peak_bytes = std::max(s.peak_bytes, s.live_bytes);
  s.allocations++;
}

}  // namespace

Result<void*> PlainHostAllocator::allocate(size_t bytes) {
  auto r = system_alloc(bytes);
  if (!r.ok()) return r;
  std::lock_guard lock(mu_);
  note_alloc(stats_, bytes);
  stats_.misses++;
  return r;
}

void PlainHostAllocator::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  std::free(p);
  std::lock_guard lock(mu_);
  stats_.live_bytes -= bytes;
  stats_.frees++;
}

AllocatorStats PlainHostAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

CachingHostAllocator::Backing CachingHostAllocator::system_backing() {
  return {system_alloc, std::free};
}

CachingHostAllocator::CachingHostAllocator(uint64_t max_cached_bytes, Backing backing)
    : max_cached_bytes_(max_cached_bytes), backing_(backing) {}

CachingHostAllocator::~CachingHostAllocator() { release_cached(); }

size_t CachingHostAllocator::size_class(size_t bytes) {
  if (bytes <= 4096) return round_up(std::max<size_t>(bytes, 1), kHostAlignment);
  // Four classes between consecutive powers of two: step = 2^(floor(log2(bytes)) - 2).
  const int log2 = static_cast<int>(std::bit_width(bytes)) - 1;
  const size_t step = size_t{1} << (log2 - 2);
  const size_t c = round_up(bytes, step);
  return c < bytes ? bytes : c;  // overflow: fall back to the exact size
}

Result<void*> CachingHostAllocator::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  {
    std::lock_guard lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= cls;
      stats_.hits++;
      note_alloc(stats_, cls);
      return p;
    }
  }
  auto r = backing_.alloc(cls);
  if (!r.ok()) {
    // Give the cache back and try once more before failing.
    release_cached();
    r = backing_.alloc(cls);
    if (!r.ok()) return r;
  }
  std::lock_guard lock(mu_);
  stats_.misses++;
  note_alloc(stats_, cls);
  return r;
}

void CachingHostAllocator::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  const size_t cls = size_class(bytes);
  std::lock_guard lock(mu_);
  stats_.live_bytes -= cls;
  stats_.frees++;
  free_[cls].push_back(p);
  stats_.cached_bytes += cls;
  if (stats_.cached_bytes > max_cached_bytes_) trim_locked(max_cached_bytes_);
}

void CachingHostAllocator::trim_locked(uint64_t limit) {
  // Largest blocks first: they free the most memory per call.
  for (auto it = free_.rbegin(); it != free_.rend() && stats_.cached_bytes > limit; ++it) {
    auto& blocks = it->second;
    while (!blocks.empty() && stats_.cached_bytes > limit) {
      backing_.free(blocks.back());
      blocks.pop_back();
      stats_.cached_bytes -= it->first;
    }
  }
}

void CachingHostAllocator::release_cached() {
  std::lock_guard lock(mu_);
  trim_locked(0);
  free_.clear();
}

AllocatorStats CachingHostAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

namespace {
CachingHostAllocator& caching_default() {
  static auto* allocator = new CachingHostAllocator();  // intentionally never destroyed
  return *allocator;
}
}  // namespace

HostAllocator& default_host_allocator() {
  return caching_default();
}

void release_default_host_cache() { caching_default().release_cached(); }

}  // namespace rinfer
