#!/usr/bin/env bash
# The main job on a fresh Debian machine: installs the dependencies, builds rinfer, fetches the
# default model (SmolLM2-135M-Instruct Q4_1) and asks it a question with the default recipe.
# Another question: bash scripts/quickstart.sh "Why is the sky blue?"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
bash scripts/fetch-models.sh smollm2-135m-instruct-q4_1
prompt="${1:-What is the capital of France? Answer in one sentence.}"
echo "> $prompt"
./build/default/rinfer run recipes/llm-chat/smollm2-135m/optimized.yaml -p "$prompt"
