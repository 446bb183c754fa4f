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
// Staging the chunks through shared memory with cp.async, double-buffered, was slower than these
// register loads for every format, and two Q4 rows per warp with four chunks in flight was
// slower than four rows with two (bench/cuda_ops_bench.cpp; docs/strategies/kernels.md, "Measured choices").
//
// The split norm (launch.h: RmsIn, ResNormOut) replaces the decode step's RMSNorm kernels: the
// producer variant (kNorm, 32 rows a block) adds its rows to the residual and leaves the next
// norm's int16 blocks and sums of squares, the consumer multiplies its sums by 1 / rms. It gains
// less than removing the norm kernels outright would (docs/strategies/kernels.md, "Measured choices"): the consumer's blocks find
// the SMs full of the producer's 512-thread blocks and start cold.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>

#include "ops/cuda/matvec_common.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 128;

// Four rows a warp share each x load, two chunks in flight per row (faster than two rows and
// four chunks for Q8_0, and than four chunks for Q4: docs/strategies/kernels.md, "Measured choices").
template <int F>
struct Q16Cfg {
  static constexpr int kRows = 4;
  static constexpr int kUnroll = 2;
  // Blocks per SM the registers must allow: occupancy is register-bound, and more resident warps
  // keep more loads in flight. Q8_0 and Q4_0 fit 5 (88 and 96 registers) and Q4_K 4 (124)
  // without spilling (with the 32-bit chunk indices and row offsets of MvRows; before those,
  // capping Q4_0 at 5 spilled and was slower); Q4_1 would spill a few bytes and is left free
  // (docs/strategies/kernels.md, "Measured choices").
  static constexpr int kMinBlocks = F == kWQ4_K ? 4 : (F == kWQ4_1 ? 1 : 5);
  // Q8_0 consumers also come at 6 (80 registers, 16 bytes of spills), for grids that fit one wave
  // only so (consumer_plan).
  static constexpr int kWaveMinBlocks = F == kWQ8_0 ? 6 : 0;
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

// c + x . q for the low (kHi false) or high pair of q's bytes: dp2a, x two int16, q four bytes,
// signed or (kUnsigned) unsigned.
template <bool kHi, bool kUnsigned>
__device__ __forceinline__ int dp2a(int x, uint32_t q, int c) {
  int d;
  if constexpr (kHi && kUnsigned) {
    asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(q), "r"(c));
  } else if constexpr (kHi) {
    asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(q), "r"(c));
  } else if constexpr (kUnsigned) {
    asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(q), "r"(c));
  } else {
    asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(q), "r"(c));
  }
  return d;
}

// s + sum_j x[j] * q[j] over 16 elements: x as 8 int16 pairs, q as 4 words of 4 int8, or of 4
// uint8 with kUnsigned (the Q4 formats' high nibbles masked in place, q & 0xf0f0f0f0: 16 times
// the nibble, which saves the shift).
template <bool kUnsigned = false>
__device__ __forceinline__ int dot16(const int (&x)[8], uint32_t q0, uint32_t q1, uint32_t q2,
                                     uint32_t q3, int s = 0) {
  s = dp2a<false, kUnsigned>(x[0], q0, s);
  s = dp2a<true, kUnsigned>(x[1], q0, s);
  s = dp2a<false, kUnsigned>(x[2], q1, s);
  s = dp2a<true, kUnsigned>(x[3], q1, s);
  s = dp2a<false, kUnsigned>(x[4], q2, s);
  s = dp2a<true, kUnsigned>(x[5], q2, s);
  s = dp2a<false, kUnsigned>(x[6], q3, s);
  s = dp2a<true, kUnsigned>(x[7], q3, s);
  return s;
}

// s + sum_j x[j] * q[j] over 8 elements (x as 4 int16 pairs, q as 2 words of 4 int8).
__device__ __forceinline__ int dot8(const int* x, uint32_t q0, uint32_t q1, int s) {
  s = dp2a<false, false>(x[0], q0, s);
  s = dp2a<true, false>(x[1], q0, s);
  s = dp2a<false, false>(x[2], q1, s);
  return dp2a<true, false>(x[3], q1, s);
}

// The norm's parts (RmsIn: n_parts a multiple of 4, at most 128), a float4 a lane, requested
// once the previous kernels are done and added up only after the loop (4 registers held across
// it; added at once, they would stall the warp's first x loads behind an L2 round trip: docs/strategies/kernels.md, "Measured choices").
struct PartsAcc {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  __device__ __forceinline__ void load(const RmsIn& rin, int lane) {
    v = rin.parts != nullptr && 4 * lane < rin.n_parts
            ? __ldcg(reinterpret_cast<const float4*>(rin.parts) + lane)
            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  __device__ __forceinline__ float sum() const { return (v.x + v.y) + (v.z + v.w); }
};

// The producer's end (ResNormOut): the block's 32 rows (8 groups of kRows = 4, each split over S
// warps) are added through shared memory; warp 0's lanes 0-7 then hold four rows each, add them
// to the residual, and write the int16 blocks of residual * w and the rows' sum of squares.
// xr, wv: warp 0's lanes 0-7 hold their four rows of the residual and of the norm weights
// (loaded early: they do not wait on the matvec).
template <int R, int S, int kNT>
__device__ __forceinline__ void matvec_store_res_norm(float (&acc)[R], int lane, int wi,
                                                      const ResNormOut& rn, float4 xr, float4 wv) {
  static_assert(R == 4 && kNT / kWarp / S == 8, "32 rows a block, four a group");
  __shared__ float part[kNT / kWarp][R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
  float v = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) v = lane == r ? acc[r] : v;
  if (lane < R) part[wi][lane] = v;
  __syncthreads();
  if (wi != 0) return;
  __syncwarp();
  const bool valid = lane < 8;
  const int g = valid ? lane : 0;
  float y4[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    y4[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) y4[r] += part[g * S + k][r];
  }
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 32 + 4 * g;
  float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (valid) {
    xr = make_float4(xr.x + y4[0], xr.y + y4[1], xr.z + y4[2], xr.w + y4[3]);
    *reinterpret_cast<float4*>(rn.residual + i) = xr;
    t = make_float4(xr.x * wv.x, xr.y * wv.y, xr.z * wv.z, xr.w * wv.w);
  } else {
    xr = t;
  }
  quantize4(t, i, valid, rn.q, rn.scale, rn.sum16);
  const float ss = warp_sum((xr.x * xr.x + xr.y * xr.y) + (xr.z * xr.z + xr.w * xr.w));
  if (lane == 0) rn.parts[blockIdx.x] = ss;
  // The parts are read as float4s: block 0 zeroes the padding up to a multiple of 4.
  const unsigned pad = gridDim.x + static_cast<unsigned>(lane);
  if (blockIdx.x == 0 && lane < 3 && pad < (gridDim.x + 3) / 4 * 4) rn.parts[pad] = 0.0f;
}

// kNT threads a block; kNorm: the ResNormOut producer (kNT = 256 S: 32 rows a block).
// The producer's register cap: a 512-thread block at 104 leaves room on its SM for one
// 128-thread block of the next matvec (Q8_0 / Q4_0: 96 registers), whose first weight loads then
// start before the producer ends (docs/strategies/kernels.md, "Measured choices"; 96 spills). Q4_1 (107) and Q4_K (127) consumers
// would not fit anyway, and their producers spill at 104: uncapped.
// nvcc 13 honors both this and the launch bounds (ptxas -v: the Q4_0 consumer 96 registers from
// its minimum of 5 blocks, its producer 104, the Q4_K producer 128 from its 512 threads).
template <int F, bool kNorm>
constexpr int producer_max_regs() {
  return kNorm && (F == kWQ8_0 || F == kWQ4_0) ? 104 : 255;
}

template <int F, int S, int kNT, bool kNorm, int MB = 0>
__global__ void __launch_bounds__(kNT, kNT == kThreads ? (MB > 0 ? MB : Q16Cfg<F>::kMinBlocks) : 1)
    __maxnreg__((producer_max_regs<F, kNorm>()))
        matvec_q16_kernel(WeightView w, Q16View x, const float* add, float* y, RmsIn rin,
                          ResNormOut rn) {
  constexpr int kRows = Q16Cfg<F>::kRows;
  constexpr int kUnroll = Q16Cfg<F>::kUnroll;
  const int lane = threadIdx.x % kWarp;
  const int wi = threadIdx.x / kWarp;
  const int ks = wi % S;  // this warp's share of the row (split-K)
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kNT / kWarp / S) + wi / S) * kRows;
  // Groups past the last row walk no chunks (they still reach the split-K barrier).
  // Chunk indices are 32-bit (a row has far fewer than 2^31): registers bound the occupancy.
  const int32_t nc = row0 < w.n_out ? static_cast<int32_t>(w_chunks<F>(w)) : 0;
  const MvRows rs = matvec_rows<F>(w, row0);
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  if constexpr (kNorm) {
    // The producer's blocks of the grid's second half may start late (after the previous
    // kernel's blocks leave their SMs): the first half's blocks ask L2 for their rows now.
    const unsigned partner = blockIdx.x + (gridDim.x + 1) / 2;
    if (rn.l2_prefetch && threadIdx.x < 2 && partner < gridDim.x) {
      const MvRows pr = matvec_rows<F>(w, static_cast<int64_t>(partner) * 32);
      const uint8_t* base = threadIdx.x == 0 ? pr.w0 : pr.s0;
      const uint32_t bytes = static_cast<uint32_t>((threadIdx.x == 0 ? pr.rb : pr.sb) * 32);
      for (uint32_t off = 0; off < bytes; off += 16384) {
        const uint32_t n = min(16384u, bytes - off);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n)
                     : "memory");
      }
    }
  }
  const int32_t c_first = lane + ks * kWarp;
  PartsAcc pv;  // RmsIn: this lane's parts of the norm's sum of squares
  // kNorm: warp 0's lanes 0-7 fetch their rows of the norm weights now and of the residual once
  // the previous kernels are done, so the end of the block does not wait on them.
  const bool norm_lane = kNorm && wi == 0 && lane < 8;
  const int64_t norm_i = static_cast<int64_t>(blockIdx.x) * 32 + 4 * lane;
  float4 nw = make_float4(0.0f, 0.0f, 0.0f, 0.0f), nx = nw;
  if (norm_lane) nw = ld_f4(rn.w + norm_i);
  for (int32_t c0 = c_first; c0 < nc; c0 += kWarp * S * kUnroll) {
    uint4 wv[kUnroll][kRows];
    uint4 hdr[kUnroll][kRows];
    uint32_t sc[kUnroll][kRows];
    matvec_load_step<F, kUnroll, kRows>(rs, c0, kWarp * S, nc, wv, hdr, sc);
    // The weights do not depend on the previous kernel: the first step's loads are in flight
    // before waiting for it (PDL); x is read only after.
    if (c0 == c_first) {
      pdl_begin();
      pv.load(rin, lane);
      if (norm_lane) nx = ld_f4(rn.residual + norm_i);
    }
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
      } else if constexpr (F == kWQ4_0 || F == kWQ4_1) {
        // A chunk is one 32-element block: one x scale, and one int32 sum for both halves,
        // 16 * sum lo * xl + sum (16 hi) * xh (the high nibbles masked in place; below 2^28).
        // The halves' x are loaded in turn (registers bound Q4_0's occupancy).
        int xw[8], s[kRows];
        load_x16(x.q + c * 32, xw);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint4 v = wv[u][r];
          s[r] =
              dot16(xw, v.x & 0x0f0f0f0fu, v.y & 0x0f0f0f0fu, v.z & 0x0f0f0f0fu, v.w & 0x0f0f0f0fu);
        }
        load_x16(x.q + c * 32 + 16, xw);
        const float xs16 = __ldg(x.scale + c) * 0.0625f;
        const float2 sx2 = __ldg(reinterpret_cast<const float2*>(x.sum16) + c);
        const float sx = sx2.x + sx2.y;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint4 v = wv[u][r];
          const int t = dot16<true>(xw, v.x & 0xf0f0f0f0u, v.y & 0xf0f0f0f0u, v.z & 0xf0f0f0f0u,
                                    v.w & 0xf0f0f0f0u, s[r] * 16);
          const float f = xs16 * static_cast<float>(t);
          if constexpr (F == kWQ4_0) {
            const float d = half_to_float(static_cast<uint16_t>(sc[u][r]));
            acc[r] = fmaf(d, fmaf(-8.0f, sx, f), acc[r]);
          } else {
            const float2 dm = half2_to_float2(sc[u][r]);
            acc[r] = fmaf(dm.x, f, fmaf(dm.y, sx, acc[r]));
          }
        }
      } else {  // Q4_K: the halves are 32 elements apart, in sub-blocks of their own scales
        const int64_t lo = chunk_base_lo<F>(c), hi = chunk_base_hi<F>(c);
        int xl[8], xh[8];
        load_x16(x.q + lo, xl);
        load_x16(x.q + hi, xh);
        const float xsl = __ldg(x.scale + lo / 32), xsh16 = __ldg(x.scale + hi / 32) * 0.0625f;
        const float sxl = __ldg(x.sum16 + lo / 16), sxh = __ldg(x.sum16 + hi / 16);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint4 v = wv[u][r];
          const int il =
              dot16(xl, v.x & 0x0f0f0f0fu, v.y & 0x0f0f0f0fu, v.z & 0x0f0f0f0fu, v.w & 0x0f0f0f0fu);
          const int ih16 = dot16<true>(xh, v.x & 0xf0f0f0f0u, v.y & 0xf0f0f0f0u, v.z & 0xf0f0f0f0u,
                                       v.w & 0xf0f0f0f0u, 0);
          const float fl = xsl * static_cast<float>(il), fh = xsh16 * static_cast<float>(ih16);
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
  pdl_begin();  // lanes without chunks (and a repeat for the others: returns at once)
  if (c_first >= nc) {
    pv.load(rin, lane);
    if (norm_lane) nx = ld_f4(rn.residual + norm_i);
  }
  __syncwarp();  // the lanes reconverge here: the shuffles below stay plain SHFLs
  if constexpr (kNorm) {
    matvec_store_res_norm<kRows, S, kNT>(acc, lane, wi, rn, nx, nw);
  } else {
    const float ss = warp_sum(pv.sum());
    const float sc = rin.parts != nullptr ? rms_scale(ss, rin.n, rin.eps) : 1.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] *= sc;
    matvec_store<kRows, S>(acc, lane, wi, row0, w.n_out, add, y);
  }
}

// ---- The streaming kernel: Q4_0 / Q8_0 consumers of many rows ----
//
// The kernel above holds its weights in registers between load and use, so the register file
// bounds the bytes in flight, and its blocks (one load step each for Q4_0 rows of 4096) spend
// much of their life starting and ending: Q4_0's gate|up matrix streamed at about 3 TB/s. Here
// the weights go to shared memory by bulk copies (cp.async.bulk, completion on an mbarrier):
// each block stays for the whole matrix (a grid of the blocks that fit at once, block b taking
// stages b, b + grid, ...) and keeps a ring of copies in flight (RINFER_MV_STREAM_KB, 96 KB a
// block) with no registers held. A stage is 1024 / c whole rows of c chunks (contiguous in
// memory: one copy for the quants, one for the scales); thread t of a row group keeps the int16
// x of chunk column t in registers for the whole kernel and adds four rows of each stage; the
// block adds the rows' partial sums through shared memory, and one thread refills the slot once
// every thread is past it. Measured and dropped: streaming the producers too (Wo, ffn_down: 32
// rows a block for the norm's epilogue, so one block an SM with few stages). The figures, ring
// sizes included: docs/strategies/kernels.md, "Measured choices".
namespace st {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned); completes on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// The launch geometry of one matrix (host and device agree through this struct).
struct Geo {
  int32_t nt = 0;        // threads of a row group: the row's chunks, one a thread
  int32_t sr = 0;        // rows a stage: kRowsPT * (kThreads / nt)
  int32_t stages = 0;    // ring slots
  int32_t n_stages = 0;  // stages of the matrix: n_out / sr
  int32_t blocks = 0;    // the grid
  uint32_t q_bytes = 0;  // quant bytes of a stage
  uint32_t s_bytes = 0;  // scale bytes of a stage
};

constexpr int kThreads = 256;   // a block: kThreads / nc row groups of nc threads
constexpr int kRowsPT = 4;      // rows of a stage each thread adds
constexpr int kMaxStages = 16;  // ring slots (mbarriers)

}  // namespace st

// 256 threads at 48 registers (five blocks an SM), so one block fits beside a producer's
// 512-thread block (104 registers) and starts its copies before the producer ends.
template <int F>
__global__ void __launch_bounds__(st::kThreads, 5)
    matvec_q16_stream_kernel(WeightView w, Q16View x, const float* add, float* y, RmsIn rin,
                             st::Geo geo) {
  using st::kRowsPT;
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kMaxWarps = st::kThreads / kWarp;
  __shared__ uint64_t full[st::kMaxStages];
  __shared__ float red[2][kMaxWarps][kRowsPT];
  const int t = threadIdx.x, lane = t % kWarp, wi = t / kWarp;
  const int rg = t / geo.nt;
  const int32_t c = t % geo.nt;                                        // this thread's chunk column
  uint8_t* sq = smem;                                                  // stages x q_bytes
  uint8_t* ss = smem + static_cast<size_t>(geo.stages) * geo.q_bytes;  // stages x s_bytes
  const int64_t rb = w_row_bytes<F>(w);
  const int64_t sb = w.n_in / 32 * 2;
  // This block's stages: the i-th of its count is first + i * step.
  const int32_t first = static_cast<int32_t>(blockIdx.x);
  const int32_t step = static_cast<int32_t>(gridDim.x);
  const int32_t count = (geo.n_stages - first + step - 1) / step;
  auto issue = [&](int32_t i) {
    const int slot = i % geo.stages;
    const int64_t r0 = static_cast<int64_t>(first + i * step) * geo.sr;
    st::mbar_expect(&full[slot], geo.q_bytes + geo.s_bytes);
    st::bulk_copy(sq + static_cast<size_t>(slot) * geo.q_bytes,
                  static_cast<const uint8_t*>(w.data) + r0 * rb, geo.q_bytes, &full[slot]);
    st::bulk_copy(ss + static_cast<size_t>(slot) * geo.s_bytes,
                  static_cast<const uint8_t*>(w.scales) + r0 * sb, geo.s_bytes, &full[slot]);
  };
  if (t == 0) {
    for (int k = 0; k < geo.stages; ++k) st::mbar_init(&full[k], 1);
    st::mbar_init_fence();
  }
  __syncthreads();
  // The weights do not depend on the previous kernel: the ring fills before the PDL wait.
  if (t == 0) {
    for (int32_t i = 0; i < min(count, geo.stages); ++i) issue(i);
  }
  pdl_begin();
  // This thread's x (Q4_0: 32 elements as two halves; Q8_0: 16).
  int xl[8], xh[8];
  float xs, sx8 = 0.0f;
  if constexpr (F == kWQ4_0) {
    load_x16(x.q + c * 32, xl);
    load_x16(x.q + c * 32 + 16, xh);
    xs = __ldg(x.scale + c) * 0.0625f;
    const float2 s2 = __ldg(reinterpret_cast<const float2*>(x.sum16) + c);
    sx8 = 8.0f * (s2.x + s2.y);
  } else {
    load_x16(x.q + c * 16, xl);
    xs = __ldg(x.scale + c / 2);
  }
  float sc = 1.0f;
  if (rin.parts != nullptr) {
    PartsAcc pv;
    pv.load(rin, lane);
    sc = rms_scale(warp_sum(pv.sum()), rin.n, rin.eps);
  }
  const int warps_rg = geo.nt / kWarp;
  for (int32_t i = 0; i < count; ++i) {
    const int slot = i % geo.stages;
    st::mbar_wait(&full[slot], static_cast<uint32_t>(i / geo.stages) & 1u);
    const uint8_t* q = sq + static_cast<size_t>(slot) * geo.q_bytes;
    const uint16_t* sp =
        reinterpret_cast<const uint16_t*>(ss + static_cast<size_t>(slot) * geo.s_bytes);
    float acc[kRowsPT];
#pragma unroll
    for (int k = 0; k < kRowsPT; ++k) {
      const int r = rg * kRowsPT + k;
      const uint4 v = *reinterpret_cast<const uint4*>(q + r * rb + c * 16);
      if constexpr (F == kWQ4_0) {
        // Two independent chains of dp2a (the low and the high nibbles), joined at the end: the
        // kernel's warps stall on the chains' fixed latency.
        const int s0 =
            dot16(xl, v.x & 0x0f0f0f0fu, v.y & 0x0f0f0f0fu, v.z & 0x0f0f0f0fu, v.w & 0x0f0f0f0fu);
        const int s1 = dot16<true>(xh, v.x & 0xf0f0f0f0u, v.y & 0xf0f0f0f0u, v.z & 0xf0f0f0f0u,
                                   v.w & 0xf0f0f0f0u, 0);
        const float d = half_to_float(sp[r * (sb / 2) + c]);
        acc[k] = d * fmaf(xs, static_cast<float>(s1 + 16 * s0), -sx8);
      } else {
        const int s0 = dot8(xl, v.x, v.y, 0) + dot8(xl + 4, v.z, v.w, 0);
        const float d = half_to_float(sp[r * (sb / 2) + c / 2]);
        acc[k] = d * xs * static_cast<float>(s0);
      }
    }
    // The warp's four row sums in six shuffles: halves of the warp swap pairs of rows, then
    // quarters single rows; lane 8 k ends with row k.
    static_assert(kRowsPT == 4, "the transposing reduction below");
    const bool hi16 = (lane & 16) != 0, hi8 = (lane & 8) != 0;
    float k0 = hi16 ? acc[2] : acc[0], k1 = hi16 ? acc[3] : acc[1];
    k0 += __shfl_xor_sync(0xffffffffu, hi16 ? acc[0] : acc[2], 16);
    k1 += __shfl_xor_sync(0xffffffffu, hi16 ? acc[1] : acc[3], 16);
    float rs = hi8 ? k1 : k0;
    rs += __shfl_xor_sync(0xffffffffu, hi8 ? k0 : k1, 8);
    rs += __shfl_xor_sync(0xffffffffu, rs, 4);
    rs += __shfl_xor_sync(0xffffffffu, rs, 2);
    rs += __shfl_xor_sync(0xffffffffu, rs, 1);
    if (lane % 8 == 0) red[i & 1][wi][lane / 8] = rs;
    __syncthreads();  // every thread is past the slot, and red[i & 1] is complete
    if (t == 0 && i + geo.stages < count) issue(i + geo.stages);
    if (t < geo.sr) {
      const int g = t / kRowsPT, k = t % kRowsPT;
      float v = 0.0f;
      for (int ww = g * warps_rg; ww < (g + 1) * warps_rg; ++ww) v += red[i & 1][ww][k];
      const int64_t row = static_cast<int64_t>(first + i * step) * geo.sr + t;
      v *= sc;
      if (add != nullptr) v += add[row];
      y[row] = v;
    }
  }
}

// strategies.kernels.cuda.matvec_stream_kb: the ring's shared memory a block, in KB.
std::atomic<uint32_t> g_stream_kb{96};
uint32_t stream_budget() { return g_stream_kb.load(std::memory_order_relaxed) * 1024u; }

// The streaming kernel's geometry and grid for w, or none where it does not apply: rows of
// 32, 64, 128 or 256 chunks, a whole number of stages, and (kAuto) at least kMinStagesPerBlock
// stages a resident block. Where each block has only a few stages, the register kernel is
// faster: its small blocks start during the previous kernel, while the streaming blocks wait for
// room for their shared memory (docs/strategies/kernels.md, "Measured choices").
constexpr int64_t kMinStagesPerBlock = 8;

template <int F>
std::optional<st::Geo> stream_plan(const WeightView& w) {
  const MatvecStream mode = matvec_stream_mode();
  if (!(F == kWQ4_0 || F == kWQ8_0) || mode == MatvecStream::kNever || w.n_in % 256 != 0) {
    return std::nullopt;
  }
  const int64_t nc = w_chunks<F>(w);  // a thread a chunk column
  if (nc % kWarp != 0 || nc > st::kThreads || st::kThreads % nc != 0) return std::nullopt;
  st::Geo g;
  g.nt = static_cast<int32_t>(nc);
  g.sr = st::kRowsPT * (st::kThreads / g.nt);
  if (w.n_out % g.sr != 0) return std::nullopt;
  g.n_stages = static_cast<int32_t>(w.n_out / g.sr);
  g.q_bytes = static_cast<uint32_t>(g.sr * w_row_bytes<F>(w));
  g.s_bytes = static_cast<uint32_t>(g.sr * (w.n_in / 32) * 2);
  g.stages = static_cast<int32_t>(
      std::min<uint32_t>(st::kMaxStages, stream_budget() / (g.q_bytes + g.s_bytes)));
  if (g.stages < 2) return std::nullopt;
  // The kernel may take up to 220 KB of dynamic shared memory: set before the occupancy query,
  // which otherwise counts on the default 48 KB (and answers 0 blocks for a larger ring).
  static const cudaError_t attr = cudaFuncSetAttribute(
      matvec_q16_stream_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024);
  if (attr != cudaSuccess) return std::nullopt;
  // Blocks a SM for each ring depth (the shared memory bounds them), asked once.
  static std::atomic<int> per_sm[st::kMaxStages + 1] = {};
  int ps = per_sm[g.stages].load(std::memory_order_relaxed);
  if (ps == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &ps, matvec_q16_stream_kernel<F>, st::kThreads,
            static_cast<size_t>(g.stages) * (g.q_bytes + g.s_bytes)) != cudaSuccess ||
        ps < 1) {
      return std::nullopt;
    }
    per_sm[g.stages].store(ps, std::memory_order_relaxed);
  }
  g.blocks =
      static_cast<int32_t>(std::min<int64_t>(g.n_stages, static_cast<int64_t>(ps) * sm_count()));
  if (mode == MatvecStream::kAuto && g.n_stages < kMinStagesPerBlock * g.blocks) {
    return std::nullopt;
  }
  return g;
}

template <int F>
cudaError_t launch_stream(const WeightView& w, const Q16View& x, const float* add, float* y,
                          const RmsIn& rin, const st::Geo& g, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(g.stages) * (g.q_bytes + g.s_bytes);
  return launch_pdl(matvec_q16_stream_kernel<F>, dim3(static_cast<unsigned>(g.blocks)),
                    dim3(st::kThreads), smem, stream, w, x, add, y, rin, g);
}

template <int F, int S, int kNT, bool kNorm, int MB = 0>
cudaError_t launch_fs(const WeightView& w, const Q16View& x, const float* add, float* y,
                      const RmsIn& rin, const ResNormOut& rn, cudaStream_t stream) {
  constexpr int rows_per_block = (kNT / kWarp / S) * Q16Cfg<F>::kRows;
  const int64_t blocks = (w.n_out + rows_per_block - 1) / rows_per_block;
  return launch_pdl(matvec_q16_kernel<F, S, kNT, kNorm, MB>, dim3(static_cast<unsigned>(blocks)),
                    dim3(kNT), 0, stream, w, x, add, y, rin, rn);
}

// A consumer's split-K and register budget: split 2 (matvec_split_q16) where its grid fits one
// wave of resident blocks (kMinBlocks an SM); else, for Q8_0, split 2 at 6 blocks an SM
// (kWaveMinBlocks) where that fits; else split 1 where that fits. A grid past one wave ran its
// last blocks as a second wave: the Llama-3-8B shape's QKV matrix (6144 rows, 768 blocks of 8
// at split 2, 660 places at 5 an SM). H200 decode step, two runs: q4_0 1.5416 / 1.5412 ms at
// split 2 against 1.5291 / 1.5306 at split 1 (384 blocks); q8_0 2.2491 / 2.2488 against
// 2.2393 / 2.2384 at 6 blocks an SM (792 places). Q8_0 at 6 everywhere cost SmolLM2 q8_0 2-3%.
struct ConsumerPlan {
  int split;
  bool wave_regs;  // the kWaveMinBlocks instance
};
template <int F>
ConsumerPlan consumer_plan(const WeightView& w, int split) {
  if (F != kWQ4_0 && F != kWQ8_0) return {split, false};
  if (split != 2 || matvec_split_forced()) return {split, false};
  constexpr int kRowsAt1 = (kThreads / kWarp) * Q16Cfg<F>::kRows;  // rows a block at split 1
  const int64_t sms = sm_count();
  const int64_t at2 = (w.n_out + kRowsAt1 / 2 - 1) / (kRowsAt1 / 2);
  const int64_t at1 = (w.n_out + kRowsAt1 - 1) / kRowsAt1;
  if (at2 <= sms * Q16Cfg<F>::kMinBlocks) return {2, false};
  if (at2 <= sms * Q16Cfg<F>::kWaveMinBlocks) return {2, true};
  if (at1 <= sms * Q16Cfg<F>::kMinBlocks) return {1, false};
  return {2, false};
}

template <int F>
cudaError_t launch_f(const WeightView& w, const Q16View& x, const float* add, float* y,
                     const RmsIn& rin, const ResNormOut* rn, cudaStream_t stream) {
  if constexpr (F == kWQ4_0 || F == kWQ8_0) {
    if (rn == nullptr) {  // the producers keep the register kernel (see the streaming kernel)
      if (const std::optional<st::Geo> g = stream_plan<F>(w)) {
        return launch_stream<F>(w, x, add, y, rin, *g, stream);
      }
    }
  }
  const int split = matvec_split_q16(w_chunks<F>(w));
  if (rn != nullptr) {
    // 32 rows a block: 8 warps, or 16 with split-K 2 (8 warps a block with split 1 even where
    // the split is 2 was slower: q4_0 1.73 -> 1.87 ms).
    if (split == 1) return launch_fs<F, 1, 256, true>(w, x, nullptr, nullptr, {}, *rn, stream);
    return launch_fs<F, 2, 512, true>(w, x, nullptr, nullptr, {}, *rn, stream);
  }
  const ConsumerPlan plan = consumer_plan<F>(w, split);
  if constexpr (Q16Cfg<F>::kWaveMinBlocks > 0) {
    if (plan.wave_regs) {
      return launch_fs<F, 2, kThreads, false, Q16Cfg<F>::kWaveMinBlocks>(w, x, add, y, rin, {},
                                                                         stream);
    }
  }
  switch (plan.split) {
    case 4: return launch_fs<F, 4, kThreads, false>(w, x, add, y, rin, {}, stream);
    case 2: return launch_fs<F, 2, kThreads, false>(w, x, add, y, rin, {}, stream);
    default: return launch_fs<F, 1, kThreads, false>(w, x, add, y, rin, {}, stream);
  }
}

cudaError_t launch_any(const WeightView& w, const Q16View& x, const float* add, float* y,
                       const RmsIn& rin, const ResNormOut* rn, cudaStream_t stream) {
  switch (w.format) {
    case kWQ8_0: return launch_f<kWQ8_0>(w, x, add, y, rin, rn, stream);
    case kWQ4_0: return launch_f<kWQ4_0>(w, x, add, y, rin, rn, stream);
    case kWQ4_1: return launch_f<kWQ4_1>(w, x, add, y, rin, rn, stream);
    case kWQ4_K: return launch_f<kWQ4_K>(w, x, add, y, rin, rn, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

namespace {
std::atomic<MatvecStream>& stream_mode_ref() {
  static std::atomic<MatvecStream> mode{MatvecStream::kAuto};  // kernels.cuda.matvec_stream
  return mode;
}
// strategies.kernels.cuda.producer_l2: -1 auto, 0 off, 1 narrow rows, 2 every producer.
std::atomic<int> g_producer_l2{-1};
}  // namespace

void set_matvec_stream_kb(int kb) {
  if (kb >= 16 && kb <= 220)
    g_stream_kb.store(static_cast<uint32_t>(kb), std::memory_order_relaxed);
}
void set_producer_l2(int mode) {
  g_producer_l2.store(mode >= -1 && mode <= 2 ? mode : -1, std::memory_order_relaxed);
}

MatvecStream matvec_stream_mode() { return stream_mode_ref().load(std::memory_order_relaxed); }
void set_matvec_stream_mode(MatvecStream m) {
  stream_mode_ref().store(m, std::memory_order_relaxed);
}

cudaError_t launch_matvec_q16(const WeightView& w, const Q16View& x, const float* add, float* y,
                              cudaStream_t stream, const RmsIn& rin) {
  return launch_any(w, x, add, y, rin, nullptr, stream);
}

cudaError_t launch_matvec_q16_res_norm(const WeightView& w, const Q16View& x, const ResNormOut& rn,
                                       cudaStream_t stream) {
  if (w.n_out % 32 != 0) return cudaErrorInvalidValue;
  // The L2 prefetch of the grid's second half (in the kernel): on for Q8_0 producers of rows up
  // to 8192 (Wo; its blocks on the SMs the fused attention holds start late), where it paid;
  // for Q4_0 and for every producer it cost (docs/strategies/kernels.md has the figures).
  // strategies.kernels.cuda.producer_l2 (off, narrow: those rows in every format, all: every
  // producer) overrides.
  const int l2 = g_producer_l2.load(std::memory_order_relaxed);
  ResNormOut r = rn;
  const bool narrow = w.n_in <= 8192;
  r.l2_prefetch = (l2 < 0 ? w.format == kWQ8_0 && narrow : l2 == 2 || (l2 == 1 && narrow)) ? 1 : 0;
  return launch_any(w, x, nullptr, nullptr, {}, &r, stream);
}

}  // namespace rinfer::cuda::kern
