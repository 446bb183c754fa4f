#!/usr/bin/env bash
# Runs on the GPU machine over a bundle made by bundle.sh (carry: [".device"]): the engine
# core's decode steps of a few sequences through the small-batch matvec
# (strategies.kernels.cuda.batch_matvec_rows 8, the default) beside the cuBLASLt GEMMs (0), per
# weight format in FORMATS (default "bf16 q8_0 q4_0"), on the random Llama-3-8B shape: rinfer
# bench-serve (128/128, --no-baseline, 16 requests a seat) at each concurrency in CONCURRENCY
# (default "2 4 8"). Files under $OUT: small_batch.txt (the lines compared),
# serve_<format>_rows<R>_c<N>.json.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
dir=recipes/llm-serve/llama3-8b-random
fail=0
for f in ${FORMATS:-bf16 q8_0 q4_0}; do
  for rows in 8 0; do
    r="$dir/.small_batch_${f}_${rows}.yaml"  # beside optimized.yaml, which it names as its base
    printf 'base: optimized.yaml\nmodel: random:llama3-8b:%s\nstrategies:\n  kernels: {cuda: {batch_matvec_rows: %s}}\n' \
      "$f" "$rows" >"$r"
    for c in ${CONCURRENCY:-2 4 8}; do
      echo "== $f batch_matvec_rows $rows, concurrency $c" | tee -a "$out/small_batch.txt"
      serve_at "$r" "$c" "$out/serve_${f}_rows${rows}_c$c.json" "$out/small_batch.txt" || fail=1
    done
    rm -f "$r"
  done
done
exit $fail
