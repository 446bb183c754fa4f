// Embedding gather: out[i, :] = row ids[i] of a device weight (any format), as f32 or bf16.
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

template <int F>
cudaError_t launch_f(const WeightView& w, const int32_t* ids, int64_t n_ids, bool out_bf16,
                     void* out, cudaStream_t stream) {
  if (n_ids > 0) {
    return launch_pdl(get_rows_kernel<F>, dim3(static_cast<unsigned>(n_ids)), dim3(128), 0, stream,
                      w, ids, out_bf16, out);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, bool out_bf16,
                            void* out, cudaStream_t stream) {
  switch (w.format) {
    case kWF32: return launch_f<kWF32>(w, ids, n_ids, out_bf16, out, stream);
    case kWF16: return launch_f<kWF16>(w, ids, n_ids, out_bf16, out, stream);
    case kWBF16: return launch_f<kWBF16>(w, ids, n_ids, out_bf16, out, stream);
    case kWQ8_0: return launch_f<kWQ8_0>(w, ids, n_ids, out_bf16, out, stream);
    case kWQ4_0: return launch_f<kWQ4_0>(w, ids, n_ids, out_bf16, out, stream);
    case kWQ4_1: return launch_f<kWQ4_1>(w, ids, n_ids, out_bf16, out, stream);
    case kWQ4_K: return launch_f<kWQ4_K>(w, ids, n_ids, out_bf16, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace rinfer::cuda::kern
