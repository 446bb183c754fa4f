#include "models/model.h"

#include <cstring>

#include "core/error.h"
#include "core/strings.h"

namespace rinfer {

std::string_view model_task_name(ModelTask task) {
  switch (task) {
    case ModelTask::kTextGeneration: return "text generation";
    case ModelTask::kEmbedding: return "embedding";
    case ModelTask::kClassification: return "classification";
  }
  return "unknown";
}

Result<kv::KvSpec> DecoderModel::kv_spec(int64_t n_ctx, int64_t block_size) const {
  return kv_spec_of(DType::kF32, n_ctx, block_size);
}

Result<kv::KvSpec> DecoderModel::kv_spec_of(DType dtype, int64_t n_ctx, int64_t block_size) const {
  const DecoderHParams& hp = hparams();
  std::vector<int64_t> windows(static_cast<size_t>(hp.n_layer), 0);
  for (size_t l = 0; l < hp.layer_attn.size() && l < windows.size(); ++l) {
    windows[l] = hp.layer_attn[l].window;
  }
  return kv::KvSpec::make(windows, hp.kv_dim(), dtype, block_size, n_ctx, hp.head_dim);
}

Status check_runner_spec(const kv::KvSpec& spec, const DecoderHParams& hp, DType dtype,
                         const char* backend) {
  if (spec.dtype != dtype) {
    return unsupported("the {} keeps its KV cache in {} only, not {}", backend, dtype_name(dtype),
                       dtype_name(spec.dtype));
  }
  if (spec.n_layer != hp.n_layer || spec.kv_dim != hp.kv_dim() ||
      (spec.dtype == DType::kI8 && spec.head_dim != hp.head_dim)) {
    return invalid_argument("KV spec is [{} layers, kv_dim {}], the model needs [{}, {}]",
                            spec.n_layer, spec.kv_dim, hp.n_layer, hp.kv_dim());
  }
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const int64_t w = hp.layer_attn.empty() ? 0 : hp.layer_attn[static_cast<size_t>(l)].window;
    if (spec.window_of_layer(l) != w) {
      return invalid_argument("KV spec gives layer {} window {}, the model's is {}", l,
                              spec.window_of_layer(l), w);
    }
  }
  return ok_status();
}

Status DecoderRunner::forward_sampled(const ForwardBatch& /*batch*/, kv::KvArena& /*kv*/,
                                      std::span<const RowSampling> /*rows*/, int32_t* /*ids*/,
                                      const std::function<Status()>& /*prepare*/) {
  return unsupported("forward_sampled: this runner samples on the host only");
}

Result<int64_t> DecoderRunner::decode_ahead(const DecodeAhead& /*d*/, kv::KvArena& /*kv*/) {
  return unsupported("decode_ahead: this runner does not queue decode steps ahead");
}

Result<std::unique_ptr<DecoderRunner>> DecoderModel::create_runner(
    const RunnerOptions& /*opts*/) const {
  return unsupported("{}: this backend has no multi-sequence runner yet", architecture());
}

}  // namespace rinfer
