// A cuBLASLt handle with its workspace and a cache of chosen algorithms (CUDA builds only).
// One CublasLt serves one stream at a time: its workspace is shared by the matmuls it runs.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "core/cuda/device_allocator.h"
#include "rinfer/status.h"

namespace rinfer::cuda {

// cuBLAS errors as a Status (kOutOfMemory for CUBLAS_STATUS_ALLOC_FAILED, else kDeviceError).
Status cublas_status(cublasStatus_t st, const char* what);

class CublasLt {
 public:
  CublasLt() = default;
  static Result<CublasLt> create(int device, size_t workspace_bytes = size_t{64} << 20);
  ~CublasLt() { reset(); }
  CublasLt(CublasLt&& o) noexcept { *this = std::move(o); }
  CublasLt& operator=(CublasLt&& o) noexcept;
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  cublasLtHandle_t handle() const { return handle_; }
  int device() const { return device_; }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

  // Algorithms chosen by the heuristic, keyed by the problem (see ops/cuda/gemm.cpp).
  using AlgoKey = std::array<int64_t, 10>;
  std::map<AlgoKey, cublasLtMatmulAlgo_t>& algos() { return algos_; }

  // Autotuning (off: the heuristic's first algorithm): the first GEMM of a shape times the
  // heuristic's best few algorithms and keeps the fastest, for its whole bucket of token counts
  // (ops/cuda/gemm.cpp), process-wide. For the serving runner, whose batches vary step by step.
  void set_autotune(bool on) { autotune_ = on; }
  bool autotune() const { return autotune_; }

  void reset();

 private:
  bool autotune_ = false;
  cublasLtHandle_t handle_ = nullptr;
  int device_ = 0;
  DeviceBuffer workspace_;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace rinfer::cuda
