// Matrix-vector product for decode: y[n_out] = W x (+ add), W in the device layout of any
// weight format, x and y f32. Memory-bound: every weight byte is read once, with 16-byte
// streaming loads (no L1 allocation, so L1 keeps x); quantized weights are dequantized in
// registers and never written back.
//
// Work split: a warp owns kRows consecutive rows and its lanes walk the row in 16-byte chunks
// (lane l takes chunks l, l + 32, ...), kUnroll chunks in flight per row; matrices with few rows
// split each row over S warps (split-K, matvec_split: warp k of S takes chunks 32 k + l,
// 32 (k + S) + l, ...; their sums are added through shared memory), so attn_out and ffn_down
// keep enough warps and loads in flight (docs/strategies/kernels.md, "Measured choices"); x is
// loaded once per chunk and used for all kRows rows (Q4 formats read 8 bytes of x per byte of
// weight, so sharing x keeps the L1 traffic under the DRAM traffic). Per-row sums are reduced with
// shuffles.
//
// FP8 (f8_e4m3 codes, an f32 scale per row): weights only, x stays f32 (W8A16); pairs of codes
// become exact halves with one cvt (e4m3x2 -> f16x2), the row scale multiplies the row's sum.
//
// Exact dequantization: nibbles and bytes become floats through the 2^23 mantissa trick (PRMT +
// FADD, exact), block scales multiply partial sums: Q4_0 d*(sum q*x - 8 sum x), Q4_1
// d*sum q*x + m*sum x, Q4_K per 32-element sub-block (d*sc)*sum q*x - (dmin*m)*sum x.
#include <cuda_fp8.h>

#include <atomic>

#include "ops/cuda/matvec_common.cuh"
#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {

int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      n = 132;
    }
    cached[dev] = n;
  }
  return cached[dev];
}

namespace {
// strategies.kernels.cuda.matvec_split: 0 (by shape) or 1, 2, 4.
std::atomic<int> g_forced_split{0};
int forced_split() { return g_forced_split.load(std::memory_order_relaxed); }
}  // namespace

void set_matvec_split(int split) {
  g_forced_split.store(split == 1 || split == 2 || split == 4 ? split : 0,
                       std::memory_order_relaxed);
}

bool matvec_split_forced() { return forced_split() != 0; }

int matvec_split_q16(int64_t chunks) {
  if (forced_split() != 0) return forced_split();
  return chunks >= 2 * 2 * kWarp ? 2 : 1;
}

int matvec_split(int64_t n_out, int rows, int64_t chunks) {
  if (forced_split() != 0) return forced_split();
  const int64_t groups = (n_out + rows - 1) / rows;
  const int64_t target = 32 * static_cast<int64_t>(sm_count());
  int s = 1;
  // Each warp keeps at least one chunk per lane.
  while (s < 4 && groups * s < target && chunks >= 2 * s * kWarp) s *= 2;
  return s;
}

namespace {

constexpr int kThreads = 128;  // 4 warps

// Two e4m3 codes (the low 16 bits, element 0 in the low byte) as exact floats.
__device__ __forceinline__ float2 f8x2_to_float2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return half2_to_float2(static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16));
}

// Rows per warp and chunks in flight per lane and row (docs/strategies/kernels.md, "Measured
// choices"): for the 16-bit formats four rows and 2 chunks beat two rows and 4 (each x load serves
// more rows), which beat one row and 8; Q4 rows share the larger x loads (four rows and 4 chunks
// was slower). kWide (16-bit formats and F8, rows of 2048 elements or more): eight rows and one
// chunk, so each x load serves eight rows.
template <int F, bool kWide = false>
struct MvCfg {
  static constexpr int kRows = F == kWF32 ? 1 : (kWide ? 8 : 4);
  static constexpr int kUnroll = F == kWF32 || kWide ? (F == kWF32 ? 4 : 1) : 2;
  // Blocks per SM the registers must allow (more resident warps, more loads in flight): the
  // 16-bit formats fit 8 (64 registers), 6 wide (80), without spilling; SmolLM2's 576-wide rows
  // keep four (docs/strategies/kernels.md, "Measured choices"). The others keep the occupancy they had uncapped
  // (f32 48 registers, Q8_0 96, Q4 125, Q4_K 168): an explicit minimum of 1 lets the compiler
  // take up to 239.
  static constexpr int kMinBlocks =
      kWide ? 6
            : (F == kWBF16 || F == kWF16 || F == kWF32
                   ? 8
                   : (F == kWQ8_0 || F == kWF8 ? 5 : (F == kWQ4_K ? 3 : 4)));
};

// x[base, base + n) into registers; elements at or past n_in read as 0 (only the last chunk of a
// scalar-format row can be partial).
template <int N>
__device__ __forceinline__ void load_x(const float* __restrict__ x, int64_t base, int64_t n_in,
                                       float (&xr)[N]) {
  if (base + N <= n_in) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 f = ld_f4(x + base + i);
      xr[i] = f.x;
      xr[i + 1] = f.y;
      xr[i + 2] = f.z;
      xr[i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) xr[i] = base + i < n_in ? __ldg(x + base + i) : 0.0f;
  }
}

// kNorm (16-bit formats): x is a residual row and the matrix reads rms_norm(x) * nw.w, formed as
// the x chunks are loaded: each lane adds up the squares of the elements it reads (every element
// is read by exactly one lane of a row group), the row group's warps pool them, and the dot
// products are scaled by 1 / rms at the end. No norm kernel runs before such a matvec.
template <int F, int S, bool kWide, bool kNorm>
__global__ void __launch_bounds__(kThreads, kNorm ? MvCfg<F, kWide>::kMinBlocks - 1
                                                  : MvCfg<F, kWide>::kMinBlocks)
    matvec_kernel(WeightView w, const float* __restrict__ x, const float* add, float* y,
                  RowNorm nw) {
  constexpr int R = MvCfg<F, kWide>::kRows;
  constexpr int U = MvCfg<F, kWide>::kUnroll;
  constexpr int E = WFmt<F>::kEpc;
  const int lane = threadIdx.x % kWarp;
  const int wi = threadIdx.x / kWarp;
  const int ks = wi % S;  // this warp's share of the row (split-K)
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp / S) + wi / S) * R;
  // Groups past the last row walk no chunks (they still reach the split-K barrier).
  // Chunk indices are 32-bit (a row has far fewer than 2^31), which saves registers.
  const int32_t nc = row0 < w.n_out ? static_cast<int32_t>(w_chunks<F>(w)) : 0;
  const MvRows rs = matvec_rows<F>(w, row0);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;

  const int32_t c_first = lane + ks * kWarp;
  float ss = 0.0f;  // kNorm: this lane's sum of squares of x
  for (int32_t c0 = c_first; c0 < nc; c0 += kWarp * S * U) {
    // Issue every load of this step before the first use.
    uint4 wv[U][R];
    uint4 hdr[U][R];    // Q4_K super-block headers
    uint32_t sc[U][R];  // Q8_0 / Q4_0: f16 scale; Q4_1: (d, m) f16 pair
    matvec_load_step<F, U, R>(rs, c0, kWarp * S, nc, wv, hdr, sc);
    // The first step's weight loads are in flight before waiting for the previous kernel (PDL).
    if (c0 == c_first) pdl_begin();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t c = c0 + u * kWarp * S;
      if (c >= nc) break;
      if constexpr (!is_q4<F>()) {
        float xr[E];
        load_x(x, static_cast<int64_t>(c) * E, w.n_in, xr);
        if constexpr (kNorm) {
          float wn[E];
          load_x(nw.w, static_cast<int64_t>(c) * E, w.n_in, wn);
#pragma unroll
          for (int i = 0; i < E; ++i) {
            ss = fmaf(xr[i], xr[i], ss);
            xr[i] *= wn[i];
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t words[4] = {wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w};
          float s = 0.0f;
          if constexpr (F == kWF32) {
#pragma unroll
            for (int i = 0; i < 4; ++i) s = fmaf(__uint_as_float(words[i]), xr[i], s);
            acc[r] += s;
          } else if constexpr (F == kWBF16) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              s = fmaf(bf16_lo(words[i]), xr[2 * i], s);
              s = fmaf(bf16_hi(words[i]), xr[2 * i + 1], s);
            }
            acc[r] += s;
          } else if constexpr (F == kWF16) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float2 f = half2_to_float2(words[i]);
              s = fmaf(f.x, xr[2 * i], s);
              s = fmaf(f.y, xr[2 * i + 1], s);
            }
            acc[r] += s;
          } else if constexpr (F == kWF8) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float2 lo = f8x2_to_float2(words[i]);
              const float2 hi = f8x2_to_float2(words[i] >> 16);
              s = fmaf(lo.x, xr[4 * i], s);
              s = fmaf(lo.y, xr[4 * i + 1], s);
              s = fmaf(hi.x, xr[4 * i + 2], s);
              s = fmaf(hi.y, xr[4 * i + 3], s);
            }
            acc[r] += s;
          } else {  // Q8_0
            float q[16];
            q8_unpack(wv[u][r], q);
#pragma unroll
            for (int i = 0; i < 16; ++i) s = fmaf(q[i], xr[i], s);
            acc[r] = fmaf(half_to_float(static_cast<uint16_t>(sc[u][r])), s, acc[r]);
          }
        }
      } else {
        float xl[16], xh[16];
        load_x(x, chunk_base_lo<F>(c), w.n_in, xl);
        load_x(x, chunk_base_hi<F>(c), w.n_in, xh);
        float sxl = 0.0f, sxh = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          sxl += xl[i];
          sxh += xh[i];
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float q[32];
          q4_unpack(wv[u][r], q);
          float sl = 0.0f, sh = 0.0f;
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            sl = fmaf(q[i], xl[i], sl);
            sh = fmaf(q[16 + i], xh[i], sh);
          }
          if constexpr (F == kWQ4_0) {
            const float d = half_to_float(static_cast<uint16_t>(sc[u][r]));
            acc[r] = fmaf(d, (sl + sh) - 8.0f * (sxl + sxh), acc[r]);
          } else if constexpr (F == kWQ4_1) {
            const float2 dm = half2_to_float2(sc[u][r]);
            acc[r] = fmaf(dm.x, sl + sh, fmaf(dm.y, sxl + sxh, acc[r]));
          } else {  // Q4_K
            const uint4 h = hdr[u][r];
            const float dd = half_to_float(static_cast<uint16_t>(h.x & 0xffffu));
            const float dmin = half_to_float(static_cast<uint16_t>(h.x >> 16));
            const int j = static_cast<int>((c & 7) >> 1) * 2;
            float sc0, m0, sc1, m1;
            q4k_scale_min(h, j, sc0, m0);
            q4k_scale_min(h, j + 1, sc1, m1);
            acc[r] += dd * (sc0 * sl + sc1 * sh) - dmin * (m0 * sxl + m1 * sxh);
          }
        }
      }
    }
  }
  pdl_begin();   // lanes without chunks (a repeat for the others returns at once)
  __syncwarp();  // the lanes reconverge here: the shuffles below stay plain SHFLs
  if constexpr (F == kWF8) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] *= __ldg(reinterpret_cast<const float*>(rs.s0) + rs.row(r));
  }
  if constexpr (kNorm) {
    // The row group's S warps each saw a share of x: pool their sums (every thread arrives).
    __shared__ float s_ss[kThreads / kWarp];
    const float wss = warp_sum(ss);
    if (lane == 0) s_ss[wi] = wss;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) t += s_ss[wi - ks + k];
    const float sc = rms_scale(t, nw.n, nw.eps);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] *= sc;
  }
  matvec_store<R, S>(acc, lane, wi, row0, w.n_out, add, y);
}

template <int F, int S, bool kWide, bool kNorm>
cudaError_t launch_fs(const WeightView& w, const float* x, const float* add, float* y,
                      const RowNorm& nw, cudaStream_t stream) {
  constexpr int rows_per_block = (kThreads / kWarp / S) * MvCfg<F, kWide>::kRows;
  const int64_t blocks = (w.n_out + rows_per_block - 1) / rows_per_block;
  return launch_pdl(matvec_kernel<F, S, kWide, kNorm>, dim3(static_cast<unsigned>(blocks)),
                    dim3(kThreads), 0, stream, w, x, add, y, nw);
}

template <int F, bool kWide, bool kNorm>
cudaError_t launch_fw(const WeightView& w, const float* x, const float* add, float* y,
                      const RowNorm& nw, cudaStream_t stream) {
  switch (matvec_split(w.n_out, MvCfg<F, kWide>::kRows, w_chunks<F>(w))) {
    case 4: return launch_fs<F, 4, kWide, kNorm>(w, x, add, y, nw, stream);
    case 2: return launch_fs<F, 2, kWide, kNorm>(w, x, add, y, nw, stream);
    default: return launch_fs<F, 1, kWide, kNorm>(w, x, add, y, nw, stream);
  }
}

template <int F, bool kNorm = false>
cudaError_t launch_f(const WeightView& w, const float* x, const float* add, float* y,
                     const RowNorm& nw, cudaStream_t stream) {
  if constexpr (F == kWBF16 || F == kWF16 || F == kWF8) {
    if (w.n_in >= 2048) return launch_fw<F, true, kNorm>(w, x, add, y, nw, stream);
  }
  return launch_fw<F, false, kNorm>(w, x, add, y, nw, stream);
}

}  // namespace

cudaError_t launch_matvec(const WeightView& w, const float* x, const float* add, float* y,
                          cudaStream_t stream) {
  switch (w.format) {
    case kWF32: return launch_f<kWF32>(w, x, add, y, {}, stream);
    case kWF16: return launch_f<kWF16>(w, x, add, y, {}, stream);
    case kWBF16: return launch_f<kWBF16>(w, x, add, y, {}, stream);
    case kWQ8_0: return launch_f<kWQ8_0>(w, x, add, y, {}, stream);
    case kWQ4_0: return launch_f<kWQ4_0>(w, x, add, y, {}, stream);
    case kWQ4_1: return launch_f<kWQ4_1>(w, x, add, y, {}, stream);
    case kWQ4_K: return launch_f<kWQ4_K>(w, x, add, y, {}, stream);
    case kWF8: return launch_f<kWF8>(w, x, add, y, {}, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_matvec_rms_norm(const WeightView& w, const float* x, const RowNorm& nw, float* y,
                                   cudaStream_t stream) {
  switch (w.format) {
    case kWF16: return launch_f<kWF16, true>(w, x, nullptr, y, nw, stream);
    case kWBF16: return launch_f<kWBF16, true>(w, x, nullptr, y, nw, stream);
    case kWF8: return launch_f<kWF8, true>(w, x, nullptr, y, nw, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace rinfer::cuda::kern
