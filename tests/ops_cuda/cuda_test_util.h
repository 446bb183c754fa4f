// Helpers for the CUDA tests (built only with RINFER_CUDA): a fixture that skips without a usable
// GPU, device upload/download, output poisoning, random quantized weights.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "core/cuda_info.h"
#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "core/tensor.h"
#include "test_util.h"

#define CU_ASSERT_OK(expr)                                           \
  do {                                                               \
    const ::rinfer::Status cu_st_ = (expr);                          \
    ASSERT_TRUE(cu_st_.ok()) << #expr << ": " << cu_st_.to_string(); \
  } while (0)

#define CU_ASSIGN_OR_FAIL(lhs, rexpr) \
  CU_ASSIGN_OR_FAIL_IMPL(RINFER_CONCAT(cu_r_, __LINE__), lhs, rexpr)
#define CU_ASSIGN_OR_FAIL_IMPL(tmp, lhs, rexpr)                        \
  auto tmp = (rexpr);                                                  \
  ASSERT_TRUE(tmp.ok()) << #rexpr << ": " << tmp.status().to_string(); \
  lhs = std::move(tmp).value()

namespace rinfer::test {

// Skips every test of a suite when there is no usable CUDA device; owns a stream on device 0.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devices = cuda_devices();
    if (!devices.ok()) GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
    auto s = cuda::Stream::create(0);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    stream_ = std::move(s).value();
  }
  // Work left on the stream finishes before it goes: its cached blocks may be handed to a new
  // stream that happens to get the same handle.
  void TearDown() override {
    if (stream_.get() != nullptr) EXPECT_TRUE(stream_.synchronize().ok());
  }
  cudaStream_t stream() const { return stream_.get(); }

  // A device copy of `v` (bytes), on this fixture's stream.
  template <typename T>
  cuda::DeviceBuffer upload(const std::vector<T>& v) {
    auto b = cuda::DeviceBuffer::create(v.size() * sizeof(T), 0, stream());
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return {};
    if (!v.empty()) {
      EXPECT_EQ(cudaMemcpyAsync(b->data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice,
                                stream()),
                cudaSuccess);
    }
    return std::move(b).value();
  }
  // An uninitialized device buffer of n elements filled with 0xff bytes (NaN as f32 and bf16).
  template <typename T>
  cuda::DeviceBuffer poisoned(size_t n) {
    auto b = cuda::DeviceBuffer::create(n * sizeof(T), 0, stream());
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return {};
    EXPECT_EQ(cudaMemsetAsync(b->data(), 0xff, n * sizeof(T), stream()), cudaSuccess);
    return std::move(b).value();
  }
  template <typename T>
  std::vector<T> download(const cuda::DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    if (n > 0) {
      EXPECT_EQ(cudaMemcpy(v.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }

  cuda::Stream stream_;
};

// Counts NaN / inf entries (a poisoned output left unwritten shows up as NaN).
inline size_t count_non_finite(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += std::isfinite(x) ? 0 : 1;
  return n;
}

inline std::vector<float> bf16_to_f32(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = rinfer::bf16_to_f32(v[i]);
  return out;
}

inline std::vector<float> round_bf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = rinfer::bf16_to_f32(rinfer::f32_to_bf16(v[i]));
  return out;
}

// A random [n_out, n_in] weight of dtype t (never zeros): floats in [-1, 1) for scalar types;
// random quant bytes with sane f16 scales for block types.
inline Tensor random_weight(DType t, int64_t n_out, int64_t n_in, uint64_t seed) {
  auto r = Tensor::empty({n_out, n_in}, t);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  Tensor w = std::move(r).value();
  const uint64_t bytes = w.nbytes();
  auto* p = static_cast<uint8_t*>(w.mutable_data());
  if (!is_quantized(t)) {
    const auto f = random_floats(static_cast<size_t>(n_out * n_in), seed);
    for (size_t i = 0; i < f.size(); ++i) {
      if (t == DType::kF32) {
        std::memcpy(p + 4 * i, &f[i], 4);
      } else {
        const uint16_t h = t == DType::kF16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
    }
    return w;
  }
  const auto rb = random_bytes(bytes, seed);
  std::memcpy(p, rb.data(), bytes);
  const auto scales = random_floats(bytes, seed + 1, 0.002f, 0.03f);
  const DTypeTraits& tr = dtype_traits(t);
  const int64_t n_blocks = static_cast<int64_t>(bytes) / tr.block_bytes;
  auto put_f16 = [&](int64_t block, size_t off, size_t si) {
    const uint16_t h = f32_to_f16(scales[si % scales.size()]);
    std::memcpy(p + block * tr.block_bytes + static_cast<int64_t>(off), &h, 2);
  };
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto bi = static_cast<size_t>(b);
    switch (t) {
      case DType::kQ4_0: put_f16(b, offsetof(BlockQ4_0, d), 2 * bi); break;
      case DType::kQ4_1:
        put_f16(b, offsetof(BlockQ4_1, d), 2 * bi);
        put_f16(b, offsetof(BlockQ4_1, m), 2 * bi + 1);
        break;
      case DType::kQ5_0: put_f16(b, offsetof(BlockQ5_0, d), 2 * bi); break;
      case DType::kQ8_0: put_f16(b, offsetof(BlockQ8_0, d), 2 * bi); break;
      case DType::kQ4_K:
        put_f16(b, offsetof(BlockQ4_K, d), 2 * bi);
        put_f16(b, offsetof(BlockQ4_K, dmin), 2 * bi + 1);
        break;
      case DType::kQ6_K: put_f16(b, offsetof(BlockQ6_K, d), 2 * bi); break;
      default: ADD_FAILURE() << "random_weight: no recipe for " << dtype_name(t); break;
    }
  }
  return w;
}

}  // namespace rinfer::test
