// Kernels of model_ops.h (launchers declared in launch_model.h).
#include "ops/cuda/common.cuh"
#include "ops/cuda/f8_rows.cuh"
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

// One row (decode): [residual += x]; out = rms_norm(.) * w as f32 and (q != nullptr) as int16
// blocks. A thread holds float4 number i4 = threadIdx.x + k blockDim.x (k < K) in registers, so
// the residual is read and written once; the norm weights do not depend on the previous kernel
// and are loaded before waiting for it (PDL). n % 32 == 0 and n <= 4 K blockDim.x; blockDim.x a
// multiple of 32.
template <int K>
__global__ void rms_norm_q16_kernel(const float* x, float* residual, const float* __restrict__ w,
                                    int64_t n, float eps, float* out, int16_t* q, float* scale,
                                    float* sum16, uint8_t* f8, float* f8_scale) {
  __shared__ float scratch[32];
  const int64_t n4 = n / 4;
  float4 wv[K], v[K];
  load_row4<K>(w, n4, make_float4(0.0f, 0.0f, 0.0f, 0.0f), wv);
  pdl_trigger_then_wait();
  const float ss = load_residual_row4<K>(x, residual, n4, v);
  const float sc = rms_scale(block_sum(ss, scratch), n, eps);
  float m = 0.0f;    // f8: max |out| of this thread
  bool bad = false;  // f8: a non-finite out
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i4 = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    const bool valid = i4 < n4;  // whole 8-lane groups (n % 32 == 0)
    const float4 o = make_float4(v[k].x * sc * wv[k].x, v[k].y * sc * wv[k].y,
                                 v[k].z * sc * wv[k].z, v[k].w * sc * wv[k].w);
    v[k] = o;
    if (valid) *reinterpret_cast<float4*>(out + 4 * i4) = o;
    if (q != nullptr) quantize4(o, 4 * i4, valid, q, scale, sum16);
    if (f8 != nullptr && valid) {
      const float a = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
      bad |= !(fabsf(o.x) <= FLT_MAX) | !(fabsf(o.y) <= FLT_MAX) | !(fabsf(o.z) <= FLT_MAX) |
             !(fabsf(o.w) <= FLT_MAX);
      m = fmaxf(m, a);
    }
  }
  if (f8 == nullptr) return;
  // The row's e4m3 codes and scale, as quantize_rows_f8 makes them from out.
  const float s = f8_row_scale(m, bad, scratch);
  const float inv = __frcp_rn(s);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i4 = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i4 < n4) {
      reinterpret_cast<uint32_t*>(f8)[i4] = f8_code(v[k].x, inv) | f8_code(v[k].y, inv) << 8 |
                                            f8_code(v[k].z, inv) << 16 | f8_code(v[k].w, inv) << 24;
    }
  }
  if (threadIdx.x == 0) *f8_scale = s;
}

// SwiGLU / GeGLU (tanh) of one row with the output also quantized to int16 blocks; four
// elements a thread (glu1: common.cuh).

__global__ void glu_q16_kernel(const float* gate, const float* up, int64_t n, bool gelu, float* out,
                               int16_t* q, float* scale, float* sum16) {
  pdl_trigger_then_wait();
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool valid = i4 < n / 4;  // n % 32 == 0: whole 8-lane groups
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (valid) {
    const float4 g = ld_f4(gate + 4 * i4), u = ld_f4(up + 4 * i4);
    o = make_float4(glu1(g.x, u.x, gelu), glu1(g.y, u.y, gelu), glu1(g.z, u.z, gelu),
                    glu1(g.w, u.w, gelu));
    *reinterpret_cast<float4*>(out + 4 * i4) = o;
  }
  quantize4(o, 4 * i4, valid, q, scale, sum16);
}

}  // namespace

cudaError_t launch_rms_norm_q16(const float* x, float* residual, const float* w, int64_t n,
                                float eps, float* out, int16_t* q, float* scale, float* sum16,
                                uint8_t* f8, float* f8_scale, cudaStream_t s) {
  // About 256 threads, each holding K float4 (K = 1, 2, 4, 8), up to 1024 threads.
  const int64_t n4 = n / 4;
  int k = 1;
  while (k < 8 && n4 > 256 * k) k *= 2;
  const int64_t per = (n4 + k - 1) / k;
  const auto threads = static_cast<unsigned>((per + kWarp - 1) / kWarp * kWarp);
  if (threads > 1024) return cudaErrorInvalidValue;  // n > 32768: checked by the caller
  const dim3 grid(1);
  switch (k) {
    case 1:
      return launch_pdl(rms_norm_q16_kernel<1>, grid, dim3(threads), 0, s, x, residual, w, n, eps,
                        out, q, scale, sum16, f8, f8_scale);
    case 2:
      return launch_pdl(rms_norm_q16_kernel<2>, grid, dim3(threads), 0, s, x, residual, w, n, eps,
                        out, q, scale, sum16, f8, f8_scale);
    case 4:
      return launch_pdl(rms_norm_q16_kernel<4>, grid, dim3(threads), 0, s, x, residual, w, n, eps,
                        out, q, scale, sum16, f8, f8_scale);
    default:
      return launch_pdl(rms_norm_q16_kernel<8>, grid, dim3(threads), 0, s, x, residual, w, n, eps,
                        out, q, scale, sum16, f8, f8_scale);
  }
}

cudaError_t launch_glu_q16(const float* gate, const float* up, int64_t n, bool gelu, float* out,
                           int16_t* q, float* scale, float* sum16, cudaStream_t s) {
  return launch_pdl(glu_q16_kernel, dim3(blocks_for(n / 4)), dim3(kThreads), 0, s, gate, up, n,
                    gelu, out, q, scale, sum16);
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
