#!/usr/bin/env bash
# Fetches minja, the Jinja interpreter for chat templates (Google's header-only C++ engine that
# renders the `tokenizer.chat_template` a GGUF stores: tools, tool calls, tool messages), into the
# dependency cache (${XDG_CACHE_HOME:-~/.cache}/recipes-infer/deps/minja-VERSION: include/minja/),
# where CMake finds it (RINFER_MINJA_DIR). minja ships on PyPI inside llama-cpp-python's source
# distribution (vendor/llama.cpp/vendor/minja); the sdist's sha256 is checked and only the two
# headers, the license, and a chat template the tests render (Llama 3.1's, from llama.cpp's
# models/templates) are kept. Nothing of it is copied into the repository. Idempotent.
set -euo pipefail

VERSION=0.3.16  # of llama-cpp-python, whose sdist carries minja
URL="https://files.pythonhosted.org/packages/e4/b4/c8cd17629ced0b9644a71d399a91145aedef109c0333443bef015e45b704/llama_cpp_python-$VERSION.tar.gz"
SHA256=34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6

prefix="${RINFER_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipes-infer/deps}/minja-llama-cpp-python-$VERSION"
LLAMA31=meta-llama-Llama-3.1-8B-Instruct.jinja
if [ -f "$prefix/include/minja/minja.hpp" ] && [ -f "$prefix/include/minja/chat-template.hpp" ] &&
  [ -f "$prefix/templates/$LLAMA31" ]; then
  echo "install-minja: minja (llama-cpp-python $VERSION) present in $prefix"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/fetch-sdist.sh"
fetch_sdist install-minja "$URL" "$SHA256" "$work/src.tar.gz"
inner="llama_cpp_python-$VERSION/vendor/llama.cpp"
tar -xzf "$work/src.tar.gz" -C "$work" "$inner/vendor/minja" "$inner/LICENSE" \
  "$inner/models/templates/$LLAMA31"
rm -rf "$prefix.tmp"
mkdir -p "$prefix.tmp/include/minja" "$prefix.tmp/templates"
cp "$work/$inner/models/templates/$LLAMA31" "$prefix.tmp/templates/"
cp "$work/$inner/vendor/minja/minja.hpp" "$work/$inner/vendor/minja/chat-template.hpp" \
  "$prefix.tmp/include/minja/"
cp "$work/$inner/LICENSE" "$prefix.tmp/LICENSE"
rm -rf "$prefix"
mv "$prefix.tmp" "$prefix"
echo "install-minja: minja installed in $prefix"
