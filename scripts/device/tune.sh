#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (carry: [".device"]): `rinfer tune` on a chat folder of
# the Llama-3-8B shape (random weights made on the GPU, no model file; FORMAT, default bf16):
# cuda.yaml (every CUDA strategy on), cuda-baseline.yaml (graphs, fusion, device sampling and the
# caching allocator off: the precision reference), for BUDGET minutes (default 6; one device
# call runs 10 at most), then again (every trial from the cache). Files under $OUT: tune.tgz
# (report.md, report.json, report.svg, tuned.yaml, the second run's report as report2.*).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
dir=/tmp/tune8b
mkdir -p "$dir"
cat >"$dir/cuda.yaml" <<YAML
# The Llama-3-8B shape (random ${FORMAT:-bf16} weights) chatting on one GPU, every strategy on.
model: random:llama3-8b:${FORMAT:-bf16}
device: cuda:0
scenario: llm-chat
context_length: 1024
strategies:
  kv_cache: {enabled: true}
  fusion: {attention: true, residual_norm: true, swiglu: true, qkv: true}
  cuda_graphs: {enabled: true}
  device_sampling: {enabled: true}
  allocator: {kind: caching}
YAML
cat >"$dir/cuda-baseline.yaml" <<YAML
base: cuda.yaml
strategies:
  fusion: {residual_norm: false, swiglu: false, qkv: false}
  cuda_graphs: {enabled: false}
  device_sampling: {enabled: false}
  allocator: {kind: plain}
YAML
args=(--device cuda --budget "${BUDGET:-6}" --prompt-tokens 128 --gen-tokens 64 --repeat 3
      --precision-tokens 128 --cache /tmp/tune-cache.json)
timeout 560 "$b/bin/rinfer" tune "$dir" "${args[@]}" --out-dir "$out/tune" 2>&1 | tail -60
timeout 120 "$b/bin/rinfer" tune "$dir" "${args[@]}" --out-dir /tmp/tune2 2>&1 | tail -3
for f in /tmp/tune2/report.*; do cp "$f" "$out/tune/report2.${f##*.}"; done
(cd "$out" && tar -czf tune.tgz tune && rm -rf tune)
