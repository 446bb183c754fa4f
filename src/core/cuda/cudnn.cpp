// cuDNN handles and backend descriptors: creation, attributes, errors as Status values.
#include "core/cuda/cudnn.h"

#include <fmt/format.h>

#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace rinfer::cuda {

Status cudnn_status(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return ok_status();
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  const StatusCode code =
      st == CUDNN_STATUS_ALLOC_FAILED ? StatusCode::kOutOfMemory : StatusCode::kDeviceError;
  return Status(code, fmt::format("{}: {}{}{}", what, cudnnGetErrorString(st),
                                  detail[0] != 0 ? ": " : "", detail));
}

Result<CudnnHandle> CudnnHandle::create(int device) {
  RINFER_CUDA_RETURN(cudaSetDevice(device));
  CudnnHandle h;
  RINFER_RETURN_IF_ERROR(cudnn_status(cudnnCreate(&h.h_), "cudnnCreate"));
  h.device_ = device;
  return h;
}

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& o) noexcept {
  if (this != &o) {
    reset();
    h_ = o.h_;
    device_ = o.device_;
    o.h_ = nullptr;
  }
  return *this;
}

void CudnnHandle::reset() {
  if (h_ != nullptr) static_cast<void>(cudnnDestroy(h_));
  h_ = nullptr;
}

Result<BackendDesc> BackendDesc::create(cudnnBackendDescriptorType_t type, const char* what) {
  BackendDesc d;
  d.what_ = what;
  RINFER_RETURN_IF_ERROR(cudnn_status(cudnnBackendCreateDescriptor(type, &d.d_),
                                      fmt::format("creating the {} descriptor", what).c_str()));
  return d;
}

BackendDesc& BackendDesc::operator=(BackendDesc&& o) noexcept {
  if (this != &o) {
    reset();
    d_ = o.d_;
    what_ = o.what_;
    o.d_ = nullptr;
  }
  return *this;
}

void BackendDesc::reset() {
  if (d_ != nullptr) static_cast<void>(cudnnBackendDestroyDescriptor(d_));
  d_ = nullptr;
}

Status BackendDesc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                        int64_t count, const void* values) {
  return cudnn_status(cudnnBackendSetAttribute(d_, name, type, count, values),
                      fmt::format("{} descriptor, attribute {}", what_, int(name)).c_str());
}

Status BackendDesc::set_i64(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> v) {
  const std::vector<int64_t> a(v);
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(a.size()), a.data());
}

Status BackendDesc::set_desc(cudnnBackendAttributeName_t name, const BackendDesc& d) {
  cudnnBackendDescriptor_t p = d.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
}

Status BackendDesc::finalize() {
  return cudnn_status(cudnnBackendFinalize(d_),
                      fmt::format("finalizing the {} descriptor", what_).c_str());
}

}  // namespace rinfer::cuda
