#include "core/cuda/cublas_lt.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace rinfer::cuda {

Status cublas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return ok_status();
  const StatusCode code =
      st == CUBLAS_STATUS_ALLOC_FAILED ? StatusCode::kOutOfMemory : StatusCode::kDeviceError;
  return Status(code, fmt::format("{}: {} ({})", what, cublasLtGetStatusString(st),
                                  cublasLtGetStatusName(st)));
}

Result<CublasLt> CublasLt::create(int device, size_t workspace_bytes) {
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  CublasLt lt;
  lt.device_ = device;
  RINFER_RETURN_IF_ERROR(cublas_status(cublasLtCreate(&lt.handle_), "cublasLtCreate"));
  if (workspace_bytes > 0) {
    // Plain allocation: the workspace is not tied to one stream's ordering.
    RINFER_ASSIGN_OR_RETURN(DeviceAllocator * plain, plain_device_allocator(device));
    RINFER_ASSIGN_OR_RETURN(lt.workspace_,
                            DeviceBuffer::create(workspace_bytes, device, nullptr, plain));
  }
  return lt;
}

CublasLt& CublasLt::operator=(CublasLt&& o) noexcept {
  if (this != &o) {
    reset();
    std::swap(handle_, o.handle_);
    std::swap(device_, o.device_);
    workspace_ = std::move(o.workspace_);
    algos_ = std::move(o.algos_);
    std::swap(autotune_, o.autotune_);
  }
  return *this;
}

void CublasLt::reset() {
  if (handle_ != nullptr) {
    auto g = DeviceGuard::set(device_);
    static_cast<void>(cublasLtDestroy(handle_));
  }
  handle_ = nullptr;
  workspace_.reset();
  algos_.clear();
}

}  // namespace rinfer::cuda
