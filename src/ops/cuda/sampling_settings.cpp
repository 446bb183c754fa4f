// decode_sampling_supported (ops_cuda.h): which sampling settings the device's row sampler
// (sample_rows) takes.
#include <cstdint>

#include "core/error.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::cuda {

static_assert(kMaxDecodeHistory == kern::kMaxDecodeHistory);

Status decode_sampling_supported(const DecodeSampling& s, int64_t n_vocab) {
  if (n_vocab <= 0 || n_vocab > INT32_MAX) {
    return invalid_argument("device sampling: n_vocab {} out of range", n_vocab);
  }
  if (s.last_n < 0 || s.last_n > kMaxDecodeHistory) {
    return unsupported(
        "device sampling: repeat_last_n {} must be in [0, {}] (use the host Sampler)", s.last_n,
        kMaxDecodeHistory);
  }
  if (s.frequency_penalty != 0.0f && s.last_n > 0) {
    return unsupported("device sampling: frequency_penalty {} (use the host Sampler)",
                       s.frequency_penalty);
  }
  if (!(s.repeat_penalty > 0.0f)) {
    return invalid_argument("device sampling: repeat_penalty {} must be > 0", s.repeat_penalty);
  }
  if (s.chain.temperature <= 0.0f) return ok_status();
  if (s.chain.top_k < 1 || s.chain.top_k > kMaxDeviceTopK) {
    return unsupported(
        "device sampling: top_k {} must be in [1, {}] with temperature > 0 (use the host Sampler)",
        s.chain.top_k, kMaxDeviceTopK);
  }
  if (!(s.chain.top_p > 0.0f && s.chain.top_p <= 1.0f) ||
      !(s.chain.min_p >= 0.0f && s.chain.min_p < 1.0f)) {
    return invalid_argument("device sampling: top_p {} must be in (0, 1], min_p {} in [0, 1)",
                            s.chain.top_p, s.chain.min_p);
  }
  return ok_status();
}

}  // namespace rinfer::cuda
