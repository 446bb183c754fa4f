#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this verbatim):
#   1. installs the Debian packages (scripts/install-deps.sh), the Python of the client-driven
#      tests (scripts/install-python-deps.sh) and fetches the reference models;
#   2. builds the `debug` preset (AddressSanitizer + UBSan) and runs every test under it;
#   3. builds the `cuda` preset (all CUDA code for sm_90a; GPU tests skip without a GPU) and runs
#      the suite again optimized; without nvcc it uses the `default` preset instead.
# Options: --no-fetch (model tests skip), --preset NAME (run just that preset), -j N.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fetch=1
presets=()
jobs="${RINFER_JOBS:-$(nproc)}"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-fetch) fetch=0 ;;
    --preset) presets+=("$2"); shift ;;
    -j) jobs="$2"; shift ;;
    *) echo "test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ ${#presets[@]} -eq 0 ]; then
  presets=(debug)
  if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    presets+=(cuda)
  else
    presets+=(default)
  fi
fi

bash scripts/install-deps.sh
bash scripts/install-python-deps.sh
if [ $fetch -eq 1 ]; then bash scripts/fetch-models.sh; fi

for preset in "${presets[@]}"; do
  echo "== preset $preset: configure and build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "== preset $preset: test"
  ctest --preset "$preset" -j "$jobs"
done
