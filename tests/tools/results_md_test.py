"""docs/results.md is what bench/results_md.py makes from the JSON in bench/results/ (issue 41's
strategy table): a row edited by hand, or a JSON changed without regenerating the page, fails."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "results_md.py"), "--check"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print("FAIL: docs/results.md is not what bench/results_md.py makes")
        return 1
    with open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8") as f:
        text = f.read()
    rows = [l for l in text.splitlines() if l.startswith("| ") and "`cpu-2core/" in l]
    if len(rows) < 4:
        print(f"FAIL: {len(rows)} measured CPU rows in docs/results.md")
        return 1
    print(f"ok: docs/results.md is current ({len(rows)} CPU rows)")
    return 0


if __name__ == "__main__":
    # run_py_test.sh passes --rinfer BINARY, which this check does not need.
    sys.exit(main())
