#!/usr/bin/env bash
# Runs on the GPU machine: the embedding scenario on CUDA. Needs a bundle (bundle.sh, with
# TARGETS=ops_cuda_tests at least) and all-MiniLM-L6-v2 carried in parts
# (split-model.sh). Runs the encoder kernel tests and the BERT sample against sentence-transformers,
# then `rinfer bench` of the CUDA recipes (cuda-single as the baseline) against
# sentence-transformers fp16 on the same GPU (bench/embedding_peer.py, batch 256), on the mixed
# bench sentences and on the texts of $SHORT_TEXTS (sentences of about 40 tokens) when given.
# Files under $OUT: gpu.txt, CudaEncoderOps.log, BertCuda.log, peer-*.json, embed-*.json, bench-*.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv | tee "$out/gpu.txt"
RINFER_MODEL_DIR="$(bash scripts/device/join-model.sh all-minilm-l6-v2)" || exit 1
export RINFER_MODEL_DIR
model="$RINFER_MODEL_DIR/all-minilm-l6-v2"
folder=recipes/embedding/all-minilm-l6-v2
fail=0
for t in CudaEncoderOps BertCuda; do
  [ -x "$b/tests/ops_cuda_tests" ] || continue
  timeout "${TEST_TIMEOUT:-300}" "$b/tests/ops_cuda_tests" --gtest_filter="$t.*" \
    >"$out/$t.log" 2>&1 || fail=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |worst cosine|^\[  FAILED' "$out/$t.log"
done
[ "$fail" = 0 ] || { tail -60 "$out"/Cuda*.log "$out"/Bert*.log; }
python3 -c "import torch, sentence_transformers as s; print('torch', torch.__version__, 'st', s.__version__)"
bench() {  # bench NAME TEXTS
  local name="$1" texts="$2"
  timeout 240 python3 bench/embedding_peer.py "$model" "$texts" "$out/peer-$name.json" \
    --device cuda --fp16 --batch-size 256 --repeat "${REPEAT:-5}" --warmup 2 || return 1
  timeout 300 "$b/bin/rinfer" bench "$folder" --vs cuda-single --text "$texts" \
    --peer "$out/peer-$name.json" --repeat "${REPEAT:-5}" --warmup 2 \
    --json "$out/embed-$name.json" 2>&1 | tee "$out/bench-$name.txt"
}
bench mixed "$folder/bench_sentences.txt" || fail=1
if [ -n "${SHORT_TEXTS:-}" ]; then bench short "$SHORT_TEXTS" || fail=1; fi
exit "$fail"
