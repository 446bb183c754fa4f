// Ungrouped 2-D convolutions through cuDNN's backend (graph) API (CUDA builds only): NHWC bf16
// or f16 activations, KRSC (OHWI) weights of the same type, f32 accumulation, any stride and
// asymmetric padding (TensorFlow's "same"), and the epilogue y = act(conv(x) + bias + residual)
// fused into the cuDNN graph (conv -> add bias -> add residual -> ReLU / ReLU6 / SiLU,
// intermediates f32 and virtual), rounded once to bf16. Where no engine runs the fused graph, or
// the caller asks for the unfused baseline, the plan is the convolution alone and channel_epilogue
// (vision_ops.h) applies the rest as a pass over y.
//
// Engines come from cuDNN's heuristics (mode A, then the fallback list); engines that reduce in
// reduced precision are skipped. With autotune > 1 the first `autotune` plans that build are
// timed on the caller's buffers and the fastest is kept (as PyTorch's cudnn.benchmark).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/cuda/cudnn.h"
#include "core/dtype.h"
#include "ops/params/op_params.h"  // Conv2dShape, Activation
#include "rinfer/status.h"

namespace rinfer::cuda {

struct CudnnConvOptions {
  DType dtype = DType::kBF16;  // x, w, residual and y: bf16 or f16
  bool fuse_epilogue = true;
  int autotune = 8;  // plans timed (<= 1: the heuristic's first that builds)
};

// Device pointers of one convolution: x [n, h, w, c_in], w [c_out, kh, kw, c_in], bias f32
// [c_out] (or null: none), residual [n, oh, ow, c_out] (or null: none), y [n, oh, ow, c_out].
// 16-byte aligned; c_in and c_out multiples of 8.
struct ConvBuffers {
  const uint16_t* x = nullptr;
  const uint16_t* w = nullptr;
  const float* bias = nullptr;
  const uint16_t* residual = nullptr;
  uint16_t* y = nullptr;
};

class CudnnConv {
 public:
  // The plan for shape `s` with the epilogue that `bufs` implies (bias, residual) and `act`.
  // `bufs` and `workspace` (workspace_limit bytes) are used to time the candidates; plans that
  // need more workspace are skipped.
  static Result<CudnnConv> create(const CudnnHandle& h, const Conv2dShape& s,
                                  const ConvBuffers& bufs, Activation act,
                                  const CudnnConvOptions& o, void* workspace,
                                  size_t workspace_limit, cudaStream_t stream);

  // Queues the convolution on `stream` (the epilogue pass too when not fused). The buffers must
  // have the bias / residual presence the plan was made for.
  Status run(const CudnnHandle& h, const ConvBuffers& b, void* workspace,
             cudaStream_t stream) const;

  size_t workspace_bytes() const { return ws_; }
  bool fused() const { return fused_; }
  // "engine 12 (fused)", for the runner's description.
  const std::string& engine() const { return engine_; }

 private:
  struct Plan;
  std::shared_ptr<const Plan> plan_;
  Conv2dShape s_;
  Activation act_ = Activation::kNone;
  DType dtype_ = DType::kBF16;
  bool has_bias_ = false, has_residual_ = false, fused_ = false;
  size_t ws_ = 0;
  std::string engine_;
};

}  // namespace rinfer::cuda
