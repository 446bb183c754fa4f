#!/usr/bin/env bash
# Measures the image-classification recipes of a folder against PyTorch on the same machine, one
# after the other: the peer first (bench/classifier_peer.py, in a Python that has torch and
# torchvision, and efficientnet_lite_pytorch for EfficientNet-Lite: $PYTHON; eager and
# torch.compile, channels-last, at batch 1 and 32), then `rinfer bench` with its result.
#   PYTHON=/path/to/python scripts/bench-classifier.sh [FOLDER] [-- rinfer bench args]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
folder="${1:-$root/recipes/image-classification/mobilenet-v2}"
shift $(( $# > 1 ? 1 : $# )); [ "${1:-}" = "--" ] && shift
rinfer="${RINFER:-$root/build/default/rinfer}"
python="${PYTHON:-python3}"
cache="${RINFER_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models}"
net="$(basename "$folder")"
ckpt="$cache/$net.pth"
[ "$net" = resnet-50 ] && ckpt=random
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" "$root/bench/classifier_peer.py" "$net" "$ckpt" "$tmp/peer.json" --batch 1 --batch 32 \
  --images 64 --threads "$(nproc)" --compile --repeat 5 ${PEER_ARGS:-}
"$rinfer" bench "$folder" --peer "$tmp/peer.json" "$@"
