#!/usr/bin/env bash
# Runs on the GPU machine: prefill 512 / 2048 of this tree's llm_cuda_bench side by side with one
# built at another commit ($BASE/llm_cuda_bench, default .devpack/base), FORMAT (default bf16,
# Llama-3-8B shape, --reps 7), interleaved ROUNDS times (default 2); then, with .nsyslib carried
# (see nsys_trace.sh), one traced prefill of N (default 2048) tokens of each binary, exported to
# SQLite and laid out by pass_timeline.py: where the host's time and the GPU's go in one pass.
# Each round's SM clock and power (nvidia-smi, every 50 ms: median and lowest clock, median and
# highest power) follow its row. PASSES (default 0) more processes of each binary, interleaved,
# each timing one prefill after a warm-up one (llm_cuda_bench --profile, no profiler attached).
# Carry: [".device", ".nsyslib", BASE's folder].
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
base="${BASE:-.devpack/base}"
fmt="${FORMAT:-bf16}"
n="${N:-2048}"
bin_of() { [ "$1" = base ] && echo "$base/llm_cuda_bench" || echo "$b/bin/llm_cuda_bench"; }
# The clock samples of a run: "sm MHz median/min, W median/max".
clocks() {
  python3 -c 'import csv, statistics as s, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) == 2 and r[0].strip().isdigit()]
c = [float(r[0]) for r in rows]; w = [float(r[1].split()[0]) for r in rows]
print(f"sm {s.median(c):.0f}/{min(c):.0f} MHz, {s.median(w):.0f}/{max(w):.0f} W ({len(c)} samples)"
      if c else "no clock samples")' "$1"
}
for r in $(seq "${ROUNDS:-2}"); do
  for who in new base; do
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 \
      >"/tmp/clk_$who" 2>/dev/null &
    smi=$!
    timeout 240 "$(bin_of $who)" --shape llama3-8b --format "$fmt" --reps 7 \
      --out "$out/pf_${who}_$r.json" >"$out/pf_${who}_$r.txt" 2>&1 || echo "$who round $r failed"
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    echo "== $who round $r: $(grep -E "^\| optimized" "$out/pf_${who}_$r.txt")"
    echo "   $(clocks "/tmp/clk_$who")"
    rm -f "$out/pf_${who}_$r.txt"
  done
done
for p in $(seq "${PASSES:-0}"); do
  for who in new base; do
    echo "pass $p $who: $("$(bin_of $who)" --profile --shape llama3-8b --format "$fmt" \
      --prefill "$n" 2>&1 | grep -E '^profile' | tail -1)"
  done
done
find_nsys || exit 0
for who in new base; do
  rep="/tmp/prefill_$who"
  log="$(timeout 240 "$host/nsys" profile -o "$rep" --force-overwrite true \
    --capture-range=cudaProfilerApi -t cuda "$(bin_of $who)" --profile --shape llama3-8b \
    --format "$fmt" --prefill "$n" 2>&1)"
  echo "$log" | grep -E '^profile|rror'
  # The traced pass's wall time as the binary printed it (the last "... N.NNN ms" line).
  wall="$(echo "$log" | grep -E '^profile' | grep -v warm-up | tail -1 |
    grep -oE '[0-9]+\.[0-9]+ ms' | head -1 | cut -d' ' -f1)"
  timeout 200 "$host/nsys" export --type sqlite --force-overwrite true -o "$rep.sqlite" \
    "$rep.nsys-rep" >/dev/null 2>&1 || { echo "nsys export failed (is .nsyslib carried?)"; continue; }
  {
    echo "== prefill $n $fmt: $who"
    python3 scripts/device/pass_timeline.py "$rep.sqlite" $wall
  } | tee -a "$out/prefill_timeline_$fmt.txt"
done
