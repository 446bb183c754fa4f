#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over a bundle made by bundle.sh:
#   device run: bash scripts/device/run-tests.sh   (carry: [".device"])
# Runs every test binary (GPU tests included) and `rinfer devices`, writes logs under $OUT,
# and prints a summary table last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/rinfer-out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.device/lib:${LD_LIBRARY_PATH:-}"
export RINFER_SOURCE_DIR="$PWD"

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
.device/bin/rinfer devices | tee "$out/devices.txt"

fail=0
summary=""
for t in .device/tests/*_test; do
  name=$(basename "$t")
  if "$t" --gtest_brief=1 >"$out/$name.log" 2>&1; then st=ok; else st=FAIL; fail=1; fi
  summary+=$(printf '%-28s %-5s %s' "$name" "$st" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')")$'\n'
done
tar -czf "$out/test-logs.tgz" -C "$out" $(cd "$out" && ls *.log) 2>/dev/null && rm -f "$out"/*.log
echo "== summary"
printf '%s' "$summary"
exit $fail
