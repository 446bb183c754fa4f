#!/usr/bin/env bash
# Runs on the GPU machine after run-tests.sh, over the same bundle (carry: [".device"]):
#   1. parity with PyTorch/transformers: random-weight Llama models of the SmolLM2 and the
#      Llama-3-8B shapes made there by hf_reference.py (bf16 safetensors + reference logits of
#      512 teacher-forced tokens), loaded by `rinfer parity` on cuda:0;
#   2. real models, when their files were brought to $MODELS (default /tmp/models): the GPU
#      against the CPU reference kernels on the same file (prefill and decode steps, top-1
#      agreement over 512 positions of GPL-3 text; the CPU's fast kernels for information), and a
#      short `rinfer run` answer;
#   3. bench/llm_cuda_bench (decode, prefill 512/2048, strategy rows), then each format's
#      optimized row in a process of its own (OWN="shape:format ..."), merged by
#      merge_bench.py -> $OUT/llm_cuda.json.
# PARITY=0 / BENCH=0 / REAL=0 skip a part; SHAPES narrows the parity shapes; SEEDS="0 1 2" runs
# the parity on several random models of each shape (files of seeds other than 0 end in _s<seed>;
# tests/tools/parity_floor.py gives the spread a bf16 KV cache alone has over seeds); KVS="auto
# f32" runs it with each KV cache type (`rinfer parity --kv`; files of f32 end in _kvf32); REFS
# ("fp32 bf16") and MODES ("prefill steps") narrow the references and the passes.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export PYTHONUNBUFFERED=1
fail=0
work=/tmp/rinfer-parity
mkdir -p "$work"

if [ "${PARITY:-1}" = 1 ]; then
  for shape in ${SHAPES:-smollm2 llama3-8b}; do
    for seed in ${SEEDS:-0}; do
      d="$work/$shape"
      sfx=""
      [ "$seed" = 0 ] || sfx="_s$seed"
      echo "== parity: $shape, seed $seed"
      if ! timeout 400 python3 scripts/device/hf_reference.py --shape "$shape" --out "$d" \
          --tokens 512 --seed "$seed" 2>&1 | tail -15; then
        echo "hf_reference.py failed for $shape"
        fail=1
        continue
      fi
      cp "$d/reference.json" "$out/parity_${shape}${sfx}_reference.json" 2>/dev/null
      for kv in ${KVS:-auto}; do
        ksfx=""
        [ "$kv" = auto ] || ksfx="_kv$kv"
        for ref in ${REFS:-fp32 bf16}; do
          for mode in ${MODES:-prefill steps}; do
            # Prefill (bf16 GEMMs) and the decode path (one token per step) separately.
            msfx=""
            step=""
            [ "$mode" = steps ] && { msfx="_steps"; step="--step"; }
            timeout 300 "$b/bin/rinfer" parity --model "$d" --device cuda:0 --kv "$kv" \
              --tokens "$d/tokens.i32" --ref "$d/logits_$ref.f32" $step \
              --json "$out/parity_${shape}${sfx}${ksfx}_vs_${ref}${msfx}.json" || fail=1
          done
        done
      done
      rm -rf "$d"  # 16 GB for llama3-8b: the disk is 64 GB
    done
  done
fi

models="${MODELS:-/tmp/models}"
# Model files too large for one call travel in parts (split -b, one folder per call, moved to
# /tmp/parts by earlier calls on the same warm machine): reassembled and checked here.
if [ -d /tmp/parts ] && ls /tmp/parts/part_* >/dev/null 2>&1; then
  mkdir -p "$models"
  for base in $(ls /tmp/parts | grep '^part_' | sed 's/_[0-9][0-9]$//' | sort -u); do
    cat /tmp/parts/"${base}"_* >"$models/${base#part_}"
  done
  if [ -f /tmp/parts/models.sha256 ]; then
    (cd "$models" && grep -F -f <(ls *.gguf) /tmp/parts/models.sha256 | sha256sum -c -) || fail=1
  fi
fi
if [ "${REAL:-1}" = 1 ] && [ -d "$models" ]; then
  for m in "$models"/*.gguf; do
    [ -f "$m" ] || continue
    name=$(basename "$m" .gguf)
    echo "== real model: $name (GPU vs CPU)"
    python3 - "$m" "$work/$name.tokens.i32" <<'EOF'
import sys, struct, subprocess, os
# 512 token ids of a fixed English text through the model's own tokenizer.
text = open('/usr/share/common-licenses/GPL-3').read() if os.path.exists('/usr/share/common-licenses/GPL-3') else open('README.md').read() * 4
ids = subprocess.run(['.device/bin/rinfer', 'tokenize', sys.argv[1], '--ids', '-'], input=text[:20000], capture_output=True, text=True).stdout.split()
ids = [int(x) for x in ids][:512]
open(sys.argv[2], 'wb').write(struct.pack('<%di' % len(ids), *ids))
print(len(ids), 'tokens')
EOF
    # Against the CPU reference kernels (f32 activations): the check, prefill and decode steps.
    timeout 300 "$b/bin/rinfer" parity --model "$m" --device cpu --kernels reference \
      --tokens "$work/$name.tokens.i32" --dump "$work/$name.cpu.f32" || fail=1
    for mode in "" --step; do
      timeout 300 "$b/bin/rinfer" parity --model "$m" --device cuda:0 $mode \
        --tokens "$work/$name.tokens.i32" --ref "$work/$name.cpu.f32" --max-rel-l2 0.05 \
        --min-top1 0.99 --json "$out/parity_real_${name}_gpu_vs_cpu_reference${mode:+_steps}.json" \
        || fail=1
    done
    # Against the CPU's fast kernels (int8 activations): information only, it measures their error.
    timeout 300 "$b/bin/rinfer" parity --model "$m" --device cpu --tokens "$work/$name.tokens.i32" \
      --dump "$work/$name.cpu_fast.f32" >/dev/null
    timeout 300 "$b/bin/rinfer" parity --model "$m" --device cuda:0 \
      --tokens "$work/$name.tokens.i32" --ref "$work/$name.cpu_fast.f32" --max-rel-l2 1 \
      --min-top1 0 --json "$out/parity_real_${name}_gpu_vs_cpu_fast.json" >/dev/null
  done
  for r in ${RECIPES:-}; do
    echo "== rinfer run $r" | tee -a "$out/run.txt"
    RINFER_MODEL_DIR="$models" timeout 120 "$b/bin/rinfer" run "$r" -n "${RUN_TOKENS:-48}" \
      -p "${PROMPT:-What is the capital of France?}" 2>&1 | tee -a "$out/run.txt" || fail=1
  done
  # The recipe folder's CUDA variants against cuda-baseline, with the precision columns; the
  # README's h200 table comes back in README-<folder>.md.
  for dir in ${BENCH_DIRS:-}; do
    name=$(basename "$dir")
    RINFER_MODEL_DIR="$models" timeout 400 "$b/bin/rinfer" bench "$dir" --vs cuda-baseline \
      ${RBENCH_ARGS:-} --json "$out/$name.json" --svg "$out/$name.svg" --readme 2>&1 | tail -30 || fail=1
    cp "$dir/README.md" "$out/README-$name.md"
  done
fi

if [ "${BENCH:-1}" = 1 ] && [ -x "$b/bin/llm_cuda_bench" ]; then
  echo "== llm_cuda_bench"
  timeout "${BENCH_TIMEOUT:-400}" "$b/bin/llm_cuda_bench" --out /tmp/llm_cuda_one.json \
    ${BENCH_ARGS:-} 2>&1 | tee "$out/llm_cuda.txt" || fail=1
  # Each format's optimized row again, in a process of its own (one model a process, as a
  # deployment runs; in one process a model made after others decodes 0.5-1.5% slower), merged
  # into llm_cuda.json with the one-process figures beside them (merge_bench.py).
  echo "== one model a process" | tee -a "$out/llm_cuda.txt"
  own=()
  for sf in ${OWN:-llama3-8b:bf16 llama3-8b:q8_0 llama3-8b:q4_0 llama3-8b:q4_k smollm2:bf16 \
      smollm2:q8_0 smollm2:q4_1}; do
    f="/tmp/llm_cuda_own_${sf/:/_}.json"
    if timeout 120 "$b/bin/llm_cuda_bench" --shape "${sf%%:*}" --format "${sf##*:}" --out "$f" \
        2>&1 | grep -E '^\| optimized' | tee -a "$out/llm_cuda.txt"; then
      own+=("$f")
    else
      fail=1
    fi
  done
  python3 scripts/device/merge_bench.py /tmp/llm_cuda_one.json "${own[@]}" \
    >"$out/llm_cuda.json" || fail=1
fi
# At most 8 files come back from $OUT: the parity JSONs travel as one archive.
(cd "$out" && ls parity_*.json >/dev/null 2>&1 && tar -czf parity.tgz parity_*.json && rm -f parity_*.json)
exit $fail
