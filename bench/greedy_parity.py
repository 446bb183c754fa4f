#!/usr/bin/env python3
"""Greedy replies of one model on two devices, compared reply by reply: the 64 chat prompts of
tests/smollm2_served.h (16 topics in 4 forms), each through `rinfer run RECIPE --temperature 0
--repeat-penalty 1 --json` (argmax at every step; one process a prompt, so each reply is computed
alone), token ids recorded.

    greedy_parity.py RINFER RECIPE OUT.json [--tokens 32]            # one device's replies
    greedy_parity.py --compare A.json B.json [--out C.json]          # how many are identical

The comparison prints, for each prompt whose replies part, where they part; and the count of
identical replies (the bar of issue 42: at least 60 of 64 for Qwen2.5-Coder-1.5B, CPU against
the GPU)."""

import argparse
import json
import platform
import subprocess
import sys
import time

TOPICS = ["the moon", "bread", "rain", "a violin", "chess", "the ocean", "volcanoes", "bees",
          "a library", "winter", "trains", "coffee", "the desert", "a lighthouse", "music",
          "mountains"]
FORMS = ["What is {}?", "Write one sentence about {}.", "Explain {} to a child in two sentences.",
         "List three facts about {}, and say which one surprises people most."]


def prompts():
    return [f.replace("{}", t) for f in FORMS for t in TOPICS]


def generate(rinfer, recipe, tokens):
    replies = []
    t0 = time.monotonic()
    for i, p in enumerate(prompts()):
        r = subprocess.run([rinfer, "run", recipe, "-p", p, "-n", str(tokens), "--temperature",
                            "0", "--repeat-penalty", "1", "--json"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"prompt {i}: rinfer run failed ({r.returncode}): {r.stderr[-2000:]}")
        out = json.loads(r.stdout)
        replies.append({"prompt": p, "tokens": out["tokens"], "text": out["text"],
                        "finish_reason": out["finish_reason"]})
        print(f"{i + 1}/64 {out['timings']['decode_tok_s']:.1f} tok/s: {out['text'][:60]!r}",
              flush=True)
    return {"recipe": recipe, "tokens": tokens, "machine": platform.node(),
            "seconds": time.monotonic() - t0, "replies": replies}


def compare(a, b):
    same = 0
    parted = []
    for i, (x, y) in enumerate(zip(a["replies"], b["replies"])):
        if x["prompt"] != y["prompt"]:
            sys.exit(f"prompt {i} differs between the files")
        if x["tokens"] == y["tokens"]:
            same += 1
            continue
        at = next((k for k, (s, t) in enumerate(zip(x["tokens"], y["tokens"])) if s != t),
                  min(len(x["tokens"]), len(y["tokens"])))
        parted.append({"prompt": i, "at_token": at, "a": x["text"], "b": y["text"]})
    n = min(len(a["replies"]), len(b["replies"]))
    print(f"identical greedy replies: {same} of {n} ({a['recipe']} against {b['recipe']}, "
          f"{a['tokens']} tokens each)")
    for p in parted:
        print(f"  prompt {p['prompt']}: parts at token {p['at_token']}:\n    a: {p['a']!r}\n"
              f"    b: {p['b']!r}")
    return {"identical": same, "prompts": n, "parted": parted, "a": a["recipe"],
            "b": b["recipe"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("args", nargs="*")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.compare:
        if len(a.args) != 2:
            sys.exit("--compare takes two JSON files")
        with open(a.args[0]) as f, open(a.args[1]) as g:
            result = compare(json.load(f), json.load(g))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(result, f, indent=1)
        return
    if len(a.args) != 3:
        sys.exit("usage: greedy_parity.py RINFER RECIPE OUT.json [--tokens N]")
    rinfer, recipe, out = a.args
    with open(out, "w") as f:
        json.dump(generate(rinfer, recipe, a.tokens), f, indent=1)


if __name__ == "__main__":
    main()
