#!/usr/bin/env bash
# ctest's runner for one client-driven test: SCRIPT RINFER. The Python is the virtual
# environment of scripts/install-python-deps.sh (scripts/test.sh makes it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="$root/.venv-test/bin/python"
if [ ! -x "$py" ]; then
  echo "run_py_test: $py is missing: run scripts/install-python-deps.sh" >&2
  exit 1
fi
exec "$py" "$1" --rinfer "$2"
