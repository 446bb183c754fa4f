#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (carry: [".device", ".nsyslib"], see nsys_trace.sh for
# .nsyslib): one `rinfer bench-serve` load (LOAD: "recipe|arguments", default the Llama-3-8B
# shape at 128/128, 256 requests, 256 seats, no baseline) under Nsight Systems; prints the GPU
# kernels' summary (time per kernel name, top 25) and the CUDA API summary, and leaves
# $OUT/nsys_serve_kern.csv.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
host="$(dirname "$(find /opt/nvidia /usr/local -path '*target-linux-x64/nsys' -type f 2>/dev/null |
  head -1)")"
[ -x "$host/nsys" ] || { echo "nsys not found"; exit 1; }
export LD_LIBRARY_PATH="$PWD/.nsyslib:$LD_LIBRARY_PATH"
load="${LOAD:-recipes/llm-serve/llama3-8b-random/optimized.yaml|--requests 256 --concurrency 256 --no-baseline}"
recipe=${load%%|*}
args=${load#*|}
rep=/tmp/nsys_serve
# shellcheck disable=SC2086
timeout 300 "$host/nsys" profile -o "$rep" --force-overwrite true -t cuda \
  "$b/bin/rinfer" bench-serve "$recipe" $args 2>&1 | tail -20
rm -f "$out"/nsys_serve_kern*.csv "$out"/nsys_serve_api*.csv
timeout 300 "$host/nsys" stats -r cuda_gpu_kern_sum -f csv -o "$out/nsys_serve_kern" \
  "$rep.nsys-rep" >/dev/null 2>&1 || echo "nsys stats failed (is .nsyslib carried?)"
timeout 300 "$host/nsys" stats -r cuda_api_sum -f csv -o "$out/nsys_serve_api" \
  "$rep.nsys-rep" >/dev/null 2>&1 || true
timeout 300 "$host/nsys" stats -r cuda_gpu_trace -f csv -o /tmp/nsys_serve_trace \
  "$rep.nsys-rep" >/dev/null 2>&1 || true
python3 - "$out" <<'PY'
import csv, glob, sys
from collections import defaultdict
out = sys.argv[1]
# The paged attention's launches by grid (work items, splits): count and mean duration.
for f in glob.glob("/tmp/nsys_serve_trace*.csv"):
    bins = defaultdict(list)
    for r in csv.DictReader(open(f)):
        if "attn_paged_kernel" not in r.get("Name", ""):
            continue
        x = int(r["GrdY"])
        b = 1 << max(0, (x - 1).bit_length())
        bins[(b, int(r["GrdZ"]), int(r["GrdX"]))].append(float(r["Duration (ns)"]) / 1e3)
    print("== attn_paged_kernel by grid (work items up to, splits, kv heads): n, mean us")
    for k in sorted(bins):
        v = bins[k]
        print(f"  items<={k[0]:6d} splits {k[1]:2d} heads {k[2]:2d}: {len(v):6d} {sum(v) / len(v):9.1f}")
for pat, n in (("nsys_serve_kern*.csv", 25), ("nsys_serve_api*.csv", 12)):
    for f in glob.glob(f"{out}/{pat}"):
        rows = list(csv.DictReader(open(f)))
        total = sum(float(r["Total Time (ns)"]) for r in rows)
        print(f"== {f.split('/')[-1]}: {total / 1e9:.3f} s in all")
        for r in rows[:n]:
            name = r["Name"][:90]
            print(f"{float(r['Time (%)']):6.2f}%  {float(r['Total Time (ns)']) / 1e6:10.2f} ms  "
                  f"{int(r.get('Instances', r.get('Num Calls', 0))):8d}  {float(r['Avg (ns)']) / 1e3:9.2f} us  {name}")
PY
