#!/usr/bin/env bash
# The image classifiers on the GPU machine, one call (carry [".devvision"], filled by
# scripts/device/vision-pack.sh): unpacks the bundle, puts the checkpoints and photos in a model
# cache, makes ResNet-50's seeded random checkpoint with torchvision and its reference logits,
# runs the vision tests (TESTS=0 skips), then per network in NETS the PyTorch peer
# (bench/classifier_peer.py: bf16, channels-last, eager and torch.compile at batch 256;
# PEER=0 skips) and `rinfer bench` over the folder's CUDA variants (BENCH=0 skips), the peer's
# JSON beside it. JSON, logs and tables come back in
# $OUT/vision.tgz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tar -xJf .devvision/bundle.tar.xz
source scripts/device/env.sh
final="$out"  # everything goes to out, then one archive to $OUT (at most 8 files come back)
out=/tmp/vision-out && mkdir -p "$out"
export RINFER_MODEL_DIR=/tmp/vision-models NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$RINFER_MODEL_DIR" && cp -r .devvision/models/* "$RINFER_MODEL_DIR/"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devvision/whl/*.whl \
  && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cudnn: $dnn"
python3 tests/tools/gen_vision_goldens.py "$RINFER_MODEL_DIR" --resnet-only /tmp/goldens.json \
  2>&1 | tail -2
export RINFER_VISION_GOLDENS=/tmp/goldens.json
if [ "${TESTS:-1}" = 1 ]; then
  for t in CudaVisionOps CudaConvNet; do
    timeout 420 "$b/tests/ops_cuda_tests" --gtest_filter="$t.*" 2>&1 | tee "$out/$t.txt" | grep -E "^\[  (FAILED|PASSED|  OK)|rel L2|Failure|error" | head -60
  done
fi
NETS="${NETS:-mobilenet-v2 efficientnet-lite0 resnet-50}"
IMAGES="${IMAGES:-1024}"
for net in $NETS; do
  ckpt="$RINFER_MODEL_DIR/$net.pth"
  [ "$net" = resnet-50 ] && ckpt="$RINFER_MODEL_DIR/resnet-50-random.pth"
  peer=()
  if [ "${PEER:-1}" = 1 ]; then
    timeout 300 python3 bench/classifier_peer.py "$net" "$ckpt" "$out/peer_$net.json" --device cuda \
      --dtype bf16 --compile --batch 256 --images "$IMAGES" --repeat 5 --warmup 2 \
      2>&1 | grep -E "images/s|Error" && peer=(--peer "$out/peer_$net.json")
  fi
  if [ "${BENCH:-1}" = 1 ]; then
    timeout 300 "$b/bin/rinfer" bench "recipes/image-classification/$net" --vs cuda-baseline \
      --images "$IMAGES" --repeat 5 --warmup 1 "${peer[@]}" --json "$out/$net.json" \
      2>"$out/bench_$net.log" | tee "$out/table_$net.md"
    tail -3 "$out/bench_$net.log"
  fi
done
tar -czf "$final/vision.tgz" -C "$out" . && ls "$out"
