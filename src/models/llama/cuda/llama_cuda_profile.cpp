#include "models/llama/cuda/llama_cuda_profile.h"

#include <nvtx3/nvToolsExt.h>

#include <string>

#include "core/cuda/cuda_check.h"

namespace rinfer::llama {

CudaOpTimer::~CudaOpTimer() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t CudaOpTimer::event() {
  if (used_ == pool_.size()) {
    cudaEvent_t e = nullptr;
    const cudaError_t err = cudaEventCreate(&e);
    if (err != cudaSuccess) {
      if (error_ == cudaSuccess) error_ = err;
      return nullptr;
    }
    pool_.push_back(e);
  }
  return pool_[used_++];
}

Status CudaOpTimer::start(OpProfileSink* sink, cudaStream_t stream, int64_t n_tokens) {
  sink_ = sink;
  stream_ = stream;
  used_ = 0;
  ops_.clear();
  open_.clear();
  error_ = cudaSuccess;
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  e0_ = event();
  t0_ns_ = now_ns();
  if (e0_ != nullptr) error_ = cudaEventRecord(e0_, stream);
  last_ = e0_;
  depth_ = 0;
  nvtxRangePushA(("pass " + std::to_string(n_tokens)).c_str());
  return cuda_status(error_, "profile: an event");
}

void CudaOpTimer::begin(std::string_view op, int32_t layer) {
  Pending p;
  p.rec.op = op;
  p.rec.layer = layer;
  if (depth_ == 0 && last_ != nullptr) {
    p.b = last_;  // the previous op's end: the time between them counts to this op
  } else {
    p.b = event();
    if (p.b != nullptr) {
      const cudaError_t err = cudaEventRecord(p.b, stream_);
      if (err != cudaSuccess && error_ == cudaSuccess) error_ = err;
    }
  }
  ++depth_;
  open_.push_back(ops_.size());
  ops_.push_back(p);
  nvtxRangePushA(std::string(op).c_str());
}

void CudaOpTimer::end(const OpCost& cost) {
  nvtxRangePop();
  if (open_.empty()) return;
  Pending& p = ops_[open_.back()];
  open_.pop_back();
  --depth_;
  p.rec.cost = cost;
  p.e = event();
  if (p.e != nullptr) {
    const cudaError_t err = cudaEventRecord(p.e, stream_);
    if (err != cudaSuccess && error_ == cudaSuccess) error_ = err;
  }
  last_ = p.e;
}

Status CudaOpTimer::finish() {
  nvtxRangePop();
  RINFER_CUDA_RETURN(error_);
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream_));
  const int64_t done_ns = now_ns();  // the pass's work is done: what follows is the profiler's
  const auto at = [this](cudaEvent_t e, int64_t* ns) -> Status {
    float ms = 0;
    RINFER_CUDA_RETURN(cudaEventElapsedTime(&ms, e0_, e));
    *ns = t0_ns_ + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    return ok_status();
  };
  for (Pending& p : ops_) {
    if (p.b == nullptr || p.e == nullptr) return internal_error("profile: an op was not ended");
    RINFER_RETURN_IF_ERROR(at(p.b, &p.rec.begin_ns));
    RINFER_RETURN_IF_ERROR(at(p.e, &p.rec.end_ns));
    sink_->record_op(p.rec);
  }
  ops_.clear();
  sink_->record_overhead(now_ns() - done_ns);
  return ok_status();
}

OpCost weight_cost(const cuda::DeviceWeight& w, int64_t rows) {
  return matmul_cost(rows, w.n_in, w.n_out, static_cast<double>(w.bytes), 2, 4);
}

OpCost weights_cost(std::initializer_list<const cuda::DeviceWeight*> ws, int64_t rows) {
  OpCost c;
  for (const cuda::DeviceWeight* w : ws) {
    const OpCost p = weight_cost(*w, rows);
    c.bytes += p.bytes;
    c.flops += p.flops;
  }
  return c;
}

PassCosts pass_costs(const DecoderHParams& hp, const ForwardBatch& b, const kv::KvSpec& spec) {
  const int64_t nt = b.n_tokens(), e = hp.n_embd, qk = (hp.n_head + hp.n_head_kv) * hp.head_dim;
  const double kv_elem = static_cast<double>(dtype_traits(spec.dtype).block_bytes);
  PassCosts c;
  c.row = stream_cost(nt * e, nt * e, 4, 1);
  c.norm = {static_cast<double>(nt * e) * (4 + 4 + 4 + 2), static_cast<double>(nt * e) * 4};
  c.heads = stream_cost(nt * qk, nt * qk, 4, 6);
  c.kv_store = {static_cast<double>(nt * hp.kv_dim()) * 2 * (4 + kv_elem), 0};
  c.act = {static_cast<double>(nt * hp.n_ff) * (4 + 4 + 2), static_cast<double>(nt * hp.n_ff) * 8};
  std::vector<AttentionSeqShape> seqs;
  for (int32_t s = 0; s < b.n_seq(); ++s) {
    seqs.push_back(
        {b.query_start[static_cast<size_t>(s) + 1] - b.query_start[static_cast<size_t>(s)],
         b.kv_len[static_cast<size_t>(s)]});
  }
  for (const auto& g : spec.groups) {
    c.attention.push_back(attention_cost(seqs, hp.n_head, hp.n_head_kv, hp.head_dim,
                                         b.mask == MaskKind::kCausal, g.window, kv_elem, 2));
  }
  return c;
}

}  // namespace rinfer::llama
