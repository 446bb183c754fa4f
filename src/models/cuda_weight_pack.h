// Host-side packing of weights for the CUDA samples (CUDA builds only): fused matrices from
// row blocks, and small f32 vectors gathered into one device allocation.
#pragma once

#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_allocator.h"
#include "core/error.h"
#include "core/tensor.h"

namespace rinfer {

// Rows [a; b; c] of host matrices of one dtype and row length, as one host tensor (quantized
// rows are whole blocks, so rows concatenate byte-wise).
inline Result<Tensor> concat_rows(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  int64_t n_out = 0;
  for (const Tensor* t : parts) {
    if (t->dtype() != first.dtype() || t->dim(1) != first.dim(1) || !t->is_contiguous()) {
      return invalid_argument("concat_rows: parts differ");
    }
    n_out += t->dim(0);
  }
  RINFER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty({n_out, first.dim(1)}, first.dtype()));
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  for (const Tensor* t : parts) {
    std::memcpy(dst, t->data(), t->nbytes());
    dst += t->nbytes();
  }
  return out;
}

inline bool can_merge(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  for (const Tensor* t : parts) {
    if (!t->defined() || t->dtype() != first.dtype() || t->dim(1) != first.dim(1) ||
        !t->is_contiguous()) {
      return false;
    }
  }
  return true;
}

// The f32 vectors of a layer packed into one device allocation.
struct VecPack {
  std::vector<float> host;
  std::vector<std::pair<const float**, size_t>> slots;
  void add(const float** slot, const float* src, int64_t n) {
    slots.emplace_back(slot, host.size());
    host.insert(host.end(), src, src + n);
    host.resize((host.size() + 63) / 64 * 64, 0.0f);  // 256-byte aligned starts
  }
  Status upload(cuda::DeviceBuffer& buf, int device, cudaStream_t stream,
                cuda::DeviceAllocator* a) {
    if (host.empty()) return ok_status();
    RINFER_ASSIGN_OR_RETURN(buf, cuda::DeviceBuffer::create(host.size() * 4, device, stream, a));
    RINFER_CUDA_RETURN(
        cudaMemcpyAsync(buf.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream));
    RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
    for (auto& [slot, off] : slots) *slot = buf.as<float>() + off;
    return ok_status();
  }
};

}  // namespace rinfer
