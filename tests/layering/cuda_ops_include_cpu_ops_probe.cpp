// Must not compile: the CUDA ops (rinfer_ops_cuda) including a CPU-op header; what both need is
// in ops/params (tests/CMakeLists.txt).
#include "ops/cpu/ops.h"

int layering_probe_cuda_ops_include_cpu_ops() { return 0; }
