#include "models/model.h"

#include <cstring>

#include "core/error.h"
#include "core/strings.h"
#include "kv/kv_cache.h"

namespace rinfer {

std::string_view model_task_name(ModelTask task) {
  switch (task) {
    case ModelTask::kTextGeneration: return "text generation";
    case ModelTask::kEmbedding: return "embedding";
    case ModelTask::kClassification: return "classification";
  }
  return "unknown";
}

Status check_decoder_batch(const DecoderBatch& batch, const KvCache& cache, const float* logits) {
  const auto n = static_cast<int64_t>(batch.tokens.size());
  if (n == 0) return invalid_argument("infer: empty batch");
  if (batch.positions.size() != batch.tokens.size()) {
    return invalid_argument("infer: {} tokens but {} positions", n, batch.positions.size());
  }
  const int64_t n_past = cache.size();
  if (n > cache.free_positions()) {
    return out_of_range("infer: {} cached + {} new tokens exceed the context length {}", n_past, n,
                        cache.n_ctx());
  }
  for (int64_t i = 0; i < n; ++i) {
    if (batch.positions[static_cast<size_t>(i)] != n_past + i) {
      return invalid_argument(
          "infer: token {} is at position {}, expected {} (positions must continue the KV cache)",
          i, batch.positions[static_cast<size_t>(i)], n_past + i);
    }
  }
  for (size_t r = 0; r < batch.logit_rows.size(); ++r) {
    const int32_t row = batch.logit_rows[r];
    if (row < 0 || row >= n || (r > 0 && row <= batch.logit_rows[r - 1])) {
      return invalid_argument("infer: logit row {} is out of range or not ascending", row);
    }
  }
  if (!batch.logit_rows.empty() && logits == nullptr) {
    return invalid_argument("infer: logits requested but no output buffer");
  }
  return ok_status();
}

Result<KvCache> DecoderModel::create_cache(int64_t n_ctx) const {
  const DecoderHParams& hp = hparams();
  return KvCache::create(hp.n_layer, n_ctx, hp.kv_dim());
}

Result<kv::KvSpec> DecoderModel::kv_spec(int64_t n_ctx, int64_t block_size) const {
  const DecoderHParams& hp = hparams();
  std::vector<int64_t> windows(static_cast<size_t>(hp.n_layer), 0);
  for (size_t l = 0; l < hp.layer_attn.size() && l < windows.size(); ++l) {
    windows[l] = hp.layer_attn[l].window;
  }
  return kv::KvSpec::make(windows, hp.kv_dim(), DType::kF32, block_size, n_ctx);
}

Status check_runner_spec(const kv::KvSpec& spec, const DecoderHParams& hp, DType dtype,
                         const char* backend) {
  if (spec.dtype != dtype) {
    return unsupported("the {} keeps its KV cache in {} only, not {}", backend, dtype_name(dtype),
                       dtype_name(spec.dtype));
  }
  if (spec.n_layer != hp.n_layer || spec.kv_dim != hp.kv_dim()) {
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
                                      std::span<const RowSampling> /*rows*/, int32_t* /*ids*/) {
  return unsupported("forward_sampled: this runner samples on the host only");
}

Result<int64_t> DecoderRunner::decode_ahead(const DecodeAhead& /*d*/, kv::KvArena& /*kv*/) {
  return unsupported("decode_ahead: this runner does not queue decode steps ahead");
}

Result<std::unique_ptr<DecoderRunner>> DecoderModel::create_runner(
    const RunnerOptions& /*opts*/) const {
  return unsupported("{}: this backend has no multi-sequence runner yet", architecture());
}

Result<DeviceDecodeResult> DecoderModel::decode_on_device(KvCache& /*cache*/,
                                                          const DeviceDecode& /*d*/) {
  return unsupported("decode_on_device: this model samples on the host only ({})", architecture());
}

}  // namespace rinfer
