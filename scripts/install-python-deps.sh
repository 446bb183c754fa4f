#!/usr/bin/env bash
# The Python the client-driven tests need, in a virtual environment of the checkout
# (.venv-test/, git-ignored): the official `openai` client and `jsonschema` (structured output
# replies are validated with it). The engine itself needs no Python.
# Idempotent: an environment that already has the pinned versions is left alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.venv-test
PINS=(openai==3.57.0 jsonschema==4.23.0)

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "${PINS[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
PY
  echo "install-python-deps: ${PINS[*]} present in $VENV"
  exit 0
fi
rm -rf "$VENV"
/usr/bin/python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}"
echo "install-python-deps: installed ${PINS[*]} in $VENV"
