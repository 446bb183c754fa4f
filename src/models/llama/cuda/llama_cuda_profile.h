// Per-op times of a CUDA pass (models/op_profile.h): an event recorded on the stream after each
// op, each op timed from the previous op's event to its own (so the time the GPU waits for the
// host to queue an op counts to that op, and the ops tile the pass), and an NVTX range around
// each op and around the pass (Nsight Systems shows them on the CPU's timeline beside the
// kernels). start() waits for the stream and maps its
// first event onto the host clock; finish() waits again, hands each op to the sink at that
// host time plus its events' elapsed time, and tells the sink how long that took (the pass's
// wall time is taken without it: OpProfileSink::record_overhead).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "models/forward_batch.h"
#include "models/model.h"
#include "models/op_profile.h"
#include "ops/cuda/ops_cuda.h"
#include "rinfer/status.h"

namespace rinfer::llama {

class CudaOpTimer final : public OpTimer {
 public:
  CudaOpTimer() = default;
  ~CudaOpTimer() override;
  CudaOpTimer(const CudaOpTimer&) = delete;
  CudaOpTimer& operator=(const CudaOpTimer&) = delete;

  Status start(OpProfileSink* sink, cudaStream_t stream, int64_t n_tokens);
  void begin(std::string_view op, int32_t layer) override;
  void end(const OpCost& cost) override;
  // Every op of the pass to the sink; the first error of a begin() or end() here.
  Status finish();

 private:
  cudaEvent_t event();  // the next event of the pool (made on first use)

  OpProfileSink* sink_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  int64_t t0_ns_ = 0;
  cudaEvent_t e0_ = nullptr;
  struct Pending {
    OpRecord rec;
    cudaEvent_t b = nullptr, e = nullptr;
  };
  std::vector<Pending> ops_;
  std::vector<size_t> open_;  // the ops begun and not yet ended (indices into ops_)
  int depth_ = 0;
  cudaEvent_t last_ = nullptr;  // the last op's end event (the next op's start)
  cudaError_t error_ = cudaSuccess;
};

// A product of `rows` bf16 rows with w (f32 out): its bytes as one read of the weight.
OpCost weight_cost(const cuda::DeviceWeight& w, int64_t rows);
OpCost weights_cost(std::initializer_list<const cuda::DeviceWeight*> ws, int64_t rows);

// What the elementwise ops and the attention of one multi-row pass move and compute.
struct PassCosts {
  OpCost row;    // one f32 row op over the residual stream (embed, post norms)
  OpCost norm;   // a residual add + RMSNorm (f32 in, bf16 out)
  OpCost heads;  // per-head work on the q|k rows (qk norms, RoPE)
  OpCost kv_store;
  OpCost act;
  std::vector<OpCost> attention;  // per KV group (empty when not profiled)
  OpCost attention_of(int64_t group) const {
    return group >= 0 && static_cast<size_t>(group) < attention.size()
               ? attention[static_cast<size_t>(group)]
               : OpCost{};
  }
};
PassCosts pass_costs(const DecoderHParams& hp, const ForwardBatch& b, const kv::KvSpec& spec);

}  // namespace rinfer::llama
