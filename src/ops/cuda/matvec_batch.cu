// Small-batch decode: Y[n_rows, n_out] = X W^T for 1 <= n_rows <= kMatvecBatchMaxRows rows of
// bf16 activations, W in the device layout of any weight format. Memory-bound like the matvec
// (matvec.cu): every weight byte is read once for all rows, with 16-byte streaming loads, and
// quantized weights are dequantized in registers (the GEMM path converts them to bf16 in memory
// on every call, which costs a write and a read of the whole matrix per step).
//
// Work split: a warp owns one output row and its lanes walk the row in 16-byte chunks (lane l
// takes chunks l, l + 32, ...), kUnroll chunks in flight; each chunk is dequantized once and
// multiplied with the same elements of every activation row (read through L1: the rows of X are
// small and shared by every warp). NB (2, 4 or 8) is the row bucket the kernel is compiled for;
// rows past n_rows are skipped.
#include "ops/cuda/matvec_common.cuh"
#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {

namespace {

constexpr int kThreads = 128;  // 4 warps, one output row each
constexpr int kUnroll = 2;

// N bf16 activations from x + base (16-byte aligned, N a multiple of 8) as floats.
template <int N>
__device__ __forceinline__ void load_bf16(const uint16_t* __restrict__ x, float (&xr)[N]) {
#pragma unroll
  for (int i = 0; i < N; i += 8) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(x + i));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      xr[i + 2 * k] = bf16_lo(words[k]);
      xr[i + 2 * k + 1] = bf16_hi(words[k]);
    }
  }
}

template <int F, int NB>
__global__ void __launch_bounds__(kThreads)
    matvec_batch_kernel(WeightView w, const uint16_t* __restrict__ x, int n_rows,
                        float* __restrict__ y) {
  constexpr int E = WFmt<F>::kEpc;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
  const int32_t nc = row < w.n_out ? static_cast<int32_t>(w_chunks<F>(w)) : 0;
  const MvRows rs = matvec_rows<F>(w, row);
  float acc[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) acc[b] = 0.0f;

  for (int32_t c0 = lane; c0 < nc; c0 += kWarp * kUnroll) {
    uint4 wv[kUnroll][1];
    uint4 hdr[kUnroll][1];
    uint32_t sc[kUnroll][1];
    matvec_load_step<F, kUnroll, 1>(rs, c0, kWarp, nc, wv, hdr, sc);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t c = c0 + u * kWarp;
      if (c >= nc) break;
      float v[E];
      decode_words<F>(wv[u][0], hdr[u][0], sc[u][0], c, v);
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        if (b >= n_rows) break;
        const uint16_t* xb = x + static_cast<int64_t>(b) * w.n_in;
        float s = 0.0f;
        if constexpr (is_q4<F>()) {
          float xl[16], xh[16];
          load_bf16(xb + chunk_base_lo<F>(c), xl);
          load_bf16(xb + chunk_base_hi<F>(c), xh);
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            s = fmaf(v[i], xl[i], s);
            s = fmaf(v[16 + i], xh[i], s);
          }
        } else {
          float xr[E];
          load_bf16(xb + static_cast<int64_t>(c) * E, xr);
#pragma unroll
          for (int i = 0; i < E; ++i) s = fmaf(v[i], xr[i], s);
        }
        acc[b] += s;
      }
    }
  }
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    if (b >= n_rows) break;
    const float t = warp_sum(acc[b]);
    if (lane == 0 && row < w.n_out) y[static_cast<int64_t>(b) * w.n_out + row] = t;
  }
}

template <int F, int NB>
cudaError_t launch_nb(const WeightView& w, const uint16_t* x, int n_rows, float* y,
                      cudaStream_t stream) {
  constexpr int rows_per_block = kThreads / kWarp;
  const int64_t blocks = (w.n_out + rows_per_block - 1) / rows_per_block;
  matvec_batch_kernel<F, NB>
      <<<dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream>>>(w, x, n_rows, y);
  return cudaGetLastError();
}

template <int F>
cudaError_t launch_f(const WeightView& w, const uint16_t* x, int n_rows, float* y,
                     cudaStream_t stream) {
  if (n_rows <= 2) return launch_nb<F, 2>(w, x, n_rows, y, stream);
  if (n_rows <= 4) return launch_nb<F, 4>(w, x, n_rows, y, stream);
  return launch_nb<F, 8>(w, x, n_rows, y, stream);
}

}  // namespace

cudaError_t launch_matvec_batch(const WeightView& w, const uint16_t* x, int n_rows, float* y,
                                cudaStream_t stream) {
  if (n_rows < 1 || n_rows > 8) return cudaErrorInvalidValue;
  switch (w.format) {
    case kWF16: return launch_f<kWF16>(w, x, n_rows, y, stream);
    case kWBF16: return launch_f<kWBF16>(w, x, n_rows, y, stream);
    case kWQ8_0: return launch_f<kWQ8_0>(w, x, n_rows, y, stream);
    case kWQ4_0: return launch_f<kWQ4_0>(w, x, n_rows, y, stream);
    case kWQ4_1: return launch_f<kWQ4_1>(w, x, n_rows, y, stream);
    case kWQ4_K: return launch_f<kWQ4_K>(w, x, n_rows, y, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace rinfer::cuda::kern
