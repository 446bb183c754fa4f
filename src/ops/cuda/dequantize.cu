// Dequantization of a device weight to a bf16 matrix (the GEMM path for weights that are not
// bf16: dequantized per call into a workspace, see ops_cuda.h). One thread per 16-byte chunk;
// 16-byte stores of 8 bf16.
#include <algorithm>

#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {
namespace {

// Stores v[0, n) as bf16 at dst (16-byte aligned when n == 8 groups are whole).
template <int N>
__device__ __forceinline__ void store_bf16_run(uint16_t* dst, const float* v, int64_t n_valid) {
  if (n_valid >= N) {
#pragma unroll
    for (int i = 0; i < N; i += 8) {
      uint4 p;
      p.x = pack_bf16x2(v[i], v[i + 1]);
      p.y = pack_bf16x2(v[i + 2], v[i + 3]);
      p.z = pack_bf16x2(v[i + 4], v[i + 5]);
      p.w = pack_bf16x2(v[i + 6], v[i + 7]);
      *reinterpret_cast<uint4*>(dst + i) = p;
    }
  } else {
    for (int i = 0; i < N && i < n_valid; ++i) dst[i] = f32_to_bf16_bits(v[i]);
  }
}

template <int F>
__device__ __forceinline__ void dequant_chunk(const WeightView& w, int64_t row, int64_t c,
                                              uint16_t* __restrict__ out, int64_t ld_out) {
  constexpr int E = WFmt<F>::kEpc;
  float v[E];
  decode_chunk<F>(w, row, c, v);
  uint16_t* orow = out + row * ld_out;
  if constexpr (is_q4<F>()) {
    store_bf16_run<16>(orow + chunk_base_lo<F>(c), v, 16);
    store_bf16_run<16>(orow + chunk_base_hi<F>(c), v + 16, 16);
  } else if constexpr (E >= 8) {
    store_bf16_run<E>(orow + c * E, v, w.n_in - c * E);
  } else {  // f32: 4 elements, 8-byte stores
    const int64_t base = c * E;
    for (int i = 0; i < E && base + i < w.n_in; ++i) orow[base + i] = f32_to_bf16_bits(v[i]);
  }
}

// grid (chunks of a row / blockDim.x, rows): no division per thread (a 64-bit division per
// chunk held the Q4 kernels near 450 GB/s); rows past gridDim.y loop.
template <int F>
__global__ void dequant_kernel(WeightView w, uint16_t* __restrict__ out, int64_t ld_out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= w_chunks<F>(w)) return;
  for (int64_t row = blockIdx.y; row < w.n_out; row += gridDim.y)
    dequant_chunk<F>(w, row, c, out, ld_out);
}

template <int F>
cudaError_t launch_f(const WeightView& w, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  const int64_t nc = w_chunks<F>(w);
  const int threads = nc >= 256 ? 256 : 128;
  const dim3 grid(static_cast<unsigned>((nc + threads - 1) / threads),
                  static_cast<unsigned>(std::min<int64_t>(w.n_out, 65535)));
  if (nc > 0 && w.n_out > 0) dequant_kernel<F><<<grid, threads, 0, stream>>>(w, out, ld_out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_dequant_bf16(const WeightView& w, uint16_t* out, int64_t ld_out,
                                cudaStream_t stream) {
  switch (w.format) {
    case kWF32: return launch_f<kWF32>(w, out, ld_out, stream);
    case kWF16: return launch_f<kWF16>(w, out, ld_out, stream);
    case kWBF16: return launch_f<kWBF16>(w, out, ld_out, stream);
    case kWQ8_0: return launch_f<kWQ8_0>(w, out, ld_out, stream);
    case kWQ4_0: return launch_f<kWQ4_0>(w, out, ld_out, stream);
    case kWQ4_1: return launch_f<kWQ4_1>(w, out, ld_out, stream);
    case kWQ4_K: return launch_f<kWQ4_K>(w, out, ld_out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace rinfer::cuda::kern
