#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (carry: [".device"]): the executed instructions of one
# launch of the kernel matching K (a regex, default attn_decode) in a decode step of PROFILE
# ("shape:format", default llama3-8b:q4_0), per SASS instruction, from ncu's source page
# ($OUT/sass_<K>.csv), summarized by sass_summary.py: runs of instructions executed equally
# often (a basic block or straight-line code), their warp-level counts, stall samples and top
# opcodes, and the instructions on the path of the busiest warps. For latency-bound kernels,
# where each warp's instruction count is its time.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ncu_bin="$(command -v ncu || find /usr/local/cuda*/bin /opt -name ncu -type f 2>/dev/null | head -1)"
k="${K:-attn_decode}"
p="${PROFILE:-llama3-8b:q4_0}"
csv="$out/sass_$(echo "$k" | tr -c 'A-Za-z0-9_\n' _).csv"
timeout 300 "$ncu_bin" --profile-from-start off --kernel-name "regex:$k" --launch-count 1 \
  --section SourceCounters --import-source no -f -o /tmp/sass_rep \
  "$b/bin/llm_cuda_bench" --profile --shape "${p%%:*}" --format "${p##*:}" --decode-tokens 1 \
  >/tmp/ncu_sass.log 2>&1 || { tail -5 /tmp/ncu_sass.log; exit 1; }
"$ncu_bin" --import /tmp/sass_rep.ncu-rep --page source --print-source sass --csv >"$csv"
python3 scripts/device/sass_summary.py "$csv"
