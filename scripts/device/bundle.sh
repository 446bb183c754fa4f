#!/usr/bin/env bash
# Builds the `cuda` preset (nvcc, sm_90a; no GPU needed) and gathers rinfer, every test binary
# and the benchmarks, stripped, with their non-system shared libraries (fmt, spdlog, yaml-cpp,
# pcre2, gtest, cudart, ...) into .device/ (git-ignored). libcublasLt (541 MB) and cuDNN (whose
# engines it loads at run time, 500 MB) are left out: the GPU machine has them (env.sh finds them). Carry .device:
#   device run: bash scripts/device/run-tests.sh   (carry: [".device"])
# TARGETS="ops_cuda_tests llm_cuda_bench" narrows what is built and bundled (default: everything).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

build="${RINFER_BUILD_DIR:-build/cuda}"
cmake --preset cuda -B "$build" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j "${RINFER_JOBS:-$(nproc)}" ${TARGETS:+--target $TARGETS rinfer}

out=.device
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests" "$out/lib"
strip --strip-debug -o "$out/bin/rinfer" "$build/rinfer"
for t in "$build"/tests/*_tests "$build"/bench/*_bench; do
  [ -x "$t" ] || continue
  case "$t" in */tests/*) d=tests ;; *) d=bin ;; esac
  if [ -z "${TARGETS:-}" ] || [[ " $TARGETS " == *" $(basename "$t") "* ]]; then
    strip --strip-debug -o "$out/$d/$(basename "$t")" "$t"
  fi
done
for bin in "$out"/bin/* "$out"/tests/*; do
  [ -f "$bin" ] || continue  # an empty folder's unexpanded glob
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
    libcuda.so*|libcublas*|libcudnn*) ;;  # the driver, cuBLAS and cuDNN come with the GPU machine
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
sha="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || sha="$sha+dirty"
echo "$sha" >"$out/git_sha"
du -sh "$out" | awk '{print "bundle: " $1 " in .device"}'
