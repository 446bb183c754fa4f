#include "core/cuda/device_tensor.h"

#include <memory>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace rinfer::cuda {

Result<Tensor> to_device(const Tensor& t, Device device, cudaStream_t stream,
                         DeviceAllocator* allocator) {
  if (!t.defined()) return invalid_argument("to_device: undefined tensor");
  if (!device.is_cuda()) {
    return invalid_argument("to_device: {} is not a CUDA device", device.to_string());
  }
  Tensor src = t;
  if (t.device().is_cpu()) {
    RINFER_ASSIGN_OR_RETURN(src, t.contiguous());
  } else if (!t.is_contiguous()) {
    return unsupported("to_device: non-contiguous device tensor {}", t.to_string());
  }
  if (allocator == nullptr) {
    RINFER_ASSIGN_OR_RETURN(allocator, default_device_allocator(device.index));
  } else if (allocator->device() != device.index) {
    return invalid_argument("to_device: allocator of cuda:{} asked for {}", allocator->device(),
                            device.to_string());
  }
  const uint64_t bytes = src.nbytes();
  RINFER_ASSIGN_OR_RETURN(void* p, allocator->allocate(static_cast<size_t>(bytes), stream));
  std::shared_ptr<const void> owner(
      p, [allocator](const void* q) { allocator->deallocate(const_cast<void*>(q)); });
  {
    RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device.index));
    if (bytes > 0) {
      if (src.device().is_cpu()) {
        RINFER_CUDA_RETURN(cudaMemcpyAsync(p, src.data(), bytes, cudaMemcpyHostToDevice, stream));
      } else if (src.device().index == device.index) {
        RINFER_CUDA_RETURN(cudaMemcpyAsync(p, src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
      } else {
        RINFER_CUDA_RETURN(
            cudaMemcpyPeerAsync(p, device.index, src.data(), src.device().index, bytes, stream));
      }
    }
  }
  return Tensor::wrap(p, bytes, src.shape(), src.dtype(), device, std::move(owner));
}

Result<Tensor> to_host(const Tensor& t, cudaStream_t stream, HostAllocator& allocator) {
  if (!t.defined()) return invalid_argument("to_host: undefined tensor");
  if (!t.device().is_cuda()) {
    return invalid_argument("to_host: {} is not on a CUDA device", t.to_string());
  }
  if (!t.is_contiguous()) return unsupported("to_host: non-contiguous tensor {}", t.to_string());
  RINFER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(t.shape(), t.dtype(), allocator));
  const uint64_t bytes = t.nbytes();
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(t.device().index));
  if (bytes > 0) {
    RINFER_CUDA_RETURN(
        cudaMemcpyAsync(out.mutable_data(), t.data(), bytes, cudaMemcpyDeviceToHost, stream));
  }
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace rinfer::cuda
