// Integer matrix-vector product for decode with quantized weights: y[n_out] = W x (+ add), the
// weight quants (Q8_0, Q4_0, Q4_1, Q4_K device layouts) against int16 activations from
// quantize_q16 with dp2a (two int16 x int8 products per instruction, exact int32 sums).
//
// Why: the exact f32 kernel (matvec.cu) spends ~3 instructions per weight (nibble to float, fix,
// FMA), which caps 4-bit formats near half the memory bandwidth; here a 16-byte chunk of 32
// nibbles costs 8 unpack ops and 16 dp2a. Each 16-element run's int32 sum is scaled once:
//   Q4_0  d * (xs * sum q*xq - 8 * sum x)          Q4_1  d * xs * sum q*xq + m * sum x
//   Q4_K  (d*sc) * xs * sum q*xq - (dmin*m) * sum x  Q8_0  d * xs * sum q*xq
// (xs: the activation block's scale; sum x: exact f32 sums from quantize_q16). The only error
// is the int16 rounding of x: relative ~1.5e-5.
//
// Work split as matvec.cu: a warp owns kRows rows, lanes walk 16-byte chunks with kUnroll in
// flight per row, and the int16 x of a chunk is loaded once for all kRows rows; each row is split
// over S warps (split-K, matvec_split_q16: 2 where rows have 128 chunks or more). Q4_K's packed
// 6-bit scales are decoded two at a time with 16-bit masks (llama.cpp's trick).
//
// Measured on the H200 (bench/cuda_ops_bench.cpp): staging the chunks through shared memory with
// cp.async, double-buffered, was slower than these register loads for every format (Q4_0
// lm_head 88 us against 70 us, Q8_0 155 against 124), and two Q4 rows per warp with four chunks
// in flight was slower than four rows with two (ffn_up 15.4 us against 12.2).
#include "ops/cuda/matvec_common.cuh"
#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 128;

// Four rows a warp share each x load, two chunks in flight per row (H200, Llama-3-8B shape: Q8_0
// with two rows and four chunks took 2.76 ms a decode step, with four and two 2.59 ms; Q4 with
// four chunks in flight was slower, 1.97 -> 2.04 ms).
template <int F>
struct Q16Cfg {
  static constexpr int kRows = 4;
  static constexpr int kUnroll = 2;
  // Blocks per SM the registers must allow: occupancy is register-bound, and more resident warps
  // keep more loads in flight. Q8_0 and Q4_0 fit 5 (88 and 96 registers) and Q4_K 4 (124)
  // without spilling; Q4_1 would spill a few bytes and is left free (SmolLM2 q4_1 step 0.548 ->
  // 0.559 ms capped). H200, Llama-3-8B decode step, with the 32-bit chunk indices and row
  // offsets (MvRows): q4_0 1.94 -> 1.89 ms, q8_0 2.56 -> 2.50, q4_k 2.39 -> 2.14. Capping Q4_0
  // at 5 before those (24 bytes of spills) was slower, 1.92 -> 2.10.
  static constexpr int kMinBlocks = F == kWQ4_K ? 4 : (F == kWQ4_1 ? 1 : 5);
};

// The 6-bit scales and mins of sub-blocks 2g and 2g+1 of a Q4_K super-block, from its header
// words y, z, w (scale bytes 0-3, 4-7, 8-11), two bytes at a time as llama.cpp does:
// sm.x = sc(2g) | sc(2g+1) << 8, sm.y = m(2g) | m(2g+1) << 8.
__device__ __forceinline__ void q4k_scales_pair(uint4 h, int g, float& sc0, float& sc1, float& m0,
                                                float& m1) {
  const int sh = (g & 1) * 16;
  const uint32_t y = h.y >> sh, z = h.z >> sh, w = h.w >> sh;
  uint32_t a, b;
  if (g < 2) {
    a = y & 0x3f3fu;
    b = z & 0x3f3fu;
  } else {
    a = (w & 0x0f0fu) | ((y & 0xc0c0u) >> 2);
    b = ((w >> 4) & 0x0f0fu) | ((z & 0xc0c0u) >> 2);
  }
  sc0 = byte_to_float<0>(a);
  sc1 = byte_to_float<1>(a);
  m0 = byte_to_float<0>(b);
  m1 = byte_to_float<1>(b);
}

// 16 int16 activations (32 bytes) as 8 words of int16 pairs.
__device__ __forceinline__ void load_x16(const int16_t* p, int (&w)[8]) {
  const int4 a = __ldg(reinterpret_cast<const int4*>(p));
  const int4 b = __ldg(reinterpret_cast<const int4*>(p) + 1);
  w[0] = a.x;
  w[1] = a.y;
  w[2] = a.z;
  w[3] = a.w;
  w[4] = b.x;
  w[5] = b.y;
  w[6] = b.z;
  w[7] = b.w;
}

// sum_j x[j] * q[j] over 16 elements: x as 8 int16 pairs, q as 4 words of 4 int8.
__device__ __forceinline__ int dot16(const int (&x)[8], uint32_t q0, uint32_t q1, uint32_t q2,
                                     uint32_t q3) {
  int s = 0;
  s = __dp2a_lo(x[0], static_cast<int>(q0), s);
  s = __dp2a_hi(x[1], static_cast<int>(q0), s);
  s = __dp2a_lo(x[2], static_cast<int>(q1), s);
  s = __dp2a_hi(x[3], static_cast<int>(q1), s);
  s = __dp2a_lo(x[4], static_cast<int>(q2), s);
  s = __dp2a_hi(x[5], static_cast<int>(q2), s);
  s = __dp2a_lo(x[6], static_cast<int>(q3), s);
  s = __dp2a_hi(x[7], static_cast<int>(q3), s);
  return s;
}

template <int F, int S>
__global__ void __launch_bounds__(kThreads, Q16Cfg<F>::kMinBlocks)
    matvec_q16_kernel(WeightView w, Q16View x, const float* add, float* y) {
  constexpr int kRows = Q16Cfg<F>::kRows;
  constexpr int kUnroll = Q16Cfg<F>::kUnroll;
  const int lane = threadIdx.x % kWarp;
  const int wi = threadIdx.x / kWarp;
  const int ks = wi % S;  // this warp's share of the row (split-K)
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp / S) + wi / S) * kRows;
  // Groups past the last row walk no chunks (they still reach the split-K barrier).
  // Chunk indices are 32-bit (a row has far fewer than 2^31): registers bound the occupancy.
  const int32_t nc = row0 < w.n_out ? static_cast<int32_t>(w_chunks<F>(w)) : 0;
  const MvRows rs = matvec_rows<F>(w, row0);
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  const int32_t c_first = lane + ks * kWarp;
  for (int32_t c0 = c_first; c0 < nc; c0 += kWarp * S * kUnroll) {
    uint4 wv[kUnroll][kRows];
    uint4 hdr[kUnroll][kRows];
    uint32_t sc[kUnroll][kRows];
    matvec_load_step<F, kUnroll, kRows>(rs, c0, kWarp * S, nc, wv, hdr, sc);
    // The weights do not depend on the previous kernel: the first step's loads are in flight
    // before waiting for it (PDL); x is read only after.
    if (c0 == c_first) pdl_begin();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t c = c0 + u * kWarp * S;
      if (c >= nc) break;
      if constexpr (F == kWQ8_0) {
        int xw[8];
        load_x16(x.q + c * 16, xw);
        const float xs = __ldg(x.scale + c / 2);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int s = dot16(xw, wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w);
          const float d = half_to_float(static_cast<uint16_t>(sc[u][r]));
          acc[r] = fmaf(d * xs, static_cast<float>(s), acc[r]);
        }
      } else {
        const int64_t lo = chunk_base_lo<F>(c), hi = chunk_base_hi<F>(c);
        int xl[8], xh[8];
        load_x16(x.q + lo, xl);
        load_x16(x.q + hi, xh);
        const float xsl = __ldg(x.scale + lo / 32), xsh = __ldg(x.scale + hi / 32);
        const float sxl = __ldg(x.sum16 + lo / 16), sxh = __ldg(x.sum16 + hi / 16);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint4 v = wv[u][r];
          const int il =
              dot16(xl, v.x & 0x0f0f0f0fu, v.y & 0x0f0f0f0fu, v.z & 0x0f0f0f0fu, v.w & 0x0f0f0f0fu);
          const int ih = dot16(xh, (v.x >> 4) & 0x0f0f0f0fu, (v.y >> 4) & 0x0f0f0f0fu,
                               (v.z >> 4) & 0x0f0f0f0fu, (v.w >> 4) & 0x0f0f0f0fu);
          const float fl = xsl * static_cast<float>(il), fh = xsh * static_cast<float>(ih);
          if constexpr (F == kWQ4_0) {
            const float d = half_to_float(static_cast<uint16_t>(sc[u][r]));
            acc[r] = fmaf(d, (fl + fh) - 8.0f * (sxl + sxh), acc[r]);
          } else if constexpr (F == kWQ4_1) {
            const float2 dm = half2_to_float2(sc[u][r]);
            acc[r] = fmaf(dm.x, fl + fh, fmaf(dm.y, sxl + sxh, acc[r]));
          } else {  // Q4_K
            const uint4 h = hdr[u][r];
            const float dd = half_to_float(static_cast<uint16_t>(h.x & 0xffffu));
            const float dmin = half_to_float(static_cast<uint16_t>(h.x >> 16));
            float sc0, sc1, m0, m1;
            q4k_scales_pair(h, static_cast<int>((c & 7) >> 1), sc0, sc1, m0, m1);
            acc[r] += dd * (sc0 * fl + sc1 * fh) - dmin * (m0 * sxl + m1 * sxh);
          }
        }
      }
    }
  }
  pdl_begin();  // lanes without chunks (and a repeat for the others: returns at once)
  matvec_store<kRows, S>(acc, lane, wi, row0, w.n_out, add, y);
}

template <int F, int S>
cudaError_t launch_fs(const WeightView& w, const Q16View& x, const float* add, float* y,
                      cudaStream_t stream) {
  constexpr int rows_per_block = (kThreads / kWarp / S) * Q16Cfg<F>::kRows;
  const int64_t blocks = (w.n_out + rows_per_block - 1) / rows_per_block;
  return launch_pdl(matvec_q16_kernel<F, S>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                    stream, w, x, add, y);
}

template <int F>
cudaError_t launch_f(const WeightView& w, const Q16View& x, const float* add, float* y,
                     cudaStream_t stream) {
  switch (matvec_split_q16(w_chunks<F>(w))) {
    case 4: return launch_fs<F, 4>(w, x, add, y, stream);
    case 2: return launch_fs<F, 2>(w, x, add, y, stream);
    default: return launch_fs<F, 1>(w, x, add, y, stream);
  }
}

}  // namespace

cudaError_t launch_matvec_q16(const WeightView& w, const Q16View& x, const float* add, float* y,
                              cudaStream_t stream) {
  switch (w.format) {
    case kWQ8_0: return launch_f<kWQ8_0>(w, x, add, y, stream);
    case kWQ4_0: return launch_f<kWQ4_0>(w, x, add, y, stream);
    case kWQ4_1: return launch_f<kWQ4_1>(w, x, add, y, stream);
    case kWQ4_K: return launch_f<kWQ4_K>(w, x, add, y, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace rinfer::cuda::kern
