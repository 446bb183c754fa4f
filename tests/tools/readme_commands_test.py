"""Every CPU command of the README and the docs, run as written (small sizes), so that they
cannot drift.

The ```sh blocks of README.md, docs/**/*.md and the recipe folders' READMEs are read, and each
`rinfer` command (`./build/default/rinfer ...` or `rinfer ...`) without a placeholder (RECIPE,
MODEL, [--flag], a|b) runs with the binary under test, in a scratch folder that holds a copy of
`recipes/` (so `--readme` and the benches' JSON write there, never into the checkout). Only sizes
and placeholders change, through the SUBSTITUTIONS table below; each rule must still match a
command (a rule that matches nothing fails the test: the docs changed, and this test must follow
them). `rinfer serve` starts in the background on a free port (for the curl and loadgen commands
after it in its block) and stops at the block's end. The GPU commands (`./build/cuda/...`), the
scripts and the build commands are not run here.

Every command must exit 0, say something (on stdout, or on stderr where its result is a file)
and print no error; curl's reply must be a chat completion. Needs the reference models of
scripts/fetch-models.sh (77, skipped, without them).
"""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "server"))
import harness  # noqa: E402  (the model cache, the binary from --rinfer, the skip code)

SKIP = harness.SKIP
model_dir = harness.model_dir
# A usage line, not a command: an upper-case placeholder (RECIPE, MODEL, CORPUS.jsonl), an
# optional [--flag] or alternatives a|b.
PLACEHOLDER = re.compile(r"(?:^|\s)[A-Z][A-Z_]{2,}(?:\s|$|\.)|\[-|\w\|\w")
MODELS = ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf", "all-minilm-l6-v2",
          "mobilenet-v2.pth", "imagenet-classes.json", "photos/chelsea.png", "photos/coffee.png"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh_blocks(text):
    """The commands of each ```sh block: continuation lines joined, comments kept (the shell
    drops them)."""
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", text, re.S):
        cmds, cur = [], ""
        for line in body.splitlines():
            if line.rstrip().endswith("\\"):
                cur += line.rstrip()[:-1] + " "
                continue
            cur += line
            if cur.strip():
                cmds.append(cur.strip())
            cur = ""
        blocks.append(cmds)
    return blocks


def main():
    binary = os.path.abspath(harness.RINFER)
    if os.environ.get("RINFER_SANITIZE") == "ON":
        print("SKIP: the README's commands run on the optimized build (under the sanitizers the "
              "benches take many minutes)")
        return SKIP
    missing = [m for m in MODELS if not os.path.exists(os.path.join(model_dir(), m))]
    if missing:
        print(f"SKIP: not in {model_dir()}: {', '.join(missing)} (run scripts/fetch-models.sh)")
        return SKIP

    work = tempfile.mkdtemp(prefix="rinfer-readme-")
    shutil.copytree(os.path.join(SOURCE_DIR, "recipes"), os.path.join(work, "recipes"))
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w") as f:
        for i in range(120):
            f.write(json.dumps({"id": str(i), "text": f"Sentence {i} is about topic {i % 7}."}) + "\n")
    cache = model_dir()
    port = str(free_port())
    small_llm = "--repeat 1 --warmup 0 --precision-tokens 32"
    # (what the README says, what runs here): sizes and placeholders only.
    substitutions = [
        ("./build/default/rinfer", shlex.quote(binary)),
        ("--prompt-tokens 128 --gen-tokens 256 --readme",
         f"--prompt-tokens 16 --gen-tokens 8 {small_llm} --readme"),
        ("--requests 32 --concurrency 16", "--requests 4 --concurrency 2 --input-len 16 "
         "--output-len 8"),
        ("$R/optimized.yaml /usr/share/common-licenses/GPL-3",
         "$R/optimized.yaml /usr/share/common-licenses/GPL-3 --ctx 128 --max-windows 2"),
        ("/usr/share/common-licenses/GPL-3 --ctx 512",
         "/usr/share/common-licenses/GPL-3 --ctx 128 --max-windows 2"),
        ("path/to/model.gguf", shlex.quote(os.path.join(cache, "smollm2-135m-instruct-q4_1.gguf"))),
        ("path/to/hf-model-dir", shlex.quote(os.path.join(cache, "all-minilm-l6-v2"))),
        ("in.gguf out.gguf", shlex.quote(os.path.join(cache, "smollm2-135m-instruct-q4_1.gguf")) +
         " " + shlex.quote(os.path.join(work, "out.gguf"))),
        ("~/.cache/recipes-infer/corpora/news-wiki-sentences.jsonl", shlex.quote(corpus)),
        ("-o /tmp/news-wiki", "-o " + shlex.quote(os.path.join(work, "news-wiki"))),
        ("search /tmp/news-wiki", "search " + shlex.quote(os.path.join(work, "news-wiki"))),
        ("~/.cache/recipes-infer/models", shlex.quote(cache)),
        (" bench recipes/image-classification/mobilenet-v2",
         " bench recipes/image-classification/mobilenet-v2 --images 4 --repeat 1 --warmup 0"),
        ("--requests 64 --concurrency 1,16", "--requests 4 --concurrency 1,2 --input-len 16 "
         "--output-len 8"),
        ("--requests 64 --input-len 128 --output-len 128 --concurrency 16",
         "--requests 4 --input-len 16 --output-len 8 --concurrency 2"),
        ('$R/baseline.yaml -p "Hi" -n 8', '$R/baseline.yaml -p "Hi" -n 2'),
        ('-p "What is 2 + 2?" -n 16', '-p "What is 2 + 2?" -n 2'),
        ("tune $R --budget 15",
         "tune $R --budget 0.2 --prompt-tokens 16 --gen-tokens 8 --repeat 1 --precision-tokens 32 "
         "--cache " + shlex.quote(os.path.join(work, "tune-cache.json"))),
        ("tune recipes/llm-serve/smollm2-135m --budget 5 --requests 16 --repeat 1",
         "tune recipes/llm-serve/smollm2-135m --budget 0.2 --requests 4 --prompt-tokens 16 "
         "--gen-tokens 8 --repeat 1 --precision-tokens 32 --cache " +
         shlex.quote(os.path.join(work, "tune-serve-cache.json"))),
        ("--port 8080", "--port " + port),
        ("localhost:8080", "127.0.0.1:" + port),
        ("127.0.0.1:8080", "127.0.0.1:" + port),
    ]
    used = {old: 0 for old, _ in substitutions}

    env = dict(os.environ, RINFER_MODEL_DIR=cache, RINFER_NO_PROGRESS="1")
    docs = ["README.md"] + sorted(
        os.path.relpath(os.path.join(d, f), SOURCE_DIR)
        for base in ("docs", "recipes")
        for d, _, files in os.walk(os.path.join(SOURCE_DIR, base))
        for f in files if f.endswith(".md"))
    failures, ran = [], 0

    def run_one(doc, cmd, line, variables):
        t0 = time.time()
        stdin = "Hi\n/exit\n" if " --chat" in cmd else ""
        r = subprocess.run(["bash", "-c", variables + line], cwd=work, env=env, input=stdin,
                           capture_output=True, text=True, timeout=600)
        # Exit 0 and something said (index reports on stderr), no error line.
        ok = (r.returncode == 0 and (r.stdout.strip() or r.stderr.strip())
              and "error" not in r.stderr.lower())
        if ok and cmd.startswith("curl "):
            ok = '"chat.completion"' in r.stdout and '"content"' in r.stdout
        print(f"{'ok  ' if ok else 'FAIL'} {time.time() - t0:6.1f} s  {doc}: {cmd}", flush=True)
        if not ok:
            failures.append(f"{doc}: {cmd}\n  ran: {line}\n  exit {r.returncode}\n  stdout: "
                            f"{r.stdout[-800:]}\n  stderr: {r.stderr[-1500:]}")

    def start_server(line, variables):
        server = subprocess.Popen(["bash", "-c", variables + "exec " + line], cwd=work, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120  # ready: /health answers 200 once the models are loaded
        while time.time() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as h:
                    if h.status == 200:
                        break
            except (OSError, urllib.error.HTTPError):
                pass
            time.sleep(0.2)
        return server

    def stop_server(server):
        server.send_signal(signal.SIGTERM)
        try:
            _, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
        if server.returncode != 0:
            failures.append(f"rinfer serve exited {server.returncode}: {err[-1500:]}")

    for doc in docs:
        with open(os.path.join(SOURCE_DIR, doc)) as f:
            blocks = sh_blocks(f.read())
        variables = ""  # R=...: a block's variables hold for the file's blocks after it
        for block in blocks:
            server = None
            for cmd in block:
                if re.match(r"^[A-Z_]+=\S+$", cmd):
                    variables += cmd + "; "
                    continue
                if cmd.startswith("rinfer "):
                    cmd = "./build/default/" + cmd
                runs_here = cmd.startswith("./build/default/rinfer") or cmd.startswith("curl ")
                if not runs_here or PLACEHOLDER.search(cmd.split(" #")[0]):
                    continue  # scripts, the GPU build, cmake, usage lines: not this test's
                line = cmd
                if " serve " in cmd and "--port" not in cmd:  # the default port, 8080
                    line = line.replace(" serve ", " serve --port 8080 ", 1)
                for old, new in substitutions:
                    if old in line:
                        used[old] += 1
                        line = line.replace(old, new)
                if " serve " in cmd:
                    server = start_server(line, variables)
                    print(f"started: {doc}: {cmd}", flush=True)
                    continue
                ran += 1
                run_one(doc, cmd, line, variables)
            if server is not None:
                stop_server(server)
    stale = [old for old, n in used.items() if n == 0]
    if stale:
        failures.append("substitutions that match no command of the docs (update this test with "
                        "them): " + "; ".join(stale))
    if ran < 30:
        failures.append(f"only {ran} commands ran: did the docs' blocks change?")
    shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAILED:", f)
    print(f"{ran} commands of the README and the docs run, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
