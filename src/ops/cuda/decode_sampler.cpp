// DecodeSampler (ops_cuda.h): the device state and pinned rings of a decode loop whose tokens are
// chosen on the device (the kernel: decode_sample_kernel in sampling.cu).
#include <algorithm>
#include <cstring>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pinned.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::cuda {

namespace {

static_assert(kMaxDecodeHistory == kern::kMaxDecodeHistory);

// Device and pinned layouts: args (64 bytes), state [2] (64), history [kMaxDecodeHistory]; the
// pinned block then has the uniforms and ids rings.
constexpr size_t kArgsOff = 0, kStateOff = 64, kHistOff = 128;
constexpr size_t kDevBytes = kHistOff + kMaxDecodeHistory * sizeof(int32_t);
constexpr size_t kUniformsOff = kDevBytes;
constexpr size_t kIdsOff = kUniformsOff + DecodeSampler::kRing * sizeof(float);
constexpr size_t kPinnedBytes = kIdsOff + DecodeSampler::kRing * sizeof(int32_t);
static_assert(sizeof(kern::DecodeSampleArgs) <= kStateOff - kArgsOff);

char* at(void* base, size_t off) { return static_cast<char*>(base) + off; }

}  // namespace

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

Result<DecodeSampler> DecodeSampler::create(int device, cudaStream_t stream) {
  DecodeSampler d;
  RINFER_ASSIGN_OR_RETURN(d.dev_, DeviceBuffer::create(kDevBytes, device, stream));
  RINFER_ASSIGN_OR_RETURN(d.pinned_, pinned_host_allocator().allocate(kPinnedBytes));
  std::memset(d.pinned_, 0, kPinnedBytes);
  d.uniforms_ = reinterpret_cast<float*>(at(d.pinned_, kUniformsOff));
  d.ids_ = reinterpret_cast<int32_t*>(at(d.pinned_, kIdsOff));
  // Pinned memory is mapped into the device's address space (unified addressing).
  void* dp = nullptr;
  RINFER_CUDA_RETURN(cudaHostGetDevicePointer(&dp, d.pinned_, 0));
  d.uniforms_dev_ = reinterpret_cast<float*>(at(dp, kUniformsOff));
  d.ids_dev_ = reinterpret_cast<int32_t*>(at(dp, kIdsOff));
  return d;
}

DecodeSampler::DecodeSampler(DecodeSampler&& o) noexcept { *this = std::move(o); }

DecodeSampler& DecodeSampler::operator=(DecodeSampler&& o) noexcept {
  if (this != &o) {
    dev_ = std::move(o.dev_);
    std::swap(pinned_, o.pinned_);
    std::swap(uniforms_, o.uniforms_);
    std::swap(ids_, o.ids_);
    std::swap(uniforms_dev_, o.uniforms_dev_);
    std::swap(ids_dev_, o.ids_dev_);
  }
  return *this;
}

DecodeSampler::~DecodeSampler() {
  if (pinned_ != nullptr) pinned_host_allocator().deallocate(pinned_, kPinnedBytes);
}

Status DecodeSampler::start(const DecodeSampling& s, int64_t n_vocab,
                            std::span<const int32_t> history, cudaStream_t stream) {
  if (pinned_ == nullptr) return internal_error("DecodeSampler: not created");
  RINFER_RETURN_IF_ERROR(decode_sampling_supported(s, n_vocab));
  const bool greedy = s.chain.temperature <= 0.0f;
  const kern::DecodeSampleArgs a{
      static_cast<int>(n_vocab),
      greedy ? 1 : static_cast<int>(std::min<int64_t>(s.chain.top_k, n_vocab)),
      s.chain.temperature,
      s.chain.top_p,
      s.chain.min_p,
      s.repeat_penalty,
      s.presence_penalty,
      s.last_n,
      kMaxDecodeHistory,
      kRing};
  // The history ring holds the last min(last_n, size) ids at slots 0.. in order.
  const size_t w = std::min(history.size(), static_cast<size_t>(s.last_n));
  const std::span<const int32_t> tail = history.last(w);
  const int32_t state[2] = {static_cast<int32_t>(w), 0};
  std::memcpy(at(pinned_, kArgsOff), &a, sizeof a);
  std::memcpy(at(pinned_, kStateOff), state, sizeof state);
  std::memcpy(at(pinned_, kHistOff), tail.data(), tail.size_bytes());
  RINFER_CUDA_RETURN(cudaMemcpyAsync(dev_.data(), pinned_, kHistOff + tail.size_bytes(),
                                     cudaMemcpyHostToDevice, stream));
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  return ok_status();
}

void DecodeSampler::set_uniform(int64_t step, float u) {
  static_cast<volatile float*>(uniforms_)[step % kRing] = u;
}

Status DecodeSampler::launch(float* logits, int32_t* token, int32_t* pos, int32_t* n_kv,
                             cudaStream_t stream) const {
  if (pinned_ == nullptr) return internal_error("DecodeSampler: not created");
  if (logits == nullptr || token == nullptr || pos == nullptr || n_kv == nullptr) {
    return invalid_argument("DecodeSampler::launch: null pointer");
  }
  const kern::DecodeSampleIo io{
      reinterpret_cast<const kern::DecodeSampleArgs*>(at(dev_.data(), kArgsOff)),
      reinterpret_cast<int32_t*>(at(dev_.data(), kStateOff)),
      reinterpret_cast<int32_t*>(at(dev_.data(), kHistOff)),
      uniforms_dev_,
      ids_dev_,
      token,
      pos,
      n_kv};
  return cuda_status(kern::launch_decode_sample(logits, io, stream), "decode_sample launch");
}

int32_t DecodeSampler::result(int64_t step) const {
  return static_cast<const volatile int32_t*>(ids_)[step % kRing];
}

}  // namespace rinfer::cuda
