// FP8 E4M3 decode matvec (W8A8): Y[n_rows, n_out] = (X W^T) * w_scale[out] * x_scale[row] (+ add)
// for 1 to 8 rows of activations quantized per row (quantize_f8.cu), the weights e4m3 [n_out,
// n_in] with one f32 scale per output row, n_in a multiple of 64. Tensor cores do the products:
// mma.sync m16n8k32 (mma.cuh: mma_e4m3) with the weights as A (16 output rows) and the
// activations as B (their rows the 8 columns; columns past n_rows zero), so a warp's 16 x 32
// products cost one instruction and the kernel is bound by the weight bytes alone, at one row as
// at eight.
//
// A dot product may take its k in any order, as long as A and B take the same one: lane (gid,
// tig) loads 16 consecutive bytes of weight rows gid and gid + 8 (and of activation row gid) at
// column 16 tig of each 64-column span, and the four words of each become two MMAs' a0..a3 / b0,
// b1 (bytes 0-7, then 8-15). The four lanes of a row read its 64 bytes of a span contiguously;
// every weight byte is read once, streamed past L1. A block owns 16 output rows; its S warps
// split the spans (warp k takes spans k, k + S, ...; U spans in flight per lane) and add their
// sums through shared memory. Each MMA starts from zero and its result is added to f32 sums, so
// at most 32 products share the tensor core's accumulation.
//
// Launched in plain stream order, without programmatic dependent launch (as matvec_batch is):
// with it (griddepcontrol in the kernel and the launch attribute), an FP8 model's decode logits
// drifted from its teacher-forced rows, and with PDL off they did not (docs/gpu-inference.md,
// FP8; CudaEngineCoreFp8 in tests/ops_cuda/engine_core_cuda_test.cpp). xq and x_scale, the
// kernel before's output, are read with plain loads.
#include "ops/cuda/common.cuh"
#include "ops/cuda/mma.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kTileRows = 16;
constexpr int kSpan = 64;  // bytes of a row per step of its four lanes
constexpr int kUnroll = 4;

template <int S>
__global__ void __launch_bounds__(S* kWarp)
    matvec_f8_kernel(const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                     int64_t n_out, int32_t n_in, const uint8_t* xq, const float* x_scale,
                     int n_rows, const float* add, float* y) {
  constexpr int U = kUnroll;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  // Rows past the last one read the last (never stored).
  const int64_t ra = min(row0 + gid, n_out - 1), rb = min(row0 + gid + 8, n_out - 1);
  const uint8_t* pa = w + ra * n_in + tig * 16;
  const uint8_t* pb = w + rb * n_in + tig * 16;
  const bool has_x = gid < n_rows;
  const uint8_t* px = xq + static_cast<int64_t>(has_x ? gid : 0) * n_in + tig * 16;
  const int32_t n_span = n_in / kSpan;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int32_t s0 = warp; s0 < n_span; s0 += S * U) {
    uint4 a[U], b[U], xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t sp = s0 + u * S;
      a[u] = sp < n_span ? ld_stream16(pa + static_cast<int64_t>(sp) * kSpan) : zero;
      b[u] = sp < n_span ? ld_stream16(pb + static_cast<int64_t>(sp) * kSpan) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t sp = s0 + u * S;
      xv[u] = has_x && sp < n_span
                  ? *reinterpret_cast<const uint4*>(px + static_cast<int64_t>(sp) * kSpan)
                  : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float d[4];
      mma_e4m3(d, a[u].x, b[u].x, a[u].y, b[u].y, xv[u].x, xv[u].y);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += d[i];
      mma_e4m3(d, a[u].z, b[u].z, a[u].w, b[u].w, xv[u].z, xv[u].w);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += d[i];
    }
  }
  if constexpr (S > 1) {
    __shared__ float part[S][kWarp][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) part[warp][lane][i] = acc[i];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int k = 1; k < S; ++k) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += part[k][lane][i];
    }
  }
  // D: acc[0], acc[1] = (row gid, columns 2 tig, 2 tig + 1); acc[2], acc[3] = row gid + 8.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = 2 * tig + (i & 1);
    const int64_t row = row0 + gid + (i >= 2 ? 8 : 0);
    if (n < n_rows && row < n_out) {
      const int64_t o = static_cast<int64_t>(n) * n_out + row;
      float v = acc[i] * w_scale[row] * x_scale[n];
      if (add != nullptr) v += add[o];
      y[o] = v;
    }
  }
}

template <int S>
cudaError_t launch_s(const uint8_t* w, const float* w_scale, int64_t n_out, int64_t n_in,
                     const uint8_t* xq, const float* x_scale, int n_rows, const float* add,
                     float* y, cudaStream_t stream) {
  const int64_t tiles = (n_out + kTileRows - 1) / kTileRows;
  matvec_f8_kernel<S><<<dim3(static_cast<unsigned>(tiles)), dim3(S * kWarp), 0, stream>>>(
      w, w_scale, n_out, static_cast<int32_t>(n_in), xq, x_scale, n_rows, add, y);
  return cudaGetLastError();
}

}  // namespace

int matvec_f8_split(int64_t n_out, int64_t n_in) {
  const int64_t tiles = (n_out + kTileRows - 1) / kTileRows;
  const int64_t spans = n_in / kSpan;
  const int64_t target = 16 * static_cast<int64_t>(sm_count());  // warps: loads in flight
  int s = 1;
  while (s < 8 && tiles * s < target && spans >= 2 * s * kUnroll) s *= 2;
  return s;
}

cudaError_t launch_matvec_f8(const uint8_t* w, const float* w_scale, int64_t n_out, int64_t n_in,
                             const uint8_t* xq, const float* x_scale, int n_rows, const float* add,
                             float* y, cudaStream_t stream) {
  switch (matvec_f8_split(n_out, n_in)) {
    case 8: return launch_s<8>(w, w_scale, n_out, n_in, xq, x_scale, n_rows, add, y, stream);
    case 4: return launch_s<4>(w, w_scale, n_out, n_in, xq, x_scale, n_rows, add, y, stream);
    case 2: return launch_s<2>(w, w_scale, n_out, n_in, xq, x_scale, n_rows, add, y, stream);
    default: return launch_s<1>(w, w_scale, n_out, n_in, xq, x_scale, n_rows, add, y, stream);
  }
}

}  // namespace rinfer::cuda::kern
