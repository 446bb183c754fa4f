#!/usr/bin/env bash
# Measures the embedding recipes of a folder against sentence-transformers on the same machine,
# one after the other: the peer first (bench/embedding_peer.py, in a Python that has torch and
# sentence-transformers: $PYTHON), then `rinfer bench` with its result. The peer runs in each of
# $PEER_DTYPES (fp32, plus bf16 on a CPU with AMX tiles); the first is the "vs peer" column's.
#   PYTHON=/path/to/python scripts/bench-embedding.sh [FOLDER] [TEXTS] [-- rinfer bench args]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
folder="${1:-$root/recipes/embedding/all-minilm-l6-v2}"
texts="${2:-$folder/bench_sentences.txt}"
shift $(( $# > 2 ? 2 : $# )); [ "${1:-}" = "--" ] && shift
rinfer="${RINFER:-$root/build/default/rinfer}"
python="${PYTHON:-python3}"
model="${RINFER_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models}/all-minilm-l6-v2"
if [ -z "${PEER_DTYPES:-}" ]; then
  PEER_DTYPES=fp32
  grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null && PEER_DTYPES="fp32 bf16"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
peers=()
for dt in $PEER_DTYPES; do
  flag=""
  [ "$dt" = fp32 ] || flag="--$dt"
  "$python" "$root/bench/embedding_peer.py" "$model" "$texts" "$tmp/peer-$dt.json" \
    --batch-size 32 --threads "$(nproc)" $flag ${PEER_ARGS:-}
  peers+=(--peer "$tmp/peer-$dt.json")
done
"$rinfer" bench "$folder" --text "$texts" "${peers[@]}" "$@"
