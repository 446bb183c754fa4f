// Rows of activations to FP8 E4M3 with one scale per row (the dynamic per-token scales of W8A8
// FP8): scale = max|x| / 448 (1 for an all-zero row, NaN when the row holds a non-finite value),
// q = e4m3(x * (1 / scale)), rounded to nearest even as core/quantize_8bit.h's
// quantize_rows_f8e4m3, which it matches bit for bit (IEEE division and reciprocal, no fast-math
// forms). One block of 256 threads per row, reading the row twice (its maximum, then its codes)
// from L2; faster than 1024 threads holding the row in registers (docs/gpu-inference.md, FP8).
// Launched in plain stream order, as matvec_f8.cu is (which says why).
#include "ops/cuda/common.cuh"
#include "ops/cuda/f8_rows.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 256;

template <bool kBf16>
__device__ __forceinline__ float load_act(const void* x, int64_t i) {
  if constexpr (kBf16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
  } else {
    return static_cast<const float*>(x)[i];
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads)
    quantize_f8_rows_kernel(const void* x, int64_t n, int64_t ld, uint8_t* __restrict__ q,
                            float* __restrict__ scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * ld;
  float m = 0.0f;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float a = fabsf(load_act<kBf16>(x, base + i));
    bad |= !(a <= FLT_MAX);  // NaN or infinity
    m = fmaxf(m, a);
  }
  const float s = f8_row_scale(m, bad, scratch);
  const float inv = __frcp_rn(s);
  uint8_t* qr = q + row * n;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    qr[i] = static_cast<uint8_t>(f8_code(load_act<kBf16>(x, base + i), inv));
  }
  if (threadIdx.x == 0) scale[row] = s;
}

}  // namespace

cudaError_t launch_quantize_f8_rows(const void* x, bool bf16, int64_t n_rows, int64_t n, int64_t ld,
                                    uint8_t* q, float* scale, cudaStream_t stream) {
  if (n_rows <= 0) return cudaGetLastError();
  const dim3 grid(static_cast<unsigned>(n_rows));
  if (bf16) {
    quantize_f8_rows_kernel<true><<<grid, kThreads, 0, stream>>>(x, n, ld, q, scale);
  } else {
    quantize_f8_rows_kernel<false><<<grid, kThreads, 0, stream>>>(x, n, ld, q, scale);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
