#!/usr/bin/env python3
"""The peer of `rinfer bench` for embedding recipes: sentence-transformers (PyTorch) embedding
the same texts, measured the same way (warm-up runs, then the median of timed runs of one
encode() call over every text, tokenization included), written as JSON for `rinfer bench
--peer`. scripts/bench-embedding.sh runs both, one after the other, on the same machine.

    python3 bench/embedding_peer.py MODEL_DIR TEXTS.txt OUT.json [--device cpu|cuda]
        [--batch-size 32] [--threads N] [--fp16 | --bf16] [--repeat 3] [--warmup 1] [--limit N]

--bf16 on a CPU with AMX runs PyTorch's oneDNN bf16 kernels on the tiles, the peer of the
recipes with `quantization: {activations: bf16}`.
"""
import argparse
import json
import statistics
import time

import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("texts")
    p.add_argument("out")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    dt = p.add_mutually_exclusive_group()
    dt.add_argument("--fp16", action="store_true")
    dt.add_argument("--bf16", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--limit", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    with open(a.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\r\n") for line in f if line.strip()]
    if a.limit > 0:
        texts = texts[: a.limit]
    model = SentenceTransformer(a.model, device=a.device)
    if a.fp16:
        model = model.half()
    elif a.bf16:
        model = model.to(torch.bfloat16)
    tokens = sum(len(model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"])
                 for t in texts)
    secs = []
    for run in range(a.warmup + a.repeat):
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.encode(texts, batch_size=a.batch_size, convert_to_numpy=True)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        if run >= a.warmup:
            secs.append(s)
    med = statistics.median(secs)
    out = {"name": "sentence-transformers", "version": sentence_transformers.__version__,
           "torch": torch.__version__, "device": a.device, "dtype": "fp16" if a.fp16 else "bf16" if a.bf16 else "fp32",
           "threads": torch.get_num_threads(), "batch_size": a.batch_size, "texts": len(texts),
           "tokens": tokens, "seconds": secs, "inputs_per_s": len(texts) / med,
           "tokens_per_s": tokens / med}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"sentence-transformers: {len(texts)} texts, median {med:.3f} s = "
          f"{len(texts) / med:.1f} inputs/s")


if __name__ == "__main__":
    main()
