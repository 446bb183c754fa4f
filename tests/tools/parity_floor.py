#!/usr/bin/env python3
"""How close can a bf16-KV-cache engine get to a float64 Llama on random weights?

The GPU parity check (scripts/device/hf_reference.py + `rinfer parity`) compares recipes-infer
with PyTorch/transformers on random-weight checkpoints and asks for top-1 agreement >= 99% over
512 teacher-forced positions. Random weights give flat next-token distributions whose top two
logits are often very close, so rounding alone flips some of them. This script measures that
floor for the SmolLM2 shape with an independent numpy model (written from the architecture, not
from our C++ code; transformers' initialization: every Linear and the embedding N(0, 0.02), the
norms 1, the output tied to the embedding, the weights rounded to bf16 as the checkpoint is),
run four ways over the same random token ids:

  ref      float64 throughout (the reference)
  kv_bf16  float32 throughout, K and V rounded to bf16 before attention (a bf16 KV cache, the
           rest exact: what the decode path's f32 activations amount to)
  prefill  kv_bf16, and the inputs of every matrix product rounded to bf16 (the normed x, the
           attention output, the SwiGLU output, the final norm) and Q and the probabilities in
           bf16 (FlashAttention-style tensor-core attention): the GPU prefill's numerics
  fp32     float32 throughout (the accumulation-order noise alone)

and writes, per variant against ref: relative L2 of the logits, top-1 agreement, and how many
rows have their top two reference logits within 1e-3 of each other.

  python3 tests/tools/parity_floor.py [--tokens 512] [--seed 0] [--out FILE.json]

Needs numpy only (about a minute on two cores).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

SMOLLM2 = dict(hidden=576, ffn=1536, layers=30, heads=9, kv_heads=3, vocab=49152,
               rope_theta=100000.0, eps=1e-5)


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bf16 (ties to even), returned as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def make_weights(s: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    e, f, hd = s["hidden"], s["ffn"], s["hidden"] // s["heads"]

    def lin(n_out: int, n_in: int) -> np.ndarray:
        return bf16(rng.normal(0.0, 0.02, size=(n_out, n_in)).astype(np.float32))

    w = {"embed": lin(s["vocab"], e), "layers": []}
    for _ in range(s["layers"]):
        w["layers"].append(dict(q=lin(s["heads"] * hd, e), k=lin(s["kv_heads"] * hd, e),
                                v=lin(s["kv_heads"] * hd, e), o=lin(e, s["heads"] * hd),
                                gate=lin(f, e), up=lin(f, e), down=lin(e, f)))
    return w


def rope_neox(x: np.ndarray, theta: float) -> np.ndarray:
    """x [n, heads, d]: transformers' rotate_half pairing (dim i with i + d/2)."""
    n, _, d = x.shape
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :].astype(x.dtype)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :].astype(x.dtype)
    rot = np.concatenate([-x[:, :, d // 2:], x[:, :, :d // 2]], axis=-1)
    return x * cos + rot * sin


def forward(s: dict, w: dict, ids: np.ndarray, variant: str) -> np.ndarray:
    dt = np.float64 if variant == "ref" else np.float32
    gemm_in = bf16 if variant == "prefill" else (lambda t: t)
    kv_round = bf16 if variant in ("kv_bf16", "prefill") else (lambda t: t)
    qp_round = bf16 if variant == "prefill" else (lambda t: t)
    e, hd, h, hk = s["hidden"], s["hidden"] // s["heads"], s["heads"], s["kv_heads"]
    n = len(ids)

    def norm(x: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + s["eps"])

    def mm(x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        return gemm_in(x).astype(dt) @ wt.astype(dt).T

    mask = np.triu(np.full((n, n), -np.inf, dtype=dt), k=1)
    x = w["embed"][ids].astype(dt)
    for lw in w["layers"]:
        a = norm(x)
        q = rope_neox(mm(a, lw["q"]).reshape(n, h, hd), s["rope_theta"])
        k = rope_neox(mm(a, lw["k"]).reshape(n, hk, hd), s["rope_theta"])
        v = mm(a, lw["v"]).reshape(n, hk, hd)
        k, v = kv_round(k).astype(dt), kv_round(v).astype(dt)
        q = qp_round(q).astype(dt)
        out = np.empty((n, h, hd), dtype=dt)
        for head in range(h):
            g = head // (h // hk)
            sc = (q[:, head, :] @ k[:, g, :].T) / np.sqrt(hd) + mask
            p = np.exp(sc - sc.max(axis=-1, keepdims=True))
            l = p.sum(axis=-1, keepdims=True)
            out[:, head, :] = (qp_round(p).astype(dt) @ v[:, g, :]) / l
        x = x + mm(out.reshape(n, h * hd), lw["o"])
        a = norm(x)
        gt, up = mm(a, lw["gate"]), mm(a, lw["up"])
        x = x + mm(gt / (1.0 + np.exp(-gt)) * up, lw["down"])
    return mm(norm(x), w["embed"]).astype(np.float64)


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    return dict(rel_l2=float(np.linalg.norm(got - ref) / np.linalg.norm(ref)),
                top1_agreement=float(np.mean(ref.argmax(-1) == got.argmax(-1))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    if not 2 <= args.tokens <= 8192:
        sys.exit("--tokens must be in [2, 8192]")
    s = SMOLLM2
    w = make_weights(s, args.seed)
    ids = np.random.default_rng(args.seed + 1).integers(0, s["vocab"], size=args.tokens)
    ref = forward(s, w, ids, "ref")
    top2 = np.sort(ref, axis=-1)[:, -2:]
    close = float(np.mean(top2[:, 1] - top2[:, 0] < 1e-3))
    res = dict(shape="smollm2", n_tokens=args.tokens, seed=args.seed,
               logit_std=float(ref.std()), rows_top2_within_1e_3=close, variants={})
    for variant in ("fp32", "kv_bf16", "prefill"):
        res["variants"][variant] = compare(ref, forward(s, w, ids, variant))
        r = res["variants"][variant]
        print(f"{variant:8s} rel L2 {r['rel_l2']:.3e}  top-1 {r['top1_agreement']:.4f}")
    print(f"logit std {res['logit_std']:.3f}; rows whose top two logits are within 1e-3: "
          f"{close:.4f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
