// Embedding gather: out[i, :] = row ids[i] of a device weight (any format), as f32 or bf16; and
// the decode step's gather fused with the first norm (embed_norm_q16).
// One block per id, threads over the row's 16-byte chunks. An id out of range writes a row of
// NaN (loud in every later step, never an out-of-bounds read).
#include "ops/cuda/weight_decode.cuh"

namespace rinfer::cuda::kern {
namespace {

template <int F>
__global__ void get_rows_kernel(WeightView w, const int32_t* __restrict__ ids, bool out_bf16,
                                void* out) {
  constexpr int E = WFmt<F>::kEpc;
  pdl_begin();
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  const int64_t nc = w_chunks<F>(w);
  const int64_t out0 = i * w.n_in;
  if (id < 0 || id >= w.n_out) {
    for (int64_t j = threadIdx.x; j < w.n_in; j += blockDim.x) {
      store_act(out, out0 + j, __int_as_float(0x7fc00000), out_bf16);
    }
    return;
  }
  for (int64_t c = threadIdx.x; c < nc; c += blockDim.x) {
    float v[E];
    decode_chunk<F>(w, id, c, v);
    if constexpr (is_q4<F>()) {
      const int64_t lo = chunk_base_lo<F>(c), hi = chunk_base_hi<F>(c);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        store_act(out, out0 + lo + j, v[j], out_bf16);
        store_act(out, out0 + hi + j, v[16 + j], out_bf16);
      }
    } else {
#pragma unroll
      for (int j = 0; j < E; ++j) {
        if (c * E + j < w.n_in) store_act(out, out0 + c * E + j, v[j], out_bf16);
      }
    }
  }
}

// The first layer's decode input in one kernel (one block): the embedding row of ids[0] (times
// embd_scale) into x, then out = rms_norm(x) * nw and its int16 blocks. The threads and their
// float4s are rms_norm_q16's (same sums in the same order), so the result is bit for bit that of
// get_rows, scale and rms_norm_q16.
constexpr int kEmbedNormMax = 8192;

template <int F>
__global__ void embed_norm_q16_kernel(WeightView w, const int32_t* __restrict__ ids,
                                      float embd_scale, const float* __restrict__ nw, float eps,
                                      float* x, float* out, int16_t* q, float* scale,
                                      float* sum16) {
  constexpr int E = WFmt<F>::kEpc;
  __shared__ __align__(16) float row[kEmbedNormMax];
  __shared__ float scratch[32];
  pdl_begin();
  const int32_t id = ids[0];
  const int64_t n = w.n_in, nc = w_chunks<F>(w);
  const bool bad = id < 0 || id >= w.n_out;
  for (int64_t c = threadIdx.x; c < nc; c += blockDim.x) {
    float v[E];
    if (bad) {
#pragma unroll
      for (int j = 0; j < E; ++j) v[j] = __int_as_float(0x7fc00000);
    } else {
      decode_chunk<F>(w, id, c, v);
    }
    if constexpr (is_q4<F>()) {
      const int64_t lo = chunk_base_lo<F>(c), hi = chunk_base_hi<F>(c);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        row[lo + j] = v[j] * embd_scale;
        row[hi + j] = v[16 + j] * embd_scale;
      }
    } else {
#pragma unroll
      for (int j = 0; j < E; ++j) {
        if (c * E + j < n) row[c * E + j] = v[j] * embd_scale;
      }
    }
  }
  __syncthreads();
  const int64_t n4 = n / 4;
  const auto* row4 = reinterpret_cast<const float4*>(row);
  float ss = 0.0f;
  for (int64_t i4 = threadIdx.x; i4 < n4; i4 += blockDim.x) {
    const float4 v = row4[i4];
    *reinterpret_cast<float4*>(x + 4 * i4) = v;
    ss = fmaf(v.x, v.x, ss);
    ss = fmaf(v.y, v.y, ss);
    ss = fmaf(v.z, v.z, ss);
    ss = fmaf(v.w, v.w, ss);
  }
  const float sc = rms_scale(block_sum(ss, scratch), n, eps);
  for (int64_t b = 0; b < n4; b += blockDim.x) {  // whole warps: quantize4 shuffles
    const int64_t i4 = b + threadIdx.x;
    const bool valid = i4 < n4;  // whole 8-lane groups (n % 32 == 0)
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (valid) {
      const float4 v = row4[i4], wv = ld_f4(nw + 4 * i4);
      o = make_float4(v.x * sc * wv.x, v.y * sc * wv.y, v.z * sc * wv.z, v.w * sc * wv.w);
      *reinterpret_cast<float4*>(out + 4 * i4) = o;
    }
    quantize4(o, 4 * i4, valid, q, scale, sum16);
  }
}

template <int F>
cudaError_t launch_en(const WeightView& w, const int32_t* ids, float embd_scale, const float* nw,
                      float eps, float* x, float* out, int16_t* q, float* scale, float* sum16,
                      cudaStream_t stream) {
  // rms_norm_q16's shape: about 256 threads, each with K float4s (K = 1, 2, 4, 8).
  const int64_t n4 = w.n_in / 4;
  int k = 1;
  while (k < 8 && n4 > 256 * k) k *= 2;
  const int64_t per = (n4 + k - 1) / k;
  const auto threads = static_cast<unsigned>((per + kWarp - 1) / kWarp * kWarp);
  return launch_pdl(embed_norm_q16_kernel<F>, dim3(1), dim3(threads), 0, stream, w, ids, embd_scale,
                    nw, eps, x, out, q, scale, sum16);
}

template <int F>
cudaError_t launch_f(const WeightView& w, const int32_t* ids, int64_t n_ids, bool out_bf16,
                     void* out, cudaStream_t stream) {
  if (n_ids > 0) {
    return launch_pdl(get_rows_kernel<F>, dim3(static_cast<unsigned>(n_ids)), dim3(128), 0, stream,
                      w, ids, out_bf16, out);
  }
  return cudaGetLastError();
}

// fn.template operator()<F>() for the table's layout F (every layout a device weight has).
template <typename Fn>
cudaError_t for_format(int format, Fn&& fn) {
  switch (format) {
    case kWF32: return fn.template operator()<kWF32>();
    case kWF16: return fn.template operator()<kWF16>();
    case kWBF16: return fn.template operator()<kWBF16>();
    case kWQ8_0: return fn.template operator()<kWQ8_0>();
    case kWQ4_0: return fn.template operator()<kWQ4_0>();
    case kWQ4_1: return fn.template operator()<kWQ4_1>();
    case kWQ4_K: return fn.template operator()<kWQ4_K>();
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_embed_norm_q16(const WeightView& w, const int32_t* ids, float embd_scale,
                                  const float* nw, float eps, float* x, float* out, int16_t* q,
                                  float* scale, float* sum16, cudaStream_t stream) {
  if (w.n_in % 32 != 0 || w.n_in > kEmbedNormMax) return cudaErrorInvalidValue;
  return for_format(w.format, [&]<int F>() {
    return launch_en<F>(w, ids, embd_scale, nw, eps, x, out, q, scale, sum16, stream);
  });
}

cudaError_t launch_get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, bool out_bf16,
                            void* out, cudaStream_t stream) {
  return for_format(w.format,
                    [&]<int F>() { return launch_f<F>(w, ids, n_ids, out_bf16, out, stream); });
}

}  // namespace rinfer::cuda::kern
