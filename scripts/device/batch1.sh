#!/usr/bin/env bash
# Runs on the GPU machine over a bundle made by bundle.sh (carry: [".device"]): the engine
# core's decode at one and eight seats, per weight format in
# FORMATS (default "bf16 q8_0 q4_0"), on the random Llama-3-8B shape: rinfer bench-serve
# (128/128, --no-baseline, 16 requests a seat) at each concurrency in CONCURRENCY (default
# "1 8") with strategies.kernels.cuda.runner_matvec on (the default: a one-sequence decode step
# through the model's decode matvecs) and off (the GEMMs of batched steps), then llm_cuda_bench
# --format F (a request at one seat: the one-row graphs, device sampling queued ahead).
# Files under $OUT: batch1.txt (the lines compared), serve_<format>_<on|off>_c<N>.json,
# llm_<format>.json.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
dir=recipes/llm-serve/llama3-8b-random
fail=0
for f in ${FORMATS:-bf16 q8_0 q4_0}; do
  for rm in on off; do
    r="$dir/.batch1_${f}_${rm}.yaml"  # beside optimized.yaml, which it names as its base
    flag=true
    [ "$rm" = on ] || flag=false
    printf 'base: optimized.yaml\nmodel: random:llama3-8b:%s\nstrategies:\n  kernels: {cuda: {runner_matvec: %s}}\n' \
      "$f" "$flag" >"$r"
    for c in ${CONCURRENCY:-1 8}; do
      echo "== $f runner_matvec $rm, concurrency $c" | tee -a "$out/batch1.txt"
      serve_at "$r" "$c" "$out/serve_${f}_${rm}_c$c.json" "$out/batch1.txt" || fail=1
    done
    rm -f "$r"
  done
  echo "== $f one seat: llm_cuda_bench --format $f" | tee -a "$out/batch1.txt"
  timeout "${BENCH_TIMEOUT:-300}" "$b/bin/llm_cuda_bench" --shape llama3-8b --format "$f" \
    --out "$out/llm_$f.json" 2>&1 | grep -E "^\| (optimized|variant)|copy|GEMM" |
    tee -a "$out/batch1.txt" || fail=1
done
exit $fail
