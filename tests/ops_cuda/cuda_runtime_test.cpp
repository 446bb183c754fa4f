// Layer-1 CUDA runtime: device allocators (stats, reuse, per-stream free lists, the
// out-of-memory path), DeviceBuffer, streams and events, pinned host memory, to_device/to_host.
#include <gtest/gtest.h>

#include <cstring>

#include "core/cuda/device_allocator.h"
#include "core/cuda/device_tensor.h"
#include "core/cuda/pinned.h"
#include "core/cuda/stream.h"
#include "cuda_test_util.h"

namespace rinfer {
namespace {

using cuda::CachingDeviceAllocator;
using cuda::DeviceBuffer;
using cuda::PlainDeviceAllocator;

class CudaRuntime : public test::CudaTest {};

TEST(CudaAllocatorSizeClass, RoundsUpWithBoundedWaste) {
  EXPECT_EQ(CachingDeviceAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingDeviceAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingDeviceAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingDeviceAllocator::size_class(64 * 1024), 64u * 1024);
  for (size_t b : {size_t{65537}, size_t{1} << 20, (size_t{1} << 20) + 1, size_t{123456789},
                   size_t{7} << 30}) {
    const size_t c = CachingDeviceAllocator::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(static_cast<double>(c - b), 0.125 * static_cast<double>(b)) << b;
    EXPECT_EQ(c % 256, 0u) << b;
  }
}

TEST_F(CudaRuntime, CachingAllocatorReusesBlocksAndCountsStats) {
  CachingDeviceAllocator a(0);
  auto p1 = a.allocate(1000, stream());
  ASSERT_TRUE(p1.ok()) << p1.status().to_string();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p1) % 256, 0u);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.live_bytes, 1024u);
  a.deallocate(*p1);
  s = a.stats();
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 1024u);
  // Same class, same stream: the cached block comes back.
  auto p2 = a.allocate(900, stream());
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(*p2, *p1);
  s = a.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.cached_bytes, 0u);
  // Another stream does not get a block freed on this one.
  a.deallocate(*p2);
  auto other = cuda::Stream::create(0);
  ASSERT_TRUE(other.ok());
  auto p3 = a.allocate(900, other->get());
  ASSERT_TRUE(p3.ok());
  EXPECT_NE(*p3, *p2);
  EXPECT_EQ(a.stats().misses, 2u);
  auto p4 = a.allocate(5000, stream());
  ASSERT_TRUE(p4.ok());
  EXPECT_EQ(a.stats().peak_bytes, 1024u + 5120u);
  a.deallocate(*p3);
  a.deallocate(*p4);
  EXPECT_EQ(a.stats().allocations, 4u);
  EXPECT_EQ(a.stats().frees, 4u);
  a.release_cached();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  // The memory works: write and read back through it.
  auto p5 = a.allocate(256, stream());
  ASSERT_TRUE(p5.ok());
  ASSERT_EQ(cudaMemsetAsync(*p5, 0x5a, 256, stream()), cudaSuccess);
  uint8_t h[256] = {};
  ASSERT_EQ(cudaMemcpyAsync(h, *p5, 256, cudaMemcpyDeviceToHost, stream()), cudaSuccess);
  CU_ASSERT_OK(stream_.synchronize());
  EXPECT_EQ(h[0], 0x5a);
  EXPECT_EQ(h[255], 0x5a);
  a.deallocate(*p5);
}

TEST_F(CudaRuntime, CacheIsTrimmedAboveItsLimit) {
  CachingDeviceAllocator a(0, /*max_cached_bytes=*/4096);
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) {
    auto p = a.allocate(2048, stream());
    ASSERT_TRUE(p.ok());
    ps.push_back(*p);
  }
  for (void* p : ps) a.deallocate(p);
  EXPECT_LE(a.stats().cached_bytes, 4096u);
}

TEST_F(CudaRuntime, OutOfMemoryIsAStatusAfterFreeingTheCache) {
  CachingDeviceAllocator a(0);
  auto small = a.allocate(1 << 20, stream());
  ASSERT_TRUE(small.ok());
  a.deallocate(*small);
  EXPECT_GT(a.stats().cached_bytes, 0u);
  auto huge = a.allocate(size_t{1} << 50, stream());  // 1 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory) << huge.status().to_string();
  EXPECT_EQ(a.stats().cached_bytes, 0u);  // the cache was given back before the retry
  // The error is not sticky: the device still works.
  auto after = a.allocate(4096, stream());
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  a.deallocate(*after);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  PlainDeviceAllocator plain(0);
  auto huge2 = plain.allocate(size_t{1} << 50, stream());
  ASSERT_FALSE(huge2.ok());
  EXPECT_EQ(huge2.status().code(), StatusCode::kOutOfMemory);
  auto ok = plain.allocate(100, stream());
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(plain.stats().live_bytes, 256u);
  plain.deallocate(*ok);
  EXPECT_EQ(plain.stats().live_bytes, 0u);
  EXPECT_EQ(plain.stats().misses, 1u);
}

TEST_F(CudaRuntime, BufferFreesToItsAllocator) {
  CU_ASSIGN_OR_FAIL(cuda::DeviceAllocator * plain, cuda::plain_device_allocator(0));
  const uint64_t live0 = plain->stats().live_bytes;
  {
    CU_ASSIGN_OR_FAIL(DeviceBuffer b, DeviceBuffer::create(10000, 0, stream(), plain));
    EXPECT_EQ(b.bytes(), 10000u);
    EXPECT_GT(plain->stats().live_bytes, live0);
    DeviceBuffer moved = std::move(b);
    EXPECT_TRUE(b.empty());
    EXPECT_FALSE(moved.empty());
  }
  EXPECT_EQ(plain->stats().live_bytes, live0);
  EXPECT_FALSE(cuda::default_device_allocator(1 << 20).ok());  // no such device
}

TEST_F(CudaRuntime, EventsTimeWork) {
  CU_ASSIGN_OR_FAIL(cuda::Event a, cuda::Event::create(0));
  CU_ASSIGN_OR_FAIL(cuda::Event b, cuda::Event::create(0));
  DeviceBuffer buf = poisoned<uint8_t>(64 << 20);
  CU_ASSERT_OK(a.record(stream()));
  ASSERT_EQ(cudaMemsetAsync(buf.data(), 1, 64 << 20, stream()), cudaSuccess);
  CU_ASSERT_OK(b.record(stream()));
  CU_ASSERT_OK(b.synchronize());
  CU_ASSIGN_OR_FAIL(float ms, cuda::elapsed_ms(a, b));
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 1000.0f);
}

TEST_F(CudaRuntime, PinnedTensorsRoundTrip) {
  auto& pinned = cuda::pinned_host_allocator();
  const auto vals = test::random_floats(1000, 7);
  CU_ASSIGN_OR_FAIL(Tensor h, Tensor::empty({10, 100}, DType::kF32, pinned));
  std::memcpy(h.mutable_data(), vals.data(), vals.size() * 4);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  CU_ASSIGN_OR_FAIL(Tensor d, cuda::to_device(h, Device::cuda(0), stream()));
  CU_ASSIGN_OR_FAIL(Tensor back, cuda::to_host(d, stream(), pinned));
  EXPECT_EQ(std::memcmp(back.data(), vals.data(), vals.size() * 4), 0);
  const AllocatorStats s = pinned.stats();
  EXPECT_GE(s.allocations, 2u);
  EXPECT_GT(s.live_bytes, 0u);
}

TEST_F(CudaRuntime, ToDeviceAndBackKeepsBytesShapeAndDtype) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kQ4_K, DType::kQ8_0}) {
    const Tensor w = test::random_weight(t, 3, 512, 11);
    CU_ASSIGN_OR_FAIL(Tensor d, cuda::to_device(w, Device::cuda(0), stream()));
    EXPECT_TRUE(d.device().is_cuda());
    EXPECT_EQ(d.shape(), w.shape());
    EXPECT_EQ(d.dtype(), t);
    // Device to device, then back to the host.
    CU_ASSIGN_OR_FAIL(Tensor d2, cuda::to_device(d, Device::cuda(0), stream()));
    EXPECT_NE(d2.data(), d.data());
    CU_ASSIGN_OR_FAIL(Tensor back, cuda::to_host(d2, stream()));
    ASSERT_EQ(back.nbytes(), w.nbytes());
    EXPECT_EQ(std::memcmp(back.data(), w.data(), w.nbytes()), 0) << dtype_name(t);
  }
  // A strided source is made contiguous first.
  const auto vals = test::random_floats(6 * 8, 3);
  CU_ASSIGN_OR_FAIL(Tensor m, Tensor::from_f32({6, 8}, vals));
  CU_ASSIGN_OR_FAIL(Tensor mt, m.transpose(0, 1));  // [8, 6], strided
  CU_ASSIGN_OR_FAIL(Tensor d, cuda::to_device(mt, Device::cuda(0), stream()));
  CU_ASSIGN_OR_FAIL(Tensor back, cuda::to_host(d, stream()));
  ASSERT_EQ(back.dim(0), 8);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(back.data_as<float>()[i * 6 + j], vals[j * 8 + i]);
  }
  // Errors are values.
  EXPECT_FALSE(cuda::to_host(m, stream()).ok());
  EXPECT_FALSE(cuda::to_device(m, Device::cpu(), stream()).ok());
  EXPECT_FALSE(cuda::to_device(Tensor(), Device::cuda(0), stream()).ok());
}

}  // namespace
}  // namespace rinfer
