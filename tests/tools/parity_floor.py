#!/usr/bin/env python3
"""How close can a bf16-KV-cache engine get to a float64 Llama on random weights?

The GPU parity check (scripts/device/hf_reference.py + `rinfer parity`) compares recipes-infer
with PyTorch/transformers on random-weight checkpoints and asks for top-1 agreement >= 99% over
512 teacher-forced positions. Random weights give flat next-token distributions whose top two
logits are often very close, so rounding alone flips some of them. This script measures that
floor for the SmolLM2 and Llama-3-8B shapes with an independent numpy model (written from the architecture, not
from our C++ code; transformers' initialization: every Linear and the embedding N(0, 0.02), the
norms 1, SmolLM2's output tied to the embedding, the weights rounded to bf16 as the checkpoint
is), run four ways over the same random token ids, layer by layer (each layer's weights drawn
once, from a stream of their own):

  ref      float64 throughout (the reference)
  kv_bf16  float32 throughout, K and V rounded to bf16 before attention (a bf16 KV cache, the
           rest exact: what the decode path's f32 activations amount to)
  prefill  kv_bf16, and the inputs of every matrix product rounded to bf16 (the normed x, the
           attention output, the SwiGLU output, the final norm) and Q and the probabilities in
           bf16 (FlashAttention-style tensor-core attention): the GPU prefill's numerics
  fp32     float32 throughout (the accumulation-order noise alone)

and writes, per variant against ref: relative L2 of the logits, top-1 agreement, and how many
rows have their top two reference logits within 1e-3 of each other.

  python3 tests/tools/parity_floor.py [--shape smollm2|llama3-8b] [--tokens 512] [--seed 0]
                                      [--out FILE.json]

Needs numpy only: seconds for SmolLM2, minutes and about 3 GB for Llama-3-8B at 128 tokens.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

SHAPES = {
    "smollm2": dict(hidden=576, ffn=1536, layers=30, heads=9, kv_heads=3, vocab=49152,
                    rope_theta=100000.0, eps=1e-5, tied=True),
    "llama3-8b": dict(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8, vocab=32000,
                      rope_theta=500000.0, eps=1e-5, tied=False),
}
VARIANTS = ("ref", "fp32", "kv_bf16", "prefill")


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bf16 (ties to even), returned as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def lin(rng: np.random.Generator, n_out: int, n_in: int) -> np.ndarray:
    """A Linear's weight as transformers initializes it (N(0, 0.02)), rounded to bf16."""
    return bf16(rng.normal(0.0, 0.02, size=(n_out, n_in)).astype(np.float32))


def layer_weights(s: dict, seed: int, il: int) -> dict:
    """Layer il's weights, drawn from their own stream (the same for every variant)."""
    rng = np.random.default_rng([seed, il])
    e, f, hd = s["hidden"], s["ffn"], s["hidden"] // s["heads"]
    return dict(q=lin(rng, s["heads"] * hd, e), k=lin(rng, s["kv_heads"] * hd, e),
                v=lin(rng, s["kv_heads"] * hd, e), o=lin(rng, e, s["heads"] * hd),
                gate=lin(rng, f, e), up=lin(rng, f, e), down=lin(rng, e, f))


def rope_neox(x: np.ndarray, theta: float) -> np.ndarray:
    """x [n, heads, d]: transformers' rotate_half pairing (dim i with i + d/2)."""
    n, _, d = x.shape
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :].astype(x.dtype)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :].astype(x.dtype)
    rot = np.concatenate([-x[:, :, d // 2:], x[:, :, :d // 2]], axis=-1)
    return x * cos + rot * sin


class Numerics:
    """One variant's arithmetic: its float type and what it rounds to bf16."""

    def __init__(self, variant: str, eps: float):
        self.dt = np.float64 if variant == "ref" else np.float32
        ident = lambda t: t  # noqa: E731
        self.gemm_in = bf16 if variant == "prefill" else ident
        self.kv = bf16 if variant in ("kv_bf16", "prefill") else ident
        self.qp = bf16 if variant == "prefill" else ident
        self.eps = eps

    def norm(self, x: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)

    def mm(self, x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        return self.gemm_in(x).astype(self.dt) @ wt.astype(self.dt).T


def block(s: dict, c: Numerics, lw: dict, x: np.ndarray) -> np.ndarray:
    """One pre-norm decoder layer (attention, SwiGLU MLP) over x [n, hidden], causal."""
    hd, h, hk = s["hidden"] // s["heads"], s["heads"], s["kv_heads"]
    n = x.shape[0]
    mask = np.triu(np.full((n, n), -np.inf, dtype=c.dt), k=1)
    a = c.norm(x)
    q = rope_neox(c.mm(a, lw["q"]).reshape(n, h, hd), s["rope_theta"])
    k = rope_neox(c.mm(a, lw["k"]).reshape(n, hk, hd), s["rope_theta"])
    v = c.mm(a, lw["v"]).reshape(n, hk, hd)
    k, v, q = c.kv(k).astype(c.dt), c.kv(v).astype(c.dt), c.qp(q).astype(c.dt)
    out = np.empty((n, h, hd), dtype=c.dt)
    for head in range(h):
        g = head // (h // hk)
        sc = (q[:, head, :] @ k[:, g, :].T) / np.sqrt(hd) + mask
        p = np.exp(sc - sc.max(axis=-1, keepdims=True))
        out[:, head, :] = (c.qp(p).astype(c.dt) @ v[:, g, :]) / p.sum(axis=-1, keepdims=True)
    x = x + c.mm(out.reshape(n, h * hd), lw["o"])
    a = c.norm(x)
    gt, up = c.mm(a, lw["gate"]), c.mm(a, lw["up"])
    return x + c.mm(gt / (1.0 + np.exp(-gt)) * up, lw["down"])


def run(s: dict, seed: int, ids: np.ndarray) -> dict:
    """Every variant's logits [n, vocab] (float64), the layers' weights drawn once each."""
    erng = np.random.default_rng([seed, 1 << 20])
    embed = lin(erng, s["vocab"], s["hidden"])
    out_w = embed if s["tied"] else lin(erng, s["vocab"], s["hidden"])
    nums = {v: Numerics(v, s["eps"]) for v in VARIANTS}
    xs = {v: embed[ids].astype(nums[v].dt) for v in VARIANTS}
    for il in range(s["layers"]):
        lw = layer_weights(s, seed, il)
        for v in VARIANTS:
            xs[v] = block(s, nums[v], lw, xs[v])
    return {v: nums[v].mm(nums[v].norm(xs[v]), out_w).astype(np.float64) for v in VARIANTS}


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    return dict(rel_l2=float(np.linalg.norm(got - ref) / np.linalg.norm(ref)),
                top1_agreement=float(np.mean(ref.argmax(-1) == got.argmax(-1))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="smollm2", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    if not 2 <= args.tokens <= 8192:
        sys.exit("--tokens must be in [2, 8192]")
    s = SHAPES[args.shape]
    ids = np.random.default_rng([args.seed, 1 << 21]).integers(0, s["vocab"], size=args.tokens)
    logits = run(s, args.seed, ids)
    ref = logits["ref"]
    top2 = np.sort(ref, axis=-1)[:, -2:]
    close = float(np.mean(top2[:, 1] - top2[:, 0] < 1e-3))
    res = dict(shape=args.shape, n_tokens=args.tokens, seed=args.seed,
               logit_std=float(ref.std()), rows_top2_within_1e_3=close, variants={})
    for variant in VARIANTS[1:]:
        r = res["variants"][variant] = compare(ref, logits[variant])
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
