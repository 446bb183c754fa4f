// Rows of activations to FP8 E4M3 with one scale per row (the dynamic per-token scales of W8A8
// FP8): scale = max|x| / 448 (1 for an all-zero row, NaN when the row holds a non-finite value),
// q = e4m3(x * (1 / scale)), rounded to nearest even as core/quantize_8bit.h's
// quantize_rows_f8e4m3, which it matches bit for bit (IEEE division and reciprocal, no fast-math
// forms). One block per row. Rows of up to kThreads * kHeld elements are read once into registers
// (a decode step's rows: one read, one reduction, one write); longer rows are read twice.
// Launched in plain stream order, as matvec_f8.cu is (which says why).
#include "ops/cuda/common.cuh"
#include "ops/cuda/f8_rows.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 1024;
constexpr int kHeld = 16;  // elements a thread holds

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
  uint8_t* qr = q + row * n;
  float m = 0.0f;
  bool bad = false;
  if (n <= static_cast<int64_t>(kThreads) * kHeld) {
    // Element threadIdx.x + k * kThreads, held in registers.
    float v[kHeld];
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      v[k] = i < n ? load_act<kBf16>(x, base + i) : 0.0f;
      const float a = fabsf(v[k]);
      bad |= !(a <= FLT_MAX);  // NaN or infinity
      m = fmaxf(m, a);
    }
    const float s = f8_row_scale(m, bad, scratch);
    const float inv = __frcp_rn(s);
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (i < n) qr[i] = static_cast<uint8_t>(f8_code(v[k], inv));
    }
    if (threadIdx.x == 0) scale[row] = s;
    return;
  }
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float a = fabsf(load_act<kBf16>(x, base + i));
    bad |= !(a <= FLT_MAX);
    m = fmaxf(m, a);
  }
  const float s = f8_row_scale(m, bad, scratch);
  const float inv = __frcp_rn(s);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    qr[i] = static_cast<uint8_t>(f8_code(load_act<kBf16>(x, base + i), inv));
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
