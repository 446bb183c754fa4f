#!/usr/bin/env bash
# Builds the `cuda` preset here (nvcc, sm_90a; no GPU needed) and gathers what the GPU machine
# needs to run it into .device/ (git-ignored): rinfer, every test binary, and the non-system
# shared libraries they link (fmt, spdlog, yaml-cpp, gtest, cudart, cublasLt, ...), which the
# GPU machine does not have. Pass .device as the device tool's `carry` path.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

cmake --preset cuda >/dev/null
cmake --build --preset cuda -j "${RINFER_JOBS:-$(nproc)}"

out=.device
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests" "$out/lib"
cp build/cuda/rinfer "$out/bin/"
find build/cuda/tests -maxdepth 1 -type f -name '*_test' -perm -u+x -exec cp {} "$out/tests/" \;

# Shared libraries outside glibc/libstdc++ and the driver (libcuda comes with the GPU machine).
for bin in "$out"/bin/* "$out"/tests/*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libcuda.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out" | awk '{print "bundle: " $1 " in .device"}'
