#include "core/allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace rinfer {
namespace {

TEST(CachingHostAllocator, SizeClassesBoundWaste) {
  EXPECT_EQ(CachingHostAllocator::size_class(0), 64u);
  EXPECT_EQ(CachingHostAllocator::size_class(1), 64u);
  EXPECT_EQ(CachingHostAllocator::size_class(65), 128u);
  EXPECT_EQ(CachingHostAllocator::size_class(4096), 4096u);
  for (size_t n : {4097ul, 5000ul, 100000ul, 123456789ul, (1ul << 40) + 1}) {
    size_t c = CachingHostAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n + n / 4) << n;
    EXPECT_EQ(CachingHostAllocator::size_class(c), c) << "a class is its own class";
  }
}

TEST(CachingHostAllocator, ReusesFreedBlocksAndCountsStats) {
  CachingHostAllocator a;
  void* p = a.allocate(1000).value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHostAlignment, 0u);
  std::memset(p, 0xab, 1000);
  auto s = a.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.live_bytes, 1024u);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  void* q = a.allocate(1010).value();  // same class
  EXPECT_EQ(q, p);
  s = a.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.live_bytes, 1024u);
  EXPECT_EQ(s.cached_bytes, 0u);
  void* r = a.allocate(1000).value();  // class empty again: a miss
  EXPECT_NE(r, q);
  EXPECT_EQ(a.stats().peak_bytes, 2048u);
  a.deallocate(q, 1010);
  a.deallocate(r, 1000);
  s = a.stats();
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.frees, 3u);
  a.release_cached();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

TEST(CachingHostAllocator, CacheIsCapped) {
  CachingHostAllocator a(/*max_cached_bytes=*/10000);
  std::vector<void*> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(a.allocate(4096).value());
  for (void* p : ps) a.deallocate(p, 4096);
  EXPECT_LE(a.stats().cached_bytes, 10000u);
  EXPECT_EQ(a.stats().live_bytes, 0u);
}

TEST(HostAllocators, RandomWorkloadKeepsDataIntact) {
  CachingHostAllocator caching;
  PlainHostAllocator plain;
  for (HostAllocator* a :
       {static_cast<HostAllocator*>(&caching), static_cast<HostAllocator*>(&plain)}) {
    std::mt19937 rng(42);
    struct Live {
      uint8_t* p;
      size_t n;
      uint8_t tag;
    };
    std::vector<Live> live;
    for (int step = 0; step < 2000; ++step) {
      if (!live.empty() && rng() % 2 == 0) {
        size_t k = rng() % live.size();
        for (size_t i = 0; i < live[k].n; ++i) ASSERT_EQ(live[k].p[i], live[k].tag) << a->name();
        a->deallocate(live[k].p, live[k].n);
        live.erase(live.begin() + static_cast<long>(k));
      } else {
        size_t n = 1 + rng() % 20000;
        auto* p = static_cast<uint8_t*>(a->allocate(n).value());
        auto tag = static_cast<uint8_t>(1 + rng() % 255);
        std::memset(p, tag, n);
        live.push_back({p, n, tag});
      }
    }
    for (auto& l : live) a->deallocate(l.p, l.n);
    EXPECT_EQ(a->stats().live_bytes, 0u) << a->name();
    EXPECT_GT(a->stats().peak_bytes, 0u);
  }
  EXPECT_GT(caching.stats().hits, 0u);
  EXPECT_EQ(plain.stats().hits, 0u);
}

TEST(HostAllocators, HugeRequestFailsCleanly) {
  CachingHostAllocator a;
  auto r = a.allocate(size_t{1} << 62);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  PlainHostAllocator b;
  EXPECT_FALSE(b.allocate(~size_t{0} - 10).ok());
}

}  // namespace
}  // namespace rinfer
