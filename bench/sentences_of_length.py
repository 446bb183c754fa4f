#!/usr/bin/env python3
"""Texts of about one length for the embedding benchmarks: the sentences of a corpus (one per
line, or JSON lines with "text"; scripts/fetch-search-corpus.sh makes one) whose token count under
a model's tokenizer.json ([CLS] and [SEP] included) lies in [MIN, MAX], cycled to COUNT lines.
Needs the `tokenizers` package.

    python3 bench/sentences_of_length.py TOKENIZER.json CORPUS OUT.txt [--min 36] [--max 44]
        [--count 16384]
"""
import argparse
import json

from tokenizers import Tokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tokenizer")
    p.add_argument("corpus")
    p.add_argument("out")
    p.add_argument("--min", type=int, default=36)
    p.add_argument("--max", type=int, default=44)
    p.add_argument("--count", type=int, default=16384)
    a = p.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    tok.no_padding()
    tok.no_truncation()
    texts = []
    with open(a.corpus, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            texts.append(json.loads(line)["text"] if line.lstrip().startswith("{") else line)
    lens = [len(e.ids) for e in tok.encode_batch(texts)]
    picked = [(t, n) for t, n in zip(texts, lens) if a.min <= n <= a.max and "\n" not in t]
    if not picked:
        raise SystemExit(f"no sentence of {a.min} to {a.max} tokens in {a.corpus}")
    out = [picked[i % len(picked)] for i in range(a.count)]
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t, _ in out))
    mean = sum(n for _, n in out) / len(out)
    print(f"{a.out}: {len(out)} lines ({len(picked)} distinct sentences), {mean:.1f} tokens on average")


if __name__ == "__main__":
    main()
