#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (TARGETS="rinfer tools_tests" bundle.sh; carry:
# [".device"]): the profile and workbench tests through CUDA, then `rinfer profile` on the
# Llama-3-8B shape (random weights, no model file) for each format in FORMATS (default "bf16
# q4_0"): one sequence (prefill of PROMPT token ids, default 1024; decode) and BATCH sequences
# (default 32; batched decode). Other bundled test binaries (engine_tests, models_tests) run
# their CUDA tests first. Files under $OUT: gpu.txt, tests.txt and profile.tgz
# (profile_<format>_b<batch>.{txt,json}, trace_<format>_b1.json).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
# The CLI tests run ./build/cuda/rinfer from the tree they were built in.
mkdir -p build/cuda /work/main/build/cuda 2>/dev/null
ln -sf "$PWD/$b/bin/rinfer" build/cuda/rinfer
ln -sf "$PWD/$b/bin/rinfer" /work/main/build/cuda/rinfer 2>/dev/null
timeout 300 "$b/tests/tools_tests" --gtest_brief=1 --gtest_filter="${GTEST_FILTER:-ProfileCli.*:ProfileReport.*:WorkbenchCli.*}" \
  2>&1 | tail -30 | tee "$out/tests.txt"
for t in "$b"/tests/engine_tests "$b"/tests/models_tests; do
  [ -x "$t" ] || continue
  timeout 300 "$t" --gtest_brief=1 --gtest_filter='*Cuda*:*CUDA*' 2>&1 | tail -30 | tee -a "$out/tests.txt"
done
dir=/tmp/profile-recipes
mkdir -p "$dir"
for fmt in ${FORMATS:-bf16 q4_0}; do
  sed "s/random:llama3-8b:bf16/random:llama3-8b:$fmt/" \
    recipes/llm-serve/llama3-8b-random/optimized.yaml >"$dir/$fmt.yaml"
  timeout 200 "$b/bin/rinfer" profile "$dir/$fmt.yaml" --prompt-tokens "${PROMPT:-1024}" -n "${TOKENS:-32}" \
    --trace "$out/trace_${fmt}_b1.json" --json "$out/profile_${fmt}_b1.json" 2>&1 |
    tee "$out/profile_${fmt}_b1.txt"
  timeout 200 "$b/bin/rinfer" profile "$dir/$fmt.yaml" --prompt-tokens 128 -n "${TOKENS:-32}" --batch "${BATCH:-32}" \
    --json "$out/profile_${fmt}_b${BATCH:-32}.json" 2>&1 | tee "$out/profile_${fmt}_b${BATCH:-32}.txt"
done
# One archive (the device tool brings back a few files a call).
(cd "$out" && tar -czf profile.tgz profile_* trace_* && rm -f profile_*.json profile_*.txt trace_*)
