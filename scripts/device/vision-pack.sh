#!/usr/bin/env bash
# Fills .devvision/ (git-ignored) for one call of scripts/device/vision.sh on the GPU machine:
# the image classifiers' checkpoints, the labels and the photos from the model cache
# (scripts/fetch-models.sh), the wheel of efficientnet_lite_pytorch (the EfficientNet-Lite peer,
# absent there), and the bundle (scripts/device/bundle.sh, run first) as bundle.tar.xz, so that
# everything fits one call's 64 MiB. Then: device run, carry [".devvision"]:
#   bash scripts/device/vision.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
models="${RINFER_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models}"
out=.devvision
rm -rf "$out"
mkdir -p "$out/models/photos" "$out/whl"
cp "$models"/mobilenet-v2.pth "$models"/efficientnet-lite0.pth "$models"/imagenet-classes.json \
  "$out/models/"
cp "$models"/photos/* "$out/models/photos/"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$out/whl" \
  efficientnet_lite_pytorch==0.1.0
[ -d .device ] || { echo "no .device: run scripts/device/bundle.sh first"; exit 1; }
tar -cJf "$out/bundle.tar.xz" .device
du -sh "$out" | awk '{print "vision pack: " $1 " in .devvision"}'
