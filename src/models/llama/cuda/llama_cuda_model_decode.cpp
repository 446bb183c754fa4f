// Decode graphs (one per attention length bound) and decode steps whose tokens are sampled on
// the device, queued ahead of the host (see llama_cuda_model.h and DecoderModel::decode_on_device).
#include "models/llama/cuda/llama_cuda_model_internal.h"

namespace rinfer::llama {

Result<DeviceKvStorage*> LlamaCudaModel::device_kv(KvCache& cache, const char* op) const {
  auto* kv = dynamic_cast<DeviceKvStorage*>(cache.backend());
  if (kv == nullptr || cache.n_layer() != hp_.n_layer || cache.kv_dim() != kv_dim_) {
    return invalid_argument("{}: the KV cache was not made by this CUDA model (create_cache)", op);
  }
  return kv;
}

Status LlamaCudaModel::ensure_graph_scratch(const DeviceKvStorage& kv) {
  if (graph_scratch_ && graph_cache_id_ == kv.id) return ok_status();
  for (auto& v : graphs_) {
    for (cudaGraphExec_t g : v) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    v.clear();
  }
  if (graph_scratch_) note_bytes(-static_cast<int64_t>(graph_scratch_->bytes));
  graph_scratch_.reset();
  RINFER_ASSIGN_OR_RETURN(Scratch s, allocate_scratch(1));
  graph_scratch_ = std::move(s);
  note_bytes(static_cast<int64_t>(graph_scratch_->bytes));
  graph_cache_id_ = kv.id;
  return ok_status();
}

Result<cudaGraphExec_t> LlamaCudaModel::ensure_graph(bool sampled, int64_t pos,
                                                     DeviceKvStorage& kv) {
  RINFER_RETURN_IF_ERROR(ensure_graph_scratch(kv));
  size_t level = 0;
  const int64_t bound = graph_bound(pos + 1, kv_n_ctx_, level);
  std::vector<cudaGraphExec_t>& v = graphs_[sampled ? 1 : 0];
  if (v.size() <= level) v.resize(level + 1, nullptr);
  cudaGraphExec_t& exec = v[level];
  if (exec != nullptr) return exec;
  cudaStream_t st = stream_.get();
  const Scratch& s = *graph_scratch_;
  auto g = cuda::capture_graph(st, [&]() -> Status {
    graph_bound_ = bound;
    Status fs = forward(1, pos, sampled ? 0 : 1, &kv, s, nullptr);
    graph_bound_ = 0;
    if (fs.ok() && sampled) fs = dsampler_->launch(s.logits, s.tokens, s.positions, s.n_kv, st);
    return fs;
  });
  if (!g.ok()) return g.status().with_context("capturing the decode graph");
  exec = *g;
  return exec;
}

Status LlamaCudaModel::decode_step_graph(int32_t token, int64_t pos, DeviceKvStorage& kv,
                                         float* logits) {
  cudaStream_t st = stream_.get();
  RINFER_ASSIGN_OR_RETURN(cudaGraphExec_t g, ensure_graph(false, pos, kv));
  const int32_t one_row = 0;
  const auto pos32 = static_cast<int32_t>(pos);
  RINFER_RETURN_IF_ERROR(
      stage_inputs(std::span<const int32_t>(&token, 1), std::span<const int32_t>(&pos32, 1),
                   std::span<const int32_t>(&one_row, 1), pos + 1, *graph_scratch_));
  RINFER_CUDA_RETURN(cudaGraphLaunch(g, st));
  RINFER_CUDA_RETURN(cudaStreamSynchronize(st));
  if (logits != nullptr) {
    std::memcpy(logits, pinned_logits_, static_cast<size_t>(hp_.n_vocab) * 4);
  }
  return ok_status();
}

Status LlamaCudaModel::queue_sampled_step(int64_t pos, DeviceKvStorage& kv, const Scratch& s) {
  cudaStream_t st = stream_.get();
  if (opts_.cuda.graphs) {
    RINFER_ASSIGN_OR_RETURN(cudaGraphExec_t g, ensure_graph(true, pos, kv));
    RINFER_CUDA_RETURN(cudaGraphLaunch(g, st));
  } else {
    RINFER_RETURN_IF_ERROR(forward(1, pos, 0, &kv, s, nullptr));
    RINFER_RETURN_IF_ERROR(dsampler_->launch(s.logits, s.tokens, s.positions, s.n_kv, st));
  }
  return ok_status();
}

Result<DeviceDecodeResult> LlamaCudaModel::decode_on_device(KvCache& cache, const DeviceDecode& d) {
  if (d.sampling == nullptr || !d.on_token) {
    return invalid_argument("decode_on_device: no sampling settings or no on_token callback");
  }
  if (!opts_.cuda.device_sampling) {
    return unsupported("decode_on_device: device sampling is off (strategies.device_sampling)");
  }
  const cuda::DecodeSampling ds = decode_sampling(*d.sampling);
  RINFER_RETURN_IF_ERROR(cuda::decode_sampling_supported(ds, hp_.n_vocab));
  const bool draws = ds.chain.temperature > 0.0f;
  if (draws && !d.uniform) return invalid_argument("decode_on_device: sampling needs uniform()");
  if (d.history.empty()) return invalid_argument("decode_on_device: the history is empty");
  const int32_t first = d.history.back();
  if (first < 0 || first >= hp_.n_vocab) {
    return invalid_argument("decode_on_device: token {} is outside the vocabulary [0, {})", first,
                            hp_.n_vocab);
  }
  RINFER_ASSIGN_OR_RETURN(DeviceKvStorage * kv, device_kv(cache, "decode_on_device"));
  const int64_t p0 = cache.size(), n_ctx = cache.n_ctx();
  if (p0 >= n_ctx) {
    return out_of_range("decode_on_device: the KV cache is full ({} positions)", n_ctx);
  }
  kv_n_ctx_ = n_ctx;
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(device_));
  cudaStream_t st = stream_.get();
  if (!dsampler_) {
    RINFER_ASSIGN_OR_RETURN(cuda::DecodeSampler ns, cuda::DecodeSampler::create(device_, st));
    dsampler_ = std::move(ns);
  }
  for (cudaEvent_t& e : step_done_) {
    if (e == nullptr) RINFER_CUDA_RETURN(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  RINFER_RETURN_IF_ERROR(dsampler_->start(ds, hp_.n_vocab, d.history, st));
  // The scratch of the steps: the graphs' (one set per cache), or one set for this call.
  std::optional<Scratch> own;
  const Scratch* s = nullptr;
  if (opts_.cuda.graphs) {
    RINFER_RETURN_IF_ERROR(ensure_graph(true, p0, *kv).status());
    s = &*graph_scratch_;
  } else {
    RINFER_ASSIGN_OR_RETURN(Scratch ns, allocate_scratch(1));
    own = std::move(ns);
    note_bytes(static_cast<int64_t>(own->bytes));
    s = &*own;
  }
  const int32_t one_row = 0;
  const auto pos32 = static_cast<int32_t>(p0);
  Status st_all =
      stage_inputs(std::span<const int32_t>(&first, 1), std::span<const int32_t>(&pos32, 1),
                   std::span<const int32_t>(&one_row, 1), p0 + 1, *s);
  DeviceDecodeResult r;
  // Queues step k (feeding the token at position p0 + k), then its event.
  auto queue = [&](int64_t k) -> Status {
    if (draws) dsampler_->set_uniform(k, d.uniform());
    cache.note_written(p0 + k + 1);
    RINFER_RETURN_IF_ERROR(queue_sampled_step(p0 + k, *kv, *s));
    return cuda_status(cudaEventRecord(step_done_[k % 2], st), "decode_on_device event");
  };
  if (st_all.ok()) st_all = queue(0);
  for (int64_t k = 0; st_all.ok(); ++k) {
    // Step k + 1 feeds step k's id: queued before the host reads that id.
    const bool ahead = p0 + k + 1 < n_ctx;
    if (ahead) {
      st_all = queue(k + 1);
      if (!st_all.ok()) break;
    }
    st_all = cuda_status(cudaEventSynchronize(step_done_[k % 2]), "decode step");
    if (!st_all.ok()) break;
    st_all = cache.commit(1);
    if (!st_all.ok()) break;
    ++r.steps;
    const int32_t id = dsampler_->result(k);
    if (id < 0) {  // the sampler kernel found NaN or +inf (or no finite value) in the logits
      st_all = data_loss(
          "decode_on_device: the logits of decode step {} (position {}) hold NaN or +inf, or no "
          "finite value",
          k, p0 + k);
      break;
    }
    if (!d.on_token(id)) {
      if (ahead) r.discarded = 1;
      break;
    }
    if (!ahead) break;  // the cache is full: the last id cannot be fed
  }
  // Nothing may be left running on the scratch or the rings (a step queued ahead of the stop).
  const Status drained = cuda_status(cudaStreamSynchronize(st), "decode_on_device");
  if (own) note_bytes(-static_cast<int64_t>(own->bytes));
  RINFER_RETURN_IF_ERROR(st_all);
  RINFER_RETURN_IF_ERROR(drained);
  return r;
}

}  // namespace rinfer::llama
