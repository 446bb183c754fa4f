#!/usr/bin/env bash
# Runs on the GPU machine over a bundle made by bundle.sh (carry: [".device"]): `rinfer devices`,
# every test binary (one per tests/ folder), a process and a log per test suite (GTEST_FILTER
# instead runs each binary once with that filter), then cuda_ops_bench (skip with BENCH=0;
# BENCH_REPS sets its repetitions), optionally Nsight Compute (PROFILE=1) and a
# compute-sanitizer memcheck pass (SANITIZE=1).
# Files under $OUT: gpu.txt, test-logs.tgz, bench.txt, cuda_ops.json, memcheck-logs.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
echo "cublasLt: $lt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv | tee "$out/gpu.txt"
"$b/bin/rinfer" devices | tee -a "$out/gpu.txt"

fail=0
summary=""
for t in "$b"/tests/*_tests; do
  if [ -n "${GTEST_FILTER:-}" ]; then
    filters=("$GTEST_FILTER")
  else
    mapfile -t filters < <("$t" --gtest_list_tests | awk '/^[^ ]/ {print $1 "*"}')
  fi
  for f in "${filters[@]}"; do
    name="$(basename "$t").${f//[^A-Za-z0-9_]/_}"
    start=$(date +%s)
    if timeout "${TEST_TIMEOUT:-150}" "$t" --gtest_brief=1 --gtest_filter="$f" \
        >"$out/$name.log" 2>&1; then
      st=ok
    else
      st=FAIL
      fail=1
    fi
    secs=$(( $(date +%s) - start ))
    summary+=$(printf '%-44s %-5s %4ss %s' "$name" "$st" "$secs" \
      "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')")$'\n'
    [ "$st" = ok ] || tail -40 "$out/$name.log"
  done
done
(cd "$out" && tar -czf test-logs.tgz ./*_tests.*.log && rm -f ./*_tests.*.log)
echo "== tests"
printf '%s' "$summary"

if [ "${BENCH:-1}" = 1 ] && [ -x "$b/bin/cuda_ops_bench" ]; then
  timeout "${BENCH_TIMEOUT:-200}" "$b/bin/cuda_ops_bench" --out "$out/cuda_ops.json" \
    ${BENCH_REPS:+--reps $BENCH_REPS} 2>&1 | tee "$out/bench.txt" || fail=1
fi

if [ "${PROFILE:-0}" = 1 ] && command -v ncu >/dev/null; then
  # Hardware counters of a few kernels (clocks left alone: --clock-control none).
  timeout "${PROFILE_TIMEOUT:-120}" ncu --clock-control none --launch-skip 1 --launch-count 20 \
    --kernel-name regex:'matvec|attn_decode|attn_combine' \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    "$b/bin/cuda_ops_bench" --profile >"$out/ncu.txt" 2>&1 || echo "ncu failed: $?"
  echo "ncu: $(grep -c 'Duration' "$out/ncu.txt") kernels profiled into ncu.txt"
fi

if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for f in "CudaElementwise.*" "CudaSampling.*Argmax*:CudaSampling.*Greedy*" \
           "CudaAttention.*Prefill*:CudaAttention.*Rejects*:CudaAttention.*EveryGqa*" \
           "CudaMatvec.*Int16*:CudaGemm.*Int16*"; do
    t="${f%%.*}"
    if timeout "${SANITIZE_TIMEOUT:-60}" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$b/tests/ops_cuda_tests" --gtest_brief=1 --gtest_filter="$f" \
        >"$out/memcheck-$t.log" 2>&1; then
      st=clean
    else
      st=ERRORS/TIMEOUT
      fail=1
    fi
    summary+=$(printf 'memcheck %-24s %s %s' "$t" "$st" \
      "$(grep -E 'ERROR SUMMARY' "$out/memcheck-$t.log" | tail -1)")$'\n'
  done
  (cd "$out" && tar -czf memcheck-logs.tgz ./memcheck-*.log && rm -f ./memcheck-*.log)
fi
echo "== summary"
printf '%s' "$summary"
exit $fail
