#!/usr/bin/env bash
# Prepares a model of the cache for the GPU machine, whose calls carry at most 64 MiB each:
# its files into .devmodel0/NAME/ (git-ignored), model.safetensors cut into parts of PART_MB
# (default 48) in .devmodel0, .devmodel1, ... Carry one folder per call on a warm machine (a
# folder left there by an earlier call stays), then the run joins them (join-model.sh). A model
# that is one file (a GGUF) is cut the same way.
#   scripts/device/split-model.sh all-minilm-l6-v2
#   scripts/device/split-model.sh smollm2-135m-instruct-q4_1.gguf
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name="$1"
src="${RINFER_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models}/$name"
rm -rf .devmodel*/
mkdir -p .devmodel0
if [ -f "$src" ]; then  # one file: only its parts and its sha256
  whole="$src"
  sha256sum "$src" | awk '{print $1}' >".devmodel0/$name.sha256"
else
  [ -f "$src/model.safetensors" ] || { echo "split-model: $src/model.safetensors is missing" >&2; exit 1; }
  whole="$src/model.safetensors"
  cp -r "$src" ".devmodel0/$name"
  rm -f ".devmodel0/$name/model.safetensors"
  sha256sum "$whole" | awk '{print $1}' >".devmodel0/$name/model.safetensors.sha256"
fi
tmp="$(mktemp -d)"
split -b "${PART_MB:-48}M" -d -a 3 "$whole" "$tmp/part"
i=0
for p in "$tmp"/part*; do
  mkdir -p ".devmodel$i"
  mv "$p" ".devmodel$i/$name.part$i"
  i=$((i + 1))
done
rm -rf "$tmp"
du -sh .devmodel*/ | sed 's/^/split-model: /'
