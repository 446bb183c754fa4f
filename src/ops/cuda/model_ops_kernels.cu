// Kernels of model_ops.h (launchers declared in launch_model.h).
#include "ops/cuda/common.cuh"
#include "ops/cuda/launch_model.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void add_bias_rows_kernel(float* x, const float* bias, int64_t n_rows, int64_t n,
                                     int64_t stride) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n) return;
  const int64_t r = idx / n, i = idx % n;
  x[r * stride + i] += bias[i];
}

// One warp per (token, head).
__global__ void rms_norm_heads_kernel(float* x, const float* w, int64_t n_tokens, int64_t n_heads,
                                      int64_t head_dim, int64_t token_stride, float eps) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= n_tokens * n_heads) return;
  const int64_t t = warp / n_heads, h = warp % n_heads;
  float* p = x + t * token_stride + h * head_dim;
  float ss = 0.0f;
  for (int64_t i = lane; i < head_dim; i += kWarp) ss += p[i] * p[i];
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int64_t i = lane; i < head_dim; i += kWarp) p[i] = p[i] * r * w[i];
}

__global__ void gather_rows_kernel(const float* src, int64_t src_stride, const int32_t* rows,
                                   int64_t n_rows, int64_t n, float* dst) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n) return;
  const int64_t r = idx / n, i = idx % n;
  dst[idx] = src[static_cast<int64_t>(rows[r]) * src_stride + i];
}

// Quantizes v (this lane's element of a 32-element block) to int16 like quantize_q16.cu:
// scale = absmax / 32767, q = round(v / scale), per 16 elements the exact f32 sum.
__device__ __forceinline__ void quantize_lane(float v, int64_t i, int16_t* q, float* scale,
                                              float* sum16) {
  const int lane = threadIdx.x % kWarp;
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  float sm = v;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sm += __shfl_xor_sync(0xffffffffu, sm, o);
  const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
  q[i] = static_cast<int16_t>(__float2int_rn(v * inv));
  if (lane == 0) scale[i / 32] = amax / 32767.0f;
  if (lane % 16 == 0) sum16[i / 16] = sm;
}

// One row (decode): [residual += x]; out = rms_norm(.) * w as f32 and as int16 blocks.
// n % 32 == 0; blockDim.x a multiple of 32.
__global__ void rms_norm_q16_kernel(const float* x, float* residual, const float* __restrict__ w,
                                    int64_t n, float eps, float* out, int16_t* q, float* scale,
                                    float* sum16) {
  __shared__ float scratch[32];
  pdl_begin();
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = x[i];
    if (residual != nullptr) {
      v += residual[i];
      residual[i] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, scratch);
  const float sc = static_cast<float>(
      1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(n) + static_cast<double>(eps)));
  const float* src = residual != nullptr ? residual : x;
  // Whole warps walk whole 32-element blocks, so each block's lanes quantize together.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = src[i] * sc * w[i];
    out[i] = v;
    quantize_lane(v, i, q, scale, sum16);
  }
}

// The same with the row held in registers: K elements a thread (i = threadIdx.x + k blockDim.x),
// so the residual is read and written once and nothing waits on a second pass over memory; the
// loads of a thread are all issued before the first use. n % 32 == 0, n <= K * blockDim.x.
template <int K>
__global__ void rms_norm_q16_reg_kernel(const float* x, float* residual,
                                        const float* __restrict__ w, int64_t n, float eps,
                                        float* out, int16_t* q, float* scale, float* sum16) {
  __shared__ float scratch[32];
  pdl_begin();
  float v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    v[k] = 0.0f;
    if (i < n) v[k] = residual != nullptr ? x[i] + residual[i] : x[i];
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < n && residual != nullptr) residual[i] = v[k];
    ss = fmaf(v[k], v[k], ss);
  }
  ss = block_sum(ss, scratch);
  const float sc = static_cast<float>(
      1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(n) + static_cast<double>(eps)));
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < n) {  // whole warps (n and blockDim.x multiples of 32)
      const float o = v[k] * sc * w[i];
      out[i] = o;
      quantize_lane(o, i, q, scale, sum16);
    }
  }
}

// SwiGLU / GeGLU (tanh) of one row with the output also quantized to int16 blocks.
__global__ void glu_q16_kernel(const float* gate, const float* up, int64_t n, bool gelu, float* out,
                               int16_t* q, float* scale, float* sum16) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;  // n % 32 == 0: whole warps return together
  const float g = gate[i], u = up[i];
  float a;
  if (gelu) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    a = 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  } else {
    a = g / (1.0f + expf(-g));
  }
  const float v = a * u;
  out[i] = v;
  quantize_lane(v, i, q, scale, sum16);
}

}  // namespace

cudaError_t launch_rms_norm_q16(const float* x, float* residual, const float* w, int64_t n,
                                float eps, float* out, int16_t* q, float* scale, float* sum16,
                                cudaStream_t s) {
  // Rows of up to 8192 in registers (one element a thread up to 1024); longer rows loop.
  if (n <= 1024) {
    return launch_pdl(rms_norm_q16_reg_kernel<1>, dim3(1), dim3(static_cast<unsigned>(n)), 0, s, x,
                      residual, w, n, eps, out, q, scale, sum16);
  }
  if (n <= 2048) {
    return launch_pdl(rms_norm_q16_reg_kernel<2>, dim3(1), dim3(1024), 0, s, x, residual, w, n, eps,
                      out, q, scale, sum16);
  }
  if (n <= 4096) {
    return launch_pdl(rms_norm_q16_reg_kernel<4>, dim3(1), dim3(1024), 0, s, x, residual, w, n, eps,
                      out, q, scale, sum16);
  }
  if (n <= 8192) {
    return launch_pdl(rms_norm_q16_reg_kernel<8>, dim3(1), dim3(1024), 0, s, x, residual, w, n, eps,
                      out, q, scale, sum16);
  }
  const int threads = 1024;
  return launch_pdl(rms_norm_q16_kernel, dim3(1), dim3(threads), 0, s, x, residual, w, n, eps, out,
                    q, scale, sum16);
}

cudaError_t launch_glu_q16(const float* gate, const float* up, int64_t n, bool gelu, float* out,
                           int16_t* q, float* scale, float* sum16, cudaStream_t s) {
  return launch_pdl(glu_q16_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, s, gate, up, n, gelu,
                    out, q, scale, sum16);
}

cudaError_t launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) add_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, b, n, out);
  return cudaGetLastError();
}

cudaError_t launch_scale(float* x, int64_t n, float v, cudaStream_t s) {
  if (n > 0) scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, v);
  return cudaGetLastError();
}

cudaError_t launch_add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t n,
                                 int64_t stride, cudaStream_t s) {
  if (n_rows * n > 0) {
    add_bias_rows_kernel<<<blocks_for(n_rows * n), kThreads, 0, s>>>(x, bias, n_rows, n, stride);
  }
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_heads(float* x, const float* w, int64_t n_tokens, int64_t n_heads,
                                  int64_t head_dim, int64_t token_stride, float eps,
                                  cudaStream_t s) {
  const int64_t threads = n_tokens * n_heads * kWarp;
  if (threads > 0) {
    rms_norm_heads_kernel<<<blocks_for(threads), kThreads, 0, s>>>(x, w, n_tokens, n_heads,
                                                                   head_dim, token_stride, eps);
  }
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float* src, int64_t src_stride, const int32_t* rows,
                               int64_t n_rows, int64_t n, float* dst, cudaStream_t s) {
  if (n_rows * n > 0) {
    gather_rows_kernel<<<blocks_for(n_rows * n), kThreads, 0, s>>>(src, src_stride, rows, n_rows, n,
                                                                   dst);
  }
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
