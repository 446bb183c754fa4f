#!/usr/bin/env bash
# Builds XGrammar's C++ core (the grammar engine behind structured output: JSON schemas, EBNF
# grammars, token masks) from its PyPI source distribution into the dependency cache
# (${XDG_CACHE_HOME:-~/.cache}/recipes-infer/deps/xgrammar-VERSION: include/, lib/libxgrammar.a),
# where CMake finds it (RINFER_XGRAMMAR_DIR). The sdist's sha256 is checked; nothing of it is
# copied into the repository. Idempotent: a finished build is left alone.
set -euo pipefail

VERSION=0.2.9
URL="https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$VERSION.tar.gz"
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90

prefix="${RINFER_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/deps}/xgrammar-$VERSION"
if [ -f "$prefix/lib/libxgrammar.a" ] && [ -f "$prefix/include/xgrammar/xgrammar.h" ]; then
  echo "install-xgrammar: xgrammar $VERSION present in $prefix"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/fetch-sdist.sh"
fetch_sdist install-xgrammar "$URL" "$SHA256" "$work/src.tar.gz"
tar -xzf "$work/src.tar.gz" -C "$work"
src="$work/xgrammar-$VERSION"
# The static C++ library only: no Python bindings, no LTO objects (our link is not LTO), its
# -Werror relaxed (a newer compiler's warnings must not stop the build).
# Its own cmake/config.cmake turns the bindings on; a config.cmake in the build folder wins.
mkdir -p "$work/build"
cat >"$work/build/config.cmake" <<'CFG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CFG
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" >/dev/null
echo "install-xgrammar: building (a few minutes on 2 cores)"
cmake --build "$work/build" --target xgrammar -j "${RINFER_JOBS:-$(nproc)}" >/dev/null
rm -rf "$prefix.tmp"
mkdir -p "$prefix.tmp/lib" "$prefix.tmp/include"
cp "$work/build/libxgrammar.a" "$prefix.tmp/lib/"
cp -r "$src/include/xgrammar" "$prefix.tmp/include/"
cp -r "$src/3rdparty/dlpack/include/dlpack" "$prefix.tmp/include/"
cp "$src/LICENSE" "$prefix.tmp/"
rm -rf "$prefix"
mv "$prefix.tmp" "$prefix"
echo "install-xgrammar: xgrammar $VERSION installed in $prefix"
