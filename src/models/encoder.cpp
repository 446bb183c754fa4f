#include "models/encoder.h"

#include "core/error.h"

namespace rinfer {

Status check_encoder_batch(const EncoderBatch& b, const EncoderHParams& hp, int64_t max_rows) {
  const int64_t n = b.n_rows(), n_seqs = b.n_seqs();
  if (n == 0 || n_seqs == 0) return invalid_argument("encode: empty batch");
  if (n > max_rows) {
    return out_of_range("encode: {} rows exceed the runner's {} (max_rows)", n, max_rows);
  }
  if (!b.type_ids.empty() && b.type_ids.size() != b.tokens.size()) {
    return invalid_argument("encode: {} tokens but {} token types", n, b.type_ids.size());
  }
  if (static_cast<int64_t>(b.slot_starts.size()) != n_seqs + 1 || b.slot_starts[0] != 0 ||
      b.slot_starts.back() != n) {
    return invalid_argument("encode: slot_starts must be {} offsets from 0 to {}", n_seqs + 1, n);
  }
  for (int64_t s = 0; s < n_seqs; ++s) {
    const auto i = static_cast<size_t>(s);
    const int64_t slot = int64_t{b.slot_starts[i + 1]} - b.slot_starts[i];
    const int32_t len = b.lengths[i];
    if (len < 1 || len > slot) {
      return invalid_argument("encode: sequence {} has length {} in a slot of {} rows", s, len,
                              slot);
    }
    if (slot > hp.n_positions) {
      return out_of_range("encode: sequence {} spans {} positions, the model has {}", s, slot,
                          hp.n_positions);
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    const int32_t id = b.tokens[static_cast<size_t>(r)];
    if (id < 0 || id >= hp.n_vocab) {
      return invalid_argument("encode: token {} at row {} is outside the vocabulary of {}", id, r,
                              hp.n_vocab);
    }
    if (!b.type_ids.empty()) {
      const int32_t t = b.type_ids[static_cast<size_t>(r)];
      if (t < 0 || t >= hp.n_token_types) {
        return invalid_argument("encode: token type {} at row {} is outside [0, {})", t, r,
                                hp.n_token_types);
      }
    }
  }
  return ok_status();
}

Result<std::unique_ptr<EncoderModel>> load_encoder_model(const std::string& path,
                                                         const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<ModelSample> m, load_model(path, opts));
  if (m->task() != ModelTask::kEmbedding) {
    return unsupported("{}: a {} model is not an encoder (embedding recipes need one, e.g. BERT)",
                       path, model_task_name(m->task()));
  }
  return std::unique_ptr<EncoderModel>(static_cast<EncoderModel*>(m.release()));
}

}  // namespace rinfer
