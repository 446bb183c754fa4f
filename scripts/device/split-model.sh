#!/usr/bin/env bash
# Prepares a model of the cache for the GPU machine, whose calls carry at most 64 MiB each:
# its files into .devmodel0/NAME/ (git-ignored), model.safetensors cut into parts of PART_MB
# (default 48) in .devmodel0, .devmodel1, ... Carry one folder per call on a warm machine (a
# folder left there by an earlier call stays), then the run joins them (join-model.sh).
#   scripts/device/split-model.sh all-minilm-l6-v2
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name="$1"
src="${RINFER_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models}/$name"
[ -f "$src/model.safetensors" ] || { echo "split-model: $src/model.safetensors is missing" >&2; exit 1; }
rm -rf .devmodel*/
mkdir -p .devmodel0
cp -r "$src" ".devmodel0/$name"
rm -f ".devmodel0/$name/model.safetensors"
sha256sum "$src/model.safetensors" | awk '{print $1}' >".devmodel0/$name/model.safetensors.sha256"
tmp="$(mktemp -d)"
split -b "${PART_MB:-48}M" -d -a 1 "$src/model.safetensors" "$tmp/part"
i=0
for p in "$tmp"/part*; do
  mkdir -p ".devmodel$i"
  mv "$p" ".devmodel$i/$name.safetensors.part$i"
  i=$((i + 1))
done
rm -rf "$tmp"
du -sh .devmodel*/ | sed 's/^/split-model: /'
