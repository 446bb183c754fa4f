#!/usr/bin/env bash
# Makes the search corpus of the embedding recipes: about 19,000 real English sentences (Lee
# news articles and a Wikipedia excerpt, markup stripped) as JSON lines, from the test data of
# the gensim==4.4.0 wheel on PyPI (tests/tools/gen_search_corpus.py does the extraction).
# Writes <cache>/corpora/news-wiki-sentences.jsonl (cache: ~/.cache/recipes-infer, or the parent
# of $RINFER_MODEL_DIR); idempotent.
#   scripts/fetch-search-corpus.sh [OUT]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -n "${RINFER_MODEL_DIR:-}" ]; then base="$(dirname "$RINFER_MODEL_DIR")"; else
  base="${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer"; fi
out="${1:-$base/corpora/news-wiki-sentences.jsonl}"
python="${PYTHON:-python3}"
if [ -s "$out" ] && [ "$(wc -l < "$out")" -ge 10000 ]; then
  echo "fetch-search-corpus: $out is there ($(wc -l < "$out") sentences)" >&2
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "fetch-search-corpus: downloading gensim==4.4.0 from PyPI" >&2
"$python" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
  -d "$work" gensim==4.4.0 >&2
data=gensim/test/test_data
unzip -q -o "$work"/gensim-*.whl "$data/lee_background.cor" \
  "$data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2" -d "$work"
mkdir -p "$(dirname "$out")"
"$python" "$here/../tests/tools/gen_search_corpus.py" "$work/$data" "$out.tmp"
n="$(wc -l < "$out.tmp")"
[ "$n" -ge 10000 ] || { echo "fetch-search-corpus: only $n sentences" >&2; exit 1; }
mv "$out.tmp" "$out"
echo "fetch-search-corpus: $n sentences -> $out" >&2
