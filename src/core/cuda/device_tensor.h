// Tensors on a CUDA device (CUDA builds only): upload and download.
//
// A device tensor is a Tensor whose Buffer lives on Device::cuda(i) and is owned by a block of a
// DeviceAllocator (freed back to it when the last view goes). Tensor::wrap makes such tensors
// read-only to Tensor::mutable_data() (weights, the main use); kernels take raw device pointers
// (Tensor::data()). Scratch activations use DeviceBuffer directly.
#pragma once

#include <cuda_runtime.h>

#include "core/allocator.h"
#include "core/cuda/device_allocator.h"
#include "core/tensor.h"
#include "rinfer/status.h"

namespace rinfer::cuda {

// A contiguous copy of `t` (any dtype; a CPU tensor, or a device tensor for a device-to-device
// copy) on `device`, queued on `stream` (a stream of `device`). The copy is stream-ordered: the
// result may be used by later work on `stream` at once. A pageable CPU source may be freed when
// this returns (the driver stages it); a pinned one must stay unchanged until the stream has run
// the copy. `allocator` nullptr: default_device_allocator(device.index).
Result<Tensor> to_device(const Tensor& t, Device device, cudaStream_t stream,
                         DeviceAllocator* allocator = nullptr);

// A contiguous CPU copy of the contiguous device tensor `t`, read after all work queued on
// `stream` (this call synchronizes the stream). The host bytes come from `allocator`.
Result<Tensor> to_host(const Tensor& t, cudaStream_t stream,
                       HostAllocator& allocator = default_host_allocator());

}  // namespace rinfer::cuda
