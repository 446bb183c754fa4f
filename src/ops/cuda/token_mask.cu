// Structured output's token mask on the device: every logit whose token the row's bitmask does
// not allow becomes -inf (the sampler keeps -inf masked), before the rows are sampled.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/launch.h"

namespace rinfer::cuda::kern {
namespace {

constexpr int kThreads = 256;

// One thread per 32 tokens (one word of the mask): y = row, x over the words.
__global__ void token_mask_kernel(float* __restrict__ logits, int64_t n_vocab, int64_t words,
                                  const uint32_t* __restrict__ bits) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= words) return;
  const int64_t row = blockIdx.y;
  const uint32_t word = bits[row * words + w];
  if (word == 0xFFFFFFFFu) return;
  float* x = logits + row * n_vocab + w * 32;
  const int64_t n = n_vocab - w * 32 < 32 ? n_vocab - w * 32 : 32;
  for (int64_t i = 0; i < n; ++i) {
    if (((word >> i) & 1u) == 0) x[i] = -INFINITY;
  }
}

}  // namespace

cudaError_t launch_token_mask(float* logits, int64_t n_rows, int64_t n_vocab, const uint32_t* bits,
                              cudaStream_t stream) {
  if (n_rows <= 0) return cudaGetLastError();
  const int64_t words = (n_vocab + 31) / 32;
  const dim3 grid(static_cast<unsigned>((words + kThreads - 1) / kThreads),
                  static_cast<unsigned>(n_rows));
  token_mask_kernel<<<grid, kThreads, 0, stream>>>(logits, n_vocab, words, bits);
  return cudaGetLastError();
}

}  // namespace rinfer::cuda::kern
