"""Starts `rinfer serve` on a free loopback port for the client-driven tests, and talks to it.

The tests run with the virtual environment of scripts/install-python-deps.sh (the `openai`
client); ctest passes the rinfer binary with --rinfer. A test whose reference model is missing
exits with 77, which ctest reports as skipped.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOLLM2_RECIPE = os.path.join(SOURCE_DIR, "recipes/llm-serve/smollm2-135m/optimized.yaml")
SMOLLM2 = "smollm2-135m-instruct-q4_1"
SKIP = 77


def model_dir():
    d = os.environ.get("RINFER_MODEL_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "."), ".cache")
    return os.path.join(base, "recipes-infer", "models")


MINILM_RECIPE = os.path.join(SOURCE_DIR, "recipes/embedding/all-minilm-l6-v2/optimized.yaml")
MINILM = "all-minilm-l6-v2"


def require_model(name=SMOLLM2):
    path = os.path.join(model_dir(), name + ".gguf")
    if not os.path.exists(path) and not os.path.isdir(os.path.join(model_dir(), name)):
        print(f"SKIP: reference model '{name}' not in {model_dir()} (run scripts/fetch-models.sh)")
        sys.exit(SKIP)


def rinfer_binary():
    for i, a in enumerate(sys.argv):
        if a == "--rinfer" and i + 1 < len(sys.argv):
            path = sys.argv[i + 1]
            del sys.argv[i : i + 2]
            return path
    return os.environ.get("RINFER_BINARY", os.path.join(SOURCE_DIR, "build/default/rinfer"))


RINFER = rinfer_binary()  # taken out of sys.argv before unittest reads it


class Server:
    """`rinfer serve ARGS --port 0` as a context manager: ready on entry, SIGTERM on exit (the
    exit status must be 0 unless expect_exit says otherwise)."""

    def __init__(self, *args, ready_timeout=300, expect_exit=0, wait_ready=True):
        self.cmd = [RINFER, "serve", *args, "--port", "0"]
        self.ready_timeout = ready_timeout
        self.expect_exit = expect_exit
        self.wait_ready = wait_ready
        self.stderr_lines = []
        self.port = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        got_port = threading.Event()

        def read_stderr():
            for line in self.proc.stderr:
                self.stderr_lines.append(line)
                m = re.search(r"listening on http://[^ ]*:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    got_port.set()
            got_port.set()

        self.reader = threading.Thread(target=read_stderr, daemon=True)
        self.reader.start()
        if not got_port.wait(60) or self.port is None:
            self.proc.kill()
            raise RuntimeError("the server did not start:\n" + "".join(self.stderr_lines))
        if self.wait_ready:
            deadline = time.time() + self.ready_timeout
            while time.time() < deadline:
                status, _ = self.get("/health")
                if status == 200:
                    break
                if self.proc.poll() is not None:
                    raise RuntimeError("the server exited:\n" + "".join(self.stderr_lines))
                time.sleep(0.1)
            else:
                raise RuntimeError("the server was not ready in time")
        return self

    def stop(self, sig=signal.SIGTERM, timeout=120):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.reader.join(5)
        self.proc.stderr.close()
        return code

    def __exit__(self, exc_type, exc, tb):
        code = self.stop()
        if exc_type is None and self.expect_exit is not None and code != self.expect_exit:
            raise AssertionError(f"rinfer serve exited with {code}, expected {self.expect_exit}:\n"
                                 + "".join(self.stderr_lines))
        return False

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=120, on_headers=None):
        """(status, body bytes); body may be bytes, str or a JSON-able object. on_headers, if
        given, is called with the status once the response's headers are in (before its body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            if on_headers is not None:
                on_headers(r.status)
            return r.status, r.read()
        finally:
            conn.close()

    def get(self, path, **kw):
        try:
            return self.request("GET", path, **kw)
        except (ConnectionError, OSError):
            return 0, b""

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def metric(self, name, labels=None):
        """The value of a metric series from /metrics (0 when absent)."""
        _, text = self.get("/metrics")
        want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
        for line in text.decode().splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0


def curl(*args, timeout=120):
    """curl -s ARGS, returning (status, body) with the status from -w."""
    out = subprocess.run(["curl", "-s", "-S", "-w", "\n%{http_code}", *args], capture_output=True,
                         timeout=timeout)
    text = out.stdout.decode(errors="replace")
    body, _, code = text.rpartition("\n")
    return int(code or 0), body


def sse_events(body):
    """The JSON payloads of a server-sent event stream, and whether it ended with [DONE]."""
    events, done = [], False
    for block in body.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line[6:]
                if data == "[DONE]":
                    done = True
                else:
                    events.append(json.loads(data))
    return events, done
