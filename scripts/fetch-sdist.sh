# Sourced by the install scripts of source dependencies: fetch_sdist NAME URL SHA256 DEST
# downloads a PyPI source distribution to DEST and checks its sha256 (NAME prefixes messages).
fetch_sdist() {
  local name="$1" url="$2" sha="$3" dest="$4"
  command -v curl >/dev/null || { echo "$name: curl is missing" >&2; return 1; }
  echo "$name: downloading $(basename "$url") from PyPI"
  curl -fsSL --retry 3 -o "$dest" "$url"
  local got
  got="$(sha256sum "$dest" | cut -d' ' -f1)"
  [ "$got" = "$sha" ] || { echo "$name: sha256 $got, expected $sha" >&2; return 1; }
}
