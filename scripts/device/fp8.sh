#!/usr/bin/env bash
# FP8 E4M3 ops on the GPU machine (issue 41): the FP8 tests of ops_cuda_tests (quantization bit for
# bit against the host, the tensor-core matvec against a scalar reference) with the matvec tests
# beside them, then cuda_ops_bench's decode matvec rows (bf16, Q8_0, ...) and FP8 rows in one
# process. Carry .device (TARGETS="ops_cuda_tests cuda_ops_bench").
#   device run: bash scripts/device/fp8.sh   -> $OUT/fp8_tests.log, cuda_ops_bench_{matvec_f8,matvec}.{json,txt}
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
timeout 240 "$b/tests/ops_cuda_tests" --gtest_filter='CudaF8.*:CudaMatvec.*' \
  --gtest_output="xml:$out/fp8_tests.xml" >"$out/fp8_tests.log" 2>&1
echo "ops_cuda_tests rc=$?" | tee -a "$out/fp8_tests.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/fp8_tests.log"
for only in ${FP8_BENCH_ONLY:-matvec_f8 matvec}; do
  timeout 300 "$b/bin/cuda_ops_bench" --only "$only" --reps "${REPS:-20}" \
    --out "$out/cuda_ops_bench_$only.json" 2>&1 | tee "$out/cuda_ops_bench_$only.txt"
done
