#!/usr/bin/env bash
# Runs on the GPU machine over a bundle made by bundle.sh (carry: [".device"]): `rinfer
# bench-serve` on the loads in SERVES, one per line, "name|recipe|arguments" (default: the
# Llama-3-8B-shape recipe at 128/128), each writing $OUT/serve_<name>.json and its table to
# $OUT/serve.txt. BASELINE=0 adds --no-baseline.
#   SERVES=$'c256|recipes/llm-serve/llama3-8b-random/optimized.yaml|--requests 512 --concurrency 256' \
#     bash scripts/device/serve.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
default="128x128_c256|recipes/llm-serve/llama3-8b-random/optimized.yaml|--requests 512 --input-len 128 --output-len 128 --concurrency 256"
fail=0
while IFS='|' read -r name recipe args; do
  [ -n "$name" ] || continue
  extra=""
  [ "${BASELINE:-1}" = 1 ] || extra="--no-baseline"
  echo "== $name: $recipe $args $extra" | tee -a "$out/serve.txt"
  # shellcheck disable=SC2086
  if ! timeout "${SERVE_TIMEOUT:-300}" "$b/bin/rinfer" bench-serve "$recipe" $args $extra \
      --json "$out/serve_$name.json" 2>"$out/serve_$name.err" | tee -a "$out/serve.txt"; then
    fail=1
    tail -20 "$out/serve_$name.err" | tee -a "$out/serve.txt"
  fi
done <<<"${SERVES:-$default}"
exit $fail
