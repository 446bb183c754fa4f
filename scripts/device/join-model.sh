#!/usr/bin/env bash
# On the GPU machine: joins what split-model.sh left in .devmodel*/ into DIR/NAME (default
# /tmp/rinfer-models) and checks the sha256; prints the directory to use as RINFER_MODEL_DIR.
#   RINFER_MODEL_DIR="$(bash scripts/device/join-model.sh all-minilm-l6-v2)"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name="$1"
dir="${2:-/tmp/rinfer-models}"
mkdir -p "$dir"
if [ -f ".devmodel0/$name.sha256" ]; then  # one file (a GGUF)
  target="$dir/$name"
  ls .devmodel*/"$name".part* | sort -V | xargs cat >"$target"
  want="$(cat ".devmodel0/$name.sha256")"
else
  mkdir -p "$dir/$name"
  cp -r ".devmodel0/$name/." "$dir/$name/"
  target="$dir/$name/model.safetensors"
  ls .devmodel*/"$name".part* | sort -V | xargs cat >"$target"
  want="$(cat "$dir/$name/model.safetensors.sha256")"
fi
got="$(sha256sum "$target" | awk '{print $1}')"
[ "$want" = "$got" ] || { echo "join-model: $name: sha256 $got, expected $want (a part missing?)" >&2; exit 1; }
echo "$dir"
