#!/usr/bin/env bash
# Installs every Debian package that recipes-infer's build and tests need, then the source
# dependencies from PyPI sdists (XGrammar, scripts/install-xgrammar.sh; minja, install-minja.sh).
# Idempotent: packages already present are left alone, apt is not touched at all when nothing is
# missing, and a finished build stays.
# The CUDA toolkit (nvcc, cuBLAS) is not a Debian package here; the `cuda` preset needs it.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  python3 python3-pip unzip  # scripts/fetch-models.sh unpacks wheels downloaded by pip
  python3-venv  # scripts/install-python-deps.sh: the openai client for the server tests
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libhwy-dev libcpp-httplib-dev
  libutf8proc-dev  # Unicode properties and NFD for the WordPiece (BERT) tokenizer
  libjpeg-dev libpng-dev zlib1g-dev  # image decoding for the vision samples (src/image)
  libfaiss-dev  # vector search: rinfer index / rinfer search
  libgtest-dev libgmock-dev libbenchmark-dev
  libmicrohttpd-dev  # the HTTP server of rinfer serve
  chromium  # the headless browser that drives the chat page in tests/server/serve_web_test.py
  ccache  # keeps compiled objects between builds (and CI runs) on one machine
  curl  # install-xgrammar.sh and install-minja.sh fetch source distributions from PyPI
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Built from PyPI source distributions into the dependency cache (not Debian packages).
bash "$(dirname "${BASH_SOURCE[0]}")/install-xgrammar.sh"
bash "$(dirname "${BASH_SOURCE[0]}")/install-minja.sh"
