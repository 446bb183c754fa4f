#!/usr/bin/env bash
# Measures the embedding recipes of a folder against sentence-transformers on the same machine,
# one after the other: the peer first (bench/embedding_peer.py, in a Python that has torch and
# sentence-transformers: $PYTHON), then `rinfer bench` with its result.
#   PYTHON=/path/to/python scripts/bench-embedding.sh [FOLDER] [TEXTS] [-- rinfer bench args]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
folder="${1:-$root/recipes/embedding/all-minilm-l6-v2}"
texts="${2:-$folder/bench_sentences.txt}"
shift $(( $# > 2 ? 2 : $# )); [ "${1:-}" = "--" ] && shift
rinfer="${RINFER:-$root/build/default/rinfer}"
python="${PYTHON:-python3}"
model="${RINFER_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models}/all-minilm-l6-v2"
peer="$(mktemp --suffix=.json)"
trap 'rm -f "$peer"' EXIT
"$python" "$root/bench/embedding_peer.py" "$model" "$texts" "$peer" --batch-size 32 \
  --threads "$(nproc)" ${PEER_ARGS:-}
"$rinfer" bench "$folder" --text "$texts" --peer "$peer" "$@"
