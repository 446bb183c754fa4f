#include "tools/ceilings.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/quantize.h"
#include "core/tensor.h"
#include "ops/cpu/ops.h"

#if RINFER_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/cublas_lt.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "ops/cuda/ops_cuda.h"
#endif

namespace rinfer {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[maybe_unused]] double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// Every thread of the pool sums its part of a 1 GiB buffer with 64-byte vector loads (GCC vector
// extensions, so the loop is not compute bound); best of 5.
double measure_cpu_read_bandwidth(ThreadPool& pool) {
  using V = uint64_t __attribute__((vector_size(64)));  // [8] lanes
  const size_t bytes = size_t{1} << 30;
  const size_t n = bytes / sizeof(V);
  auto t = Tensor::empty({static_cast<int64_t>(bytes / 8)}, DType::kI64);
  if (!t.ok()) return 0;
  auto* data = static_cast<V*>(t->mutable_data());  // 64-byte aligned
  auto* words = t->mutable_data_as<uint64_t>();
  pool.parallel_for(0, static_cast<int64_t>(bytes / 8), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) words[i] = static_cast<uint64_t>(i) * 2654435761u;
  });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.run(pool.size(), [&](int64_t task, int) {
      const size_t per = n / static_cast<size_t>(pool.size());
      const V* p = data + static_cast<size_t>(task) * per;
      V a0 = {}, a1 = {}, a2 = {}, a3 = {};
      for (size_t i = 0; i + 4 <= per; i += 4) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
      }
      const V a = a0 ^ a1 ^ a2 ^ a3;
      uint64_t x = 0;
      for (int l = 0; l < 8; ++l) x ^= a[l];
      sink += x;
    });
    best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  return sink.load() == 42 ? best + 1e-12 : best;
}

Result<Ceilings> measure_cpu_ceilings(ThreadPool& pool) {
  Ceilings c;
  c.bandwidth_gbs = measure_cpu_read_bandwidth(pool);
  c.bandwidth_how = fmt::format("read bandwidth, {} threads over 1 GiB", pool.size());
  const int64_t n = 2048, rows = 512;
  std::vector<float> wf(static_cast<size_t>(n * n)), x(static_cast<size_t>(rows * n));
  std::vector<float> y(static_cast<size_t>(rows * n));
  uint32_t s = 12345;
  const auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  };
  for (float& v : wf) v = next();
  for (float& v : x) v = next();
  RINFER_ASSIGN_OR_RETURN(Tensor w, Tensor::empty({n, n}, DType::kQ8_0));
  RINFER_RETURN_IF_ERROR(quantize_rows(DType::kQ8_0, wf.data(), w.mutable_data(), n, n, &pool));
  cpu::OpContext ctx;
  ctx.pool = &pool;
  ctx.quantize_activations = true;
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, w, x.data(), rows, y.data()));
    if (rep > 0) best = std::max(best, 2.0 * rows * n * n / seconds_since(t0) / 1e12);
  }
  c.peak_tflops = best;
  c.peak_how = fmt::format("Q8_0 matmul 2048x2048 x {} rows (int8 dot products, {})", rows,
                           cpu::simd_target_name());
  return c;
}

#if RINFER_WITH_CUDA
Result<Ceilings> measure_cuda_ceilings(int device, int reps) {
  Ceilings c;
  RINFER_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::create(device));
  cudaStream_t st = stream.get();
  const size_t bytes = size_t{2} << 30;
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceBuffer a, cuda::DeviceBuffer::create(bytes, device, st));
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::create(bytes, device, st));
  RINFER_ASSIGN_OR_RETURN(cuda::Event e0, cuda::Event::create(device));
  RINFER_ASSIGN_OR_RETURN(cuda::Event e1, cuda::Event::create(device));
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    RINFER_RETURN_IF_ERROR(e0.record(st));
    RINFER_CUDA_RETURN(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st));
    RINFER_RETURN_IF_ERROR(e1.record(st));
    RINFER_RETURN_IF_ERROR(e1.synchronize());
    RINFER_ASSIGN_OR_RETURN(float ms, cuda::elapsed_ms(e0, e1));
    if (r > 0) t.push_back(ms);
  }
  c.bandwidth_gbs = 2.0 * static_cast<double>(bytes) / (median_of(t) * 1e-3) / 1e9;
  c.bandwidth_how = "device-to-device copy of 2 GiB (read + write)";
  RINFER_ASSIGN_OR_RETURN(cuda::CublasLt lt, cuda::CublasLt::create(device));
  const int64_t n = 8192;
  const auto nn = static_cast<size_t>(n * n * 2);
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceBuffer x, cuda::DeviceBuffer::create(nn, device, st));
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceBuffer w, cuda::DeviceBuffer::create(nn, device, st));
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceBuffer y, cuda::DeviceBuffer::create(nn, device, st));
  RINFER_RETURN_IF_ERROR(cuda::fill_random(x.data(), DType::kBF16, n * n, -1, 1, 1, st));
  RINFER_RETURN_IF_ERROR(cuda::fill_random(w.data(), DType::kBF16, n * n, -1, 1, 2, st));
  t.clear();
  for (int r = 0; r < reps + 1; ++r) {
    RINFER_RETURN_IF_ERROR(e0.record(st));
    RINFER_RETURN_IF_ERROR(cuda::gemm_lowp(lt, DType::kBF16, w.data(), n, x.data(), n, n, n, n,
                                           DType::kBF16, y.data(), 0.0f, st));
    RINFER_RETURN_IF_ERROR(e1.record(st));
    RINFER_RETURN_IF_ERROR(e1.synchronize());
    RINFER_ASSIGN_OR_RETURN(float ms, cuda::elapsed_ms(e0, e1));
    if (r > 0) t.push_back(ms);
  }
  c.peak_tflops = 2.0 * std::pow(static_cast<double>(n), 3) / (median_of(t) * 1e-3) / 1e12;
  c.peak_how = "bf16 GEMM 8192^3 through cuBLASLt";
  return c;
}
#else
Result<Ceilings> measure_cuda_ceilings(int, int) { return unsupported("this build has no CUDA"); }
#endif

}  // namespace rinfer
