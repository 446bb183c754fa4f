// The CUDA kernels' typed switches (strategies.kernels.cuda in a recipe; `rinfer strategies`
// lists them with their domains). Plain values, no CUDA: the strategy layer parses them in
// every build, and CUDA builds apply them with cuda::apply_kernel_config (ops_cuda.h). The
// defaults are the fast choices; each switch's other values are what measurements compare.
#pragma once

#include <cstdint>

namespace rinfer::cuda {

// The Q8_0 / Q4_0 decode matvec's kernel: kAuto streams the weights of large matrices through
// shared memory (a ring of matvec_stream_kb a block), kAlways wherever the shape allows (rows of
// 32, 64, 128 or 256 chunks), kNever keeps the register kernel.
enum class MatvecKernel : uint8_t { kAuto, kAlways, kNever };
// The producers' (residual + norm matvecs') L2 prefetch of the grid's second half: kAuto on for
// Q8_0 rows up to 8192 entries, kNarrow on for those rows in every format, kAll for every
// producer, kOff never.
enum class ProducerL2 : uint8_t { kAuto, kOff, kNarrow, kAll };

struct KernelConfig {
  // The decode matvecs' split-K: 0 chooses by shape and SM count; 1, 2 or 4 forces it.
  int matvec_split = 0;
  MatvecKernel matvec_stream = MatvecKernel::kAuto;
  int matvec_stream_kb = 96;  // the streaming ring's shared memory a block, in KB: [16, 220]
  ProducerL2 producer_l2 = ProducerL2::kAuto;
  // The fused decode attention on the tensor cores (bf16 cache, head_dim 64 or 128); off: the
  // scalar f32 split.
  bool attention_mma = true;
  // Programmatic dependent launch of the decode kernels, where the device has it (sm_90+).
  bool pdl = true;
  // The decode step's RMSNorm as partial sums in the producing matvec, applied by the consumer;
  // off: the one-kernel norms (needs fusion.residual_norm to matter).
  bool split_norm = true;
  // The engine core's decode steps of one sequence through the model's decode kernels (the
  // matvecs with their fused norms, every weight format); off: the cuBLASLt GEMMs of batched
  // steps (quantized weights dequantized per call).
  bool runner_matvec = true;
  // The engine core's steps of at most this many tokens (a decode step of up to 8 sequences)
  // multiply by each quantized weight with the small-batch matvec (every weight byte read once,
  // dequantized in registers); 0: the cuBLASLt GEMMs at every size (quantized weights converted
  // to bf16 on every call). 16-bit and Q8_0 weights take the GEMMs for now.
  int batch_matvec_rows = 8;

  bool operator==(const KernelConfig&) const = default;
};

inline constexpr int kMinMatvecStreamKb = 16;
inline constexpr int kMaxMatvecStreamKb = 220;
inline constexpr int kMaxBatchMatvecRows = 8;

}  // namespace rinfer::cuda
