// The measured ceilings a roofline sets each op against (rinfer profile, the benches): the
// memory bandwidth and the arithmetic peak of a device, each measured here, now.
//   CPU:  bandwidth = every pool thread streaming its part of a 1 GiB buffer (read only);
//         peak = the fast Q8_0 matmul (int8 dot products, as the quantized recipes run) on a
//         2048 x 2048 weight and 512 rows, over the same pool.
//   CUDA: bandwidth = a 2 GiB device-to-device copy (read + write bytes); peak = a bf16 GEMM
//         8192^3 through cuBLASLt. Medians of `reps` after one warm-up.
#pragma once

#include <string>

#include "core/thread_pool.h"
#include "rinfer/status.h"

namespace rinfer {

struct Ceilings {
  double bandwidth_gbs = 0;   // GB/s (1e9)
  double peak_tflops = 0;     // TFLOP/s (1e12)
  std::string bandwidth_how;  // what was measured
  std::string peak_how;
};

// The CPU's read bandwidth in GB/s over `pool` (best of 5).
double measure_cpu_read_bandwidth(ThreadPool& pool);
Result<Ceilings> measure_cpu_ceilings(ThreadPool& pool);
// kUnsupported in a build without CUDA.
Result<Ceilings> measure_cuda_ceilings(int device, int reps = 5);

}  // namespace rinfer
