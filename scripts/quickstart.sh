#!/usr/bin/env bash
# The main job on a fresh Debian machine: installs the dependencies, builds rinfer, fetches the
# default model (SmolLM2-135M-Instruct Q4_1) and shows what is in it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
bash scripts/fetch-models.sh smollm2-135m-instruct-q4_1
./build/default/rinfer info smollm2-135m-instruct-q4_1
