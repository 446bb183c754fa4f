// Helpers for the CPU op tests: random weights of every dtype, the SIMD targets to test, and a
// scope that pins the runtime dispatch to one target.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "core/tensor.h"
#include "hwy/targets.h"
#include "test_util.h"

namespace rinfer::test {

inline void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Random bytes for `n_rows` rows of `n` elements of dtype t, with the scale fields of block
// formats replaced by sane values (so that dequantized weights are O(0.01 .. 1), never NaN)
// and float element types filled from random floats in [-1, 1).
inline std::vector<uint8_t> random_weights(DType t, int64_t n_rows, int64_t n, uint64_t seed) {
  const DTypeTraits& tr = dtype_traits(t);
  const int64_t row_bytes = n / tr.block_size * tr.block_bytes;
  const auto total = static_cast<size_t>(n_rows * row_bytes);
  std::vector<uint8_t> w = random_bytes(total, seed);
  std::mt19937_64 rng(seed ^ 0x9E3779B97F4A7C15ull);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  auto sgn = [&] { return (rng() & 1) != 0 ? 1.0f : -1.0f; };
  const int64_t n_blocks = static_cast<int64_t>(total) / tr.block_bytes;
  const std::vector<float> f = random_floats(static_cast<size_t>(n_rows * n), seed + 1);
  switch (t) {
    case DType::kF32: std::memcpy(w.data(), f.data(), total); break;
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < f.size(); ++i) {
        const uint16_t h = t == DType::kF16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
        std::memcpy(w.data() + 2 * i, &h, 2);
      }
      break;
    case DType::kF64:
      for (size_t i = 0; i < f.size(); ++i) {
        const double d = f[i];
        std::memcpy(w.data() + 8 * i, &d, 8);
      }
      break;
    case DType::kF8E4M3:
      for (auto& b : w)
        if ((b & 0x7F) == 0x7F) b = 0x38;  // no NaN
      break;
    case DType::kF8E5M2:
      for (auto& b : w)
        if ((b & 0x7C) == 0x7C) b = 0x3C;  // no inf / NaN
      break;
    case DType::kI32:
      for (size_t i = 0; i < f.size(); ++i) {
        const auto v = static_cast<int32_t>(f[i] * 1000.0f);
        std::memcpy(w.data() + 4 * i, &v, 4);
      }
      break;
    case DType::kI64:
      for (size_t i = 0; i < f.size(); ++i) {
        const auto v = static_cast<int64_t>(f[i] * 1000.0f);
        std::memcpy(w.data() + 8 * i, &v, 8);
      }
      break;
    default: break;
  }
  for (int64_t b = 0; b < n_blocks && tr.is_quantized; ++b) {
    uint8_t* p = w.data() + b * tr.block_bytes;
    switch (t) {
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kQ8_0: put_f16(p, sgn() * 0.01f * u(rng)); break;
      case DType::kQ4_1:
      case DType::kQ5_1:
        put_f16(p, 0.01f * u(rng));
        put_f16(p + 2, -0.08f * u(rng));
        break;
      case DType::kQ2_K:
        put_f16(p + offsetof(BlockQ2_K, d), 0.01f * u(rng));
        put_f16(p + offsetof(BlockQ2_K, dmin), 0.005f * u(rng));
        break;
      case DType::kQ3_K: put_f16(p + offsetof(BlockQ3_K, d), sgn() * 0.002f * u(rng)); break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        put_f16(p, 0.001f * u(rng));
        put_f16(p + 2, 0.002f * u(rng));
        break;
      case DType::kQ6_K: put_f16(p + offsetof(BlockQ6_K, d), sgn() * 0.0005f * u(rng)); break;
      case DType::kQ8_K: {
        const float d = sgn() * 0.01f * u(rng);
        std::memcpy(p, &d, 4);
        break;
      }
      default: break;
    }
  }
  return w;
}

// A contiguous CPU tensor [n_rows, n] holding `bytes`.
inline Tensor make_tensor(DType t, int64_t n_rows, int64_t n, const std::vector<uint8_t>& bytes) {
  auto r = Tensor::empty({n_rows, n}, t);
  if (!r.ok()) return Tensor();
  Tensor w = std::move(r).value();
  std::memcpy(w.mutable_data(), bytes.data(), bytes.size());
  return w;
}

// The runtime-dispatch targets this machine can run, best first (always ends with the scalar
// fallback). ops compiles AVX3_DL, AVX2, SSE4 and the scalar target on x86.
inline std::vector<int64_t> simd_targets_to_test() {
  const int64_t supported = hwy::SupportedTargets();
  std::vector<int64_t> out;
  for (int64_t t :
       {int64_t{HWY_AVX3_DL}, int64_t{HWY_AVX2}, int64_t{HWY_SSE4}, int64_t{HWY_NEON}}) {
    if ((supported & t) != 0) out.push_back(t);
  }
  out.push_back(HWY_SCALAR);
  return out;
}

// Pins the dispatch to `target` (and the scalar fallback) for its lifetime.
class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(int64_t target) {
    hwy::SetSupportedTargetsForTest(target | HWY_SCALAR);
  }
  ~ScopedSimdTarget() { hwy::SetSupportedTargetsForTest(0); }
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;
};

inline std::string simd_target_label(int64_t target) { return hwy::TargetName(target); }

}  // namespace rinfer::test
