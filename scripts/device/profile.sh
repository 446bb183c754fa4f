#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (carry: [".device"]): per-kernel times of one decode
# step under ncu (kernels serialized, so no PDL overlap; caches not flushed), for each
# "shape:format" in PROFILES (default "llama3-8b:q4_0 llama3-8b:bf16"): the step's wall time
# without the profiler, then (unless NCU=0, which leaves DETAIL alone) $OUT/profile_<shape>_<format>.csv (ncu's raw CSV)
# and a summary per kernel and grid: calls, µs a call, MB read, GB/s (ncu_summary.py); TAG
# suffixes the file names (runs with other RINFER_* settings); DETAIL=regex adds ncu's full
# sections for the first launch of the matching kernels (DETAIL_SKIP=N: the launch after the
# first N); ARGS adds llm_cuda_bench arguments
# (ARGS="--prefill 2048": one prefill forward instead of a decode step).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ncu_bin="$(command -v ncu || find /usr/local/cuda*/bin /opt -name ncu -type f 2>/dev/null | head -1)"
for p in ${PROFILES:-llama3-8b:q4_0 llama3-8b:bf16}; do
  shape=${p%%:*}
  fmt=${p##*:}
  csv="$out/profile_${shape}_${fmt}${TAG:+_$TAG}.csv"
  # The step time without the profiler (64 warm steps), then the per-kernel times under ncu.
  timeout 120 "$b/bin/llm_cuda_bench" --profile --shape "$shape" --format "$fmt" \
    --decode-tokens 1 ${ARGS:-} | grep '^profile'
  if [ "${NCU:-1}" = 1 ]; then
    timeout 300 "$ncu_bin" --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
      "$b/bin/llm_cuda_bench" --profile --shape "$shape" --format "$fmt" --decode-tokens 1 \
      ${ARGS:-} >"$csv" 2>/tmp/ncu.log || tail -5 /tmp/ncu.log
    python3 scripts/device/ncu_summary.py "$csv"
  fi
  if [ -n "${DETAIL:-}" ]; then
    # Warp stall reasons (cycles a warp waits per issued instruction, by reason).
    stalls=""
    for r in long_scoreboard short_scoreboard barrier wait math_pipe_throttle lg_throttle \
      mio_throttle no_instruction not_selected selected membar drain branch_resolving; do
      stalls+="${stalls:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
    done
    # Full sections (speed of light, warp stalls, occupancy) for the first launch of the kernels
    # whose names match DETAIL.
    timeout 300 "$ncu_bin" --profile-from-start off --clock-control none --cache-control none \
      --kernel-name "regex:$DETAIL" --launch-skip "${DETAIL_SKIP:-0}" --launch-count 1 \
      --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section LaunchStats --section MemoryWorkloadAnalysis --metrics "$stalls" \
      "$b/bin/llm_cuda_bench" --profile --shape "$shape" --format "$fmt" --decode-tokens 1 \
      >"$out/detail_${shape}_${fmt}.txt" 2>&1
    grep -vE '^==PROF==|^ +-+ ' "$out/detail_${shape}_${fmt}.txt" | grep -E '[0-9]' |
      head -"${DETAIL_LINES:-80}"
  fi
done
