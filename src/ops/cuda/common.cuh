// Device helpers shared by the kernels in src/ops/cuda (included by .cu files only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "ops/cuda/launch.h"  // pdl_enabled

namespace rinfer::cuda::kern {

inline constexpr int kWarp = 32;

// Programmatic dependent launch (PDL, sm_90+). Kernels of the decode path are launched with
// launch_pdl below, which lets the next kernel of the stream (or of a captured graph) be launched
// before this one finishes. Every such kernel starts with pdl_begin(): griddepcontrol.wait blocks
// until the previous kernel has completed and its writes are visible (a no-op when the kernel
// was launched without the attribute), then launch_dependents lets the next kernel's blocks be
// scheduled into the free SM slots, so its launch latency overlaps this kernel's work and tail.
// Nothing global may be read or written before pdl_begin() (a matvec's weights excepted: they
// do not depend on any kernel; nor do data that only the host or earlier decode steps wrote,
// which the fused decode attention reads before its pdl_wait()).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_trigger();
}

// For the latency-bound kernels of the decode chain (norm, GLU, attention: a few blocks, no
// weights worth prefetching): let the next kernel launch at once, then wait. The next kernel is
// then launched while this one still waits for its predecessor, so its blocks are resident and
// its first weight loads (issued before its own wait) are in flight as early as resources
// allow. Safe: every kernel still waits (griddepcontrol.wait) for its predecessor's completion,
// which in turn waited for its own; and a dependent is launched only once every block of this
// grid has started, so the waiting blocks never keep this grid's from being scheduled.
// The matvecs keep pdl_begin (trigger after their first loads): triggering first in every
// kernel gained nothing more on the 8B shape and lost on SmolLM2 (docs/strategies/kernels.md,
// "Measured choices").
__device__ __forceinline__ void pdl_trigger_then_wait() {
  pdl_trigger();
  pdl_wait();
}

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-stream-serialization
// attribute when pdl_enabled(), in clusters of cluster_x blocks along x when cluster_x > 1 (the
// grid's x a multiple of it); the kernel must begin with pdl_begin().
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, unsigned cluster_x, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  // A failed launch is this call's error alone: cleared, so the next launch does not report it.
  if (err != cudaSuccess) (void)cudaGetLastError();
  return err != cudaSuccess ? err : cudaGetLastError();
}
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args&&... args) {
  return launch_pdl_cluster(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

// 16-byte load of data read once (weights, KV): bypasses L1 so it keeps the reused activations.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float4 ld_f4(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}

// bf16 pair in one 32-bit word: element 0 in the low half.
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float2 half2_to_float2(uint32_t w) {
  __half2 h;
  memcpy(&h, &w, 4);
  return __half22float2(h);
}

__device__ __forceinline__ float half_to_float(uint16_t b) {
  return __half2float(__ushort_as_half(b));
}

// Exact small unsigned integers to float: byte k (0..3) of `w`, a value < 256, placed in the
// mantissa of 2^23 and the offset subtracted (one PRMT + one FADD; I2F is quarter rate).
template <int K>
__device__ __forceinline__ float byte_to_float(uint32_t w) {
  constexpr uint32_t kSel = 0x7440u | K;
  return __uint_as_float(__byte_perm(w, 0x4B000000u, kSel)) - 8388608.0f;
}

// Round-to-nearest-even f32 -> bf16 bits.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// Two f32 to a bf16 pair (lo in the low half), one cvt.rn.bf16x2.f32.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &p, 4);
  return u;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024). `scratch`: 32 floats of shared
// memory. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int n_warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int n_warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// The int16 activation blocks of matvec_q16 (quantize_q16.cu's layout), from four consecutive
// elements per lane: v holds elements i..i+3 (i % 4 == 0) and lanes 8j..8j+7 of the warp hold one
// 32-element block. scale = absmax / 32767 (0 for an all-zero block), q = round(v / scale), and
// per 16 elements their f32 sum ((x + y) + (z + w) per lane, then over lane pairs). Every kernel
// that writes these blocks (quantize_q16, the norm, GLU and attention fusions) uses this one
// function, so their outputs agree bit for bit. The whole warp calls it; lanes with valid ==
// false (whole 8-lane groups) take part in the shuffles and store nothing.
__device__ __forceinline__ void quantize4(float4 v, int64_t i, bool valid, int16_t* q, float* scale,
                                          float* sum16) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
  float s = (v.x + v.y) + (v.z + v.w);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  if (!valid) return;
  const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
  const short4 qv = make_short4(static_cast<int16_t>(__float2int_rn(v.x * inv)),
                                static_cast<int16_t>(__float2int_rn(v.y * inv)),
                                static_cast<int16_t>(__float2int_rn(v.z * inv)),
                                static_cast<int16_t>(__float2int_rn(v.w * inv)));
  *reinterpret_cast<short4*>(q + i) = qv;
  const int lane = threadIdx.x % kWarp;
  if (lane % 8 == 0) scale[i / 32] = amax / 32767.0f;
  if (lane % 4 == 0) sum16[i / 16] = s;
}

// SwiGLU (silu(g) * u) or GeGLU with the tanh approximation, as the CPU reference computes them.
__device__ __forceinline__ float glu1(float g, float u, bool gelu) {
  float a;
  if (gelu) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    a = 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  } else {
    a = g / (1.0f + expf(-g));
  }
  return a * u;
}

// The RMSNorm scale 1 / sqrt(mean(x^2) + eps), in double from the f32 sum of squares, as the
// CPU reference computes it.
__device__ __forceinline__ float rms_scale(float ss, int64_t n, float eps) {
  return static_cast<float>(
      1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(n) + static_cast<double>(eps)));
}

// Rows held as K float4s a thread: float4 number i4 = threadIdx.x + k blockDim.x of n4.
// load_row4: p's float4s (fill where p is null or past the row).
template <int K>
__device__ __forceinline__ void load_row4(const float* p, int64_t n4, float4 fill, float4 (&v)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i4 = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    v[k] = i4 < n4 && p != nullptr ? ld_f4(p + 4 * i4) : fill;
  }
}

// v = x (+ residual, written back when residual != nullptr; zeros past the row); returns this
// thread's sum of squares. All loads are issued before the first store.
template <int K>
__device__ __forceinline__ float load_residual_row4(const float* x, float* residual, int64_t n4,
                                                    float4 (&v)[K]) {
  load_row4<K>(x, n4, make_float4(0.0f, 0.0f, 0.0f, 0.0f), v);
  if (residual != nullptr) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i4 = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i4 < n4) {
        const float4 r = *reinterpret_cast<const float4*>(residual + 4 * i4);
        v[k] = make_float4(v[k].x + r.x, v[k].y + r.y, v[k].z + r.z, v[k].w + r.w);
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i4 = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i4 < n4 && residual != nullptr) *reinterpret_cast<float4*>(residual + 4 * i4) = v[k];
    ss = fmaf(v[k].x, v[k].x, ss);
    ss = fmaf(v[k].y, v[k].y, ss);
    ss = fmaf(v[k].z, v[k].z, ss);
    ss = fmaf(v[k].w, v[k].w, ss);
  }
  return ss;
}

// Stores four f32 as float4 number i4 of an f32 array or four bf16 of a bf16 one.
__device__ __forceinline__ void store_act4(void* out, int64_t i4, float4 o, bool bf16) {
  if (bf16) {
    uint2 b;
    b.x = pack_bf16x2(o.x, o.y);
    b.y = pack_bf16x2(o.z, o.w);
    static_cast<uint2*>(out)[i4] = b;
  } else {
    static_cast<float4*>(out)[i4] = o;
  }
}

// Stores f32 as f32 or bf16.
__device__ __forceinline__ void store_act(void* out, int64_t i, float v, bool bf16) {
  if (bf16) {
    static_cast<uint16_t*>(out)[i] = f32_to_bf16_bits(v);
  } else {
    static_cast<float*>(out)[i] = v;
  }
}

}  // namespace rinfer::cuda::kern
