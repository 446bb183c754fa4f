#!/usr/bin/env bash
# Runs on the GPU machine: batch-1 decode of this tree's llm_cuda_bench side by side with one
# built at another commit ($BASE/llm_cuda_bench; it uses the bundle's libraries), interleaved
# ROUNDS times (default 2) for FORMATS (default q8_0,q4_0; Llama-3-8B shape, --reps 3), then,
# with .nsyslib carried (see nsys_trace.sh), Nsight Systems traces of 16 queued decode steps of
# each binary for TRACE_FORMAT (default q4_0) cut into steps by step_gaps.py: span, busy and idle
# time a step on the GPU. PREV (a folder with another llm_cuda_bench, say main's before a change)
# joins both as a third binary. Carry: [".device", ".nsyslib", BASE's folder].
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
base="${BASE:-.devpack/base}"
fmts="${FORMATS:-q8_0,q4_0}"
whos="new base"
[ -n "${PREV:-}" ] && whos="new prev base"
bin_of() {
  case "$1" in
    base) echo "$base/llm_cuda_bench" ;;
    prev) echo "$PREV/llm_cuda_bench" ;;
    *) echo "$b/bin/llm_cuda_bench" ;;
  esac
}
for r in $(seq "${ROUNDS:-2}"); do
  for who in $whos; do
    bin="$(bin_of "$who")"
    timeout 240 "$bin" --shape llama3-8b --format "$fmts" --reps 3 \
      --out "$out/ab_${who}_$r.json" >"$out/ab_${who}_$r.txt" 2>&1 || echo "$who round $r failed"
    echo "== $who round $r"
    grep -E "^\| optimized" "$out/ab_${who}_$r.txt"
  done
done
find_nsys || exit 0
fmt="${TRACE_FORMAT:-q4_0}"
for who in $whos; do
  bin="$(bin_of "$who")"
  extra=""
  [ "$who" = base ] && extra="--device-sampling"
  rep="/tmp/steps_$who"
  timeout 240 "$host/nsys" profile -o "$rep" --force-overwrite true --cuda-graph-trace=node \
    --capture-range=cudaProfilerApi -t cuda "$bin" --profile --shape llama3-8b --format "$fmt" \
    --decode-tokens 16 $extra 2>&1 | grep -E '^profile|rror'
  rm -f "$out/steps_${who}_${fmt}_cuda_gpu_trace.csv"
  timeout 200 "$host/nsys" stats -r cuda_gpu_trace -f csv -o "$out/steps_${who}_$fmt" \
    "$rep.nsys-rep" >/dev/null 2>&1 || { echo "nsys stats failed"; continue; }
  {
    echo "== trace $who $fmt"
    python3 scripts/device/step_gaps.py "$out/steps_${who}_${fmt}_cuda_gpu_trace.csv"
    python3 scripts/device/trace_summary.py "$out/steps_${who}_${fmt}_cuda_gpu_trace.csv"
  } | tee -a "$out/steps_$fmt.txt"
  rm -f "$out/steps_${who}_${fmt}_cuda_gpu_trace.csv"  # too many rows to bring back
  rm -f "/tmp/steps_$who.nsys-rep"
done
