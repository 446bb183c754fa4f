// A cuDNN handle and the backend (graph) API's descriptors as owned values (CUDA builds only).
// cuDNN ships with the CUDA toolkit; ops/cuda/conv_cudnn.h builds its convolution plans on these.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>

#include "rinfer/status.h"

namespace rinfer::cuda {

// A cuDNN error as a Status (kDeviceError; kOutOfMemory for CUDNN_STATUS_ALLOC_FAILED), with
// cuDNN's last error message when it has one.
Status cudnn_status(cudnnStatus_t st, const char* what);

class CudnnHandle {
 public:
  CudnnHandle() = default;
  static Result<CudnnHandle> create(int device);
  ~CudnnHandle() { reset(); }
  CudnnHandle(CudnnHandle&& o) noexcept { *this = std::move(o); }
  CudnnHandle& operator=(CudnnHandle&& o) noexcept;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  cudnnHandle_t get() const { return h_; }
  int device() const { return device_; }
  void reset();

 private:
  cudnnHandle_t h_ = nullptr;
  int device_ = 0;
};

// One backend descriptor (cudnnBackendCreateDescriptor ... Destroy), with typed setters that
// return a Status naming the attribute.
class BackendDesc {
 public:
  BackendDesc() = default;
  static Result<BackendDesc> create(cudnnBackendDescriptorType_t type, const char* what);
  ~BackendDesc() { reset(); }
  BackendDesc(BackendDesc&& o) noexcept { *this = std::move(o); }
  BackendDesc& operator=(BackendDesc&& o) noexcept;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Status set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
             const void* values);
  Status set_i64(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> v);
  Status set_desc(cudnnBackendAttributeName_t name, const BackendDesc& d);
  Status finalize();
  void reset();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  const char* what_ = "";
};

}  // namespace rinfer::cuda
