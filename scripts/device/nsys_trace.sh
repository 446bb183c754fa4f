#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (carry: [".device", ".nsyslib"]): two decode steps of
# each "shape:format" in PROFILES (default "llama3-8b:q4_0") under Nsight Systems, with CUDA
# graph nodes traced and programmatic dependent launch left on, so kernels overlap as in real
# runs; $OUT/trace_<shape>_<format>_cuda_gpu_trace.csv (nsys stats) and, per kernel and grid,
# the mean increment end[i] - end[i-1] it adds to a step (trace_summary.py). ARGS adds
# llm_cuda_bench arguments (ARGS="--skip 3800": steps at positions near 4k), TAG suffixes the
# file names.
#
# The machine's nsys is the one inside Nsight Compute, whose importer needs libdw.so.1, which the
# machine lacks. Bring it once, here (Debian):
#   (cd /tmp && apt-get download libdw1 libelf1 && for f in libdw1_*.deb libelf1_*.deb; do
#     dpkg -x "$f" /tmp/dw; done)
#   mkdir -p .nsyslib && cp -L /tmp/dw/usr/lib/x86_64-linux-gnu/{libdw.so.1,libelf.so.1} .nsyslib/
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
host="$(dirname "$(find /opt/nvidia /usr/local -path '*target-linux-x64/nsys' -type f 2>/dev/null |
  head -1)")"
[ -x "$host/nsys" ] || { echo "nsys not found"; exit 1; }
export LD_LIBRARY_PATH="$PWD/.nsyslib:$LD_LIBRARY_PATH"
for p in ${PROFILES:-llama3-8b:q4_0}; do
  shape=${p%%:*}
  fmt=${p##*:}
  name="trace_${shape}_${fmt}${TAG:+_$TAG}"
  rep="/tmp/$name"
  timeout 300 "$host/nsys" profile -o "$rep" --force-overwrite true --cuda-graph-trace=node \
    --capture-range=cudaProfilerApi -t cuda "$b/bin/llm_cuda_bench" --profile --shape "$shape" \
    --format "$fmt" --decode-tokens 2 ${ARGS:-} 2>&1 | grep -E '^profile|rror'
  # nsys stats will not overwrite an earlier run's CSV (a second trace in the same call).
  rm -f "$out/${name}_cuda_gpu_trace.csv"
  timeout 300 "$host/nsys" stats -r cuda_gpu_trace -f csv -o "$out/$name" \
    "$rep.nsys-rep" >/dev/null 2>&1 || { echo "nsys stats failed (is .nsyslib carried?)"; continue; }
  echo "== $shape $fmt"
  python3 scripts/device/trace_summary.py "$out/${name}_cuda_gpu_trace.csv"
done
