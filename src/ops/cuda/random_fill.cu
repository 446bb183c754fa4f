// Random device data for tests and benchmarks: a counter-based hash (splitmix64) per element, so
// gigabytes of weights appear in microseconds with no host copy. Values are never zero.
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float uniform_at(uint64_t seed, int64_t i, float lo, float hi) {
  const uint64_t h = splitmix64(seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(i));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  const float v = lo + (hi - lo) * u;
  return v == 0.0f ? 0.5f * hi : v;
}

// kind: 0 f32, 1 f16, 2 bf16.
__global__ void fill_uniform_kernel(void* p, int kind, int64_t n, float lo, float hi,
                                    uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = uniform_at(seed, i, lo, hi);
    if (kind == 0) {
      static_cast<float*>(p)[i] = v;
    } else if (kind == 1) {
      static_cast<__half*>(p)[i] = __float2half_rn(v);
    } else {
      static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v);
    }
  }
}

__global__ void fill_bytes_kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<uint8_t>(splitmix64(seed ^ (static_cast<uint64_t>(i) << 8)) >> 56);
  }
}

// FP8 E4M3 codes, every byte's value equally likely but NaN (S.1111.111, made +-448) and zero
// (made the smallest subnormal of its sign).
__global__ void fill_f8_kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    auto b = static_cast<uint8_t>(splitmix64(seed ^ (static_cast<uint64_t>(i) << 8)) >> 56);
    if ((b & 0x7fu) == 0x7fu) b = static_cast<uint8_t>(b - 1);
    if ((b & 0x7fu) == 0) b = static_cast<uint8_t>(b | 1);
    p[i] = b;
  }
}

// Sane f16 d and dmin (in [0.002, 0.03)) at the start of every 144-byte Q4_K block.
__global__ void q4k_headers_kernel(uint8_t* p, int64_t n_blocks, uint64_t seed) {
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < n_blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    __half* h = reinterpret_cast<__half*>(p + b * 144);
    h[0] = __float2half_rn(uniform_at(seed, 2 * b, 0.002f, 0.03f));
    h[1] = __float2half_rn(uniform_at(seed, 2 * b + 1, 0.002f, 0.03f));
  }
}

// 16-byte copies, four in flight per thread, grid-stride.
__global__ void copy16_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = ld_stream16(src + i), b = ld_stream16(src + i + stride);
    const uint4 c = ld_stream16(src + i + 2 * stride), d = ld_stream16(src + i + 3 * stride);
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

cudaError_t launch_fill_uniform(void* p, int kind, int64_t n, float lo, float hi, uint64_t seed,
                                cudaStream_t stream) {
  fill_uniform_kernel<<<grid_for(n), 256, 0, stream>>>(p, kind, n, lo, hi, seed);
  return cudaGetLastError();
}

cudaError_t launch_copy16(void* dst, const void* src, int64_t n16, cudaStream_t stream) {
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) == cudaSuccess) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  }
  copy16_kernel<<<static_cast<unsigned>(sms * 8), 256, 0, stream>>>(
      static_cast<uint4*>(dst), static_cast<const uint4*>(src), n16);
  return cudaGetLastError();
}

cudaError_t launch_fill_bytes(void* p, int64_t n, uint64_t seed, cudaStream_t stream) {
  fill_bytes_kernel<<<grid_for(n), 256, 0, stream>>>(static_cast<uint8_t*>(p), n, seed);
  return cudaGetLastError();
}

cudaError_t launch_fill_f8(void* p, int64_t n, uint64_t seed, cudaStream_t stream) {
  fill_f8_kernel<<<grid_for(n), 256, 0, stream>>>(static_cast<uint8_t*>(p), n, seed);
  return cudaGetLastError();
}

cudaError_t launch_q4k_headers(void* p, int64_t n_blocks, uint64_t seed, cudaStream_t stream) {
  q4k_headers_kernel<<<grid_for(n_blocks), 256, 0, stream>>>(static_cast<uint8_t*>(p), n_blocks,
                                                             seed);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
