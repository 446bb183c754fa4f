#!/usr/bin/env bash
# FP8 E4M3 on the GPU machine (issue 41): the FP8 tests of ops_cuda_tests (quantization bit for
# bit against the host, the tensor-core matvec against a scalar reference, an FP8 model's decode
# against its dequantized GEMMs) with the matvec and engine-core tests beside them; then
# cuda_ops_bench's FP8 and other decode matvec rows, and llm_cuda_bench's Llama-3-8B rows for
# bf16, q8_0 and f8_e4m3, each set in one process. Carry .device (TARGETS="ops_cuda_tests
# cuda_ops_bench llm_cuda_bench").
#   device run: bash scripts/device/fp8.sh
#   -> $OUT/fp8_tests.log, cuda_ops_bench_{matvec_f8,matvec}.{json,txt}, llm_cuda_fp8.{json,txt}
#   FP8_TESTS (gtest filter), FP8_BENCH_ONLY (cuda_ops_bench sections, "" for none),
#   FP8_LLM_FORMATS ("" for no llm_cuda_bench run), REPS.
#   FP8_PRECISION=1: also rinfer bench of SmolLM2's cuda-bf16, cuda-fp8 and cuda-fp8-all-layers
#   recipes (speed, and precision against cuda-bf16: teacher-forced and decode steps), the model
#   carried in parts (split-model.sh smollm2-135m-instruct-q4_1.gguf) and the text in
#   .devpack/GPL-3 -> $OUT/smollm2_fp8.{json,txt}; then rinfer eval --per-layer of the FP8 recipe
#   against cuda-bf16 -> $OUT/smollm2_fp8_layers.{json,txt}. FP8_PRECISION_ONLY=1: only these
#   (a model carried over several calls: the bundle and the parts stay on a warm machine).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ -n "${FP8_PRECISION_ONLY:-}" ]; then FP8_TESTS="" FP8_BENCH_ONLY="" FP8_LLM_FORMATS="" FP8_PRECISION=1; fi
filter="${FP8_TESTS-CudaF8.*:CudaMatvec.*:CudaEngineCoreFp8.*:CudaEngineCoreDecodeGate.*:CudaEngineCoreSmallBatch.*}"
if [ -n "$filter" ]; then
  timeout 300 "$b/tests/ops_cuda_tests" --gtest_filter="$filter" \
    --gtest_output="xml:$out/fp8_tests.xml" >"$out/fp8_tests.log" 2>&1
  echo "ops_cuda_tests rc=$?" | tee -a "$out/fp8_tests.log"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|f8_e4m3: decode" "$out/fp8_tests.log"
fi
for only in ${FP8_BENCH_ONLY-matvec_f8 matvec}; do
  timeout 300 "$b/bin/cuda_ops_bench" --only "$only" --reps "${REPS:-20}" \
    --out "$out/cuda_ops_bench_$only.json" 2>&1 | tee "$out/cuda_ops_bench_$only.txt"
done
formats="${FP8_LLM_FORMATS-bf16,q8_0,f8_e4m3}"
if [ -n "$formats" ]; then
  timeout 420 "$b/bin/llm_cuda_bench" --shape llama3-8b --format "$formats" --reps "${REPS:-5}" \
    --out "$out/llm_cuda_fp8.json" 2>&1 | tee "$out/llm_cuda_fp8.txt"
fi
if [ -n "${FP8_PRECISION:-}" ]; then
  RINFER_MODEL_DIR="$(bash scripts/device/join-model.sh smollm2-135m-instruct-q4_1.gguf | tail -1)"
  export RINFER_MODEL_DIR
  r=recipes/llm-chat/smollm2-135m
  timeout 400 "$b/bin/rinfer" bench "$r/cuda-bf16.yaml" "$r/cuda-fp8.yaml" "$r/cuda-fp8-all-layers.yaml" \
    --vs cuda-bf16 --text .devpack/GPL-3 --json "$out/smollm2_fp8.json" --svg "$out/smollm2_fp8.svg" \
    2>&1 | tee "$out/smollm2_fp8.txt"
  # Which layers FP8 should keep: each quantized alone against cuda-bf16 (rinfer eval --per-layer).
  timeout 400 "$b/bin/rinfer" eval "$r/cuda-fp8-all-layers.yaml" --vs "$r/cuda-bf16.yaml" \
    --per-layer --text .devpack/GPL-3 --json "$out/smollm2_fp8_layers.json" \
    >"$out/smollm2_fp8_layers.txt" 2>&1
  echo "eval --per-layer rc=$?" >>"$out/smollm2_fp8_layers.txt"
  tail -20 "$out/smollm2_fp8_layers.txt"
fi
