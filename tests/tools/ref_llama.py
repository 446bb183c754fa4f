#!/usr/bin/env python3
"""An independent reference for the Llama-family forward pass, used to check the C++ model.

Written from the architecture description (Llama: RMSNorm pre-norm blocks, rotary position
embeddings, grouped-query causal attention, SwiGLU MLP, optional tied output embedding; Qwen2
adds Q/K/V biases and rotates with the NeoX pairing), not from our C++ code. Weights come from
the GGUF file through the PyPI `gguf` package (`GGUFReader` + `gguf.quants.dequantize`, a numpy
port of ggml's dequantizers), and every product is computed in float64.

RoPE pairing: convert_hf_to_gguf.py permutes the Q and K rows of llama-architecture models so
that the rotation pairs adjacent dims (2i, 2i+1) ("normal" mode); qwen2 files keep the HF layout,
which pairs dim i with dim i + d/2 ("NeoX" mode).

Writes, for a fixed sequence of token ids:
  tests/data/llama/<name>_logits.json      ids, per-position top-20 ids and logits, metadata
  tests/data/llama/<name>_last_logits.f32  the full logits of the last position (little-endian)

With --make-tiny it also writes two tiny synthetic models (random weights, a few tens of KB)
that cover what SmolLM2 does not, and their full logits:
  tests/data/llama/tiny_qwen2.gguf    qwen2: NeoX RoPE, Q/K/V biases, separate output.weight,
                                      linear RoPE scaling (factor 2), Q8_0 / Q4_1 / f16 weights
  tests/data/llama/tiny_llama.gguf    llama: multi-query attention (1 kv head), partial
                                      rotation (rope.dimension_count 8 of head_dim 16), tied
                                      output, Q5_0 / f16 / f32 weights
  tests/data/llama/tiny_<arch>_logits.json / .f32   ids and logits [n_tokens, n_vocab]

Usage:
  python3 tests/tools/ref_llama.py [--model PATH] [--name smollm2] [--make-tiny]
The default model is $RINFER_MODEL_DIR (else ~/.cache/recipes-infer/models) /
smollm2-135m-instruct-q4_1.gguf. The output is deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf import quants

OUT_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "llama"
TOP_K = 20
LAST_TOP = 2048

# The token strings of the fixed prompt (looked up in the file's vocabulary, so the fixture
# needs no tokenizer): "The capital of France is Paris. It is known for its art, food and"
PROMPT_TOKENS = ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis", "ĠParis", ".", "ĠIt", "Ġis",
                 "Ġknown", "Ġfor", "Ġits", "Ġart", ",", "Ġfood", "Ġand"]


def default_model() -> str:
    d = os.environ.get("RINFER_MODEL_DIR")
    if not d:
        xdg = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
        d = os.path.join(xdg, "recipes-infer", "models")
    return os.path.join(d, "smollm2-135m-instruct-q4_1.gguf")


class Gguf:
    def __init__(self, path: str):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}

    def field(self, key: str, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def tensor(self, name: str) -> np.ndarray | None:
        t = self.tensors.get(name)
        if t is None:
            return None
        # dequantize() returns rows outermost: a weight [n_out, n_in].
        return quants.dequantize(t.data, t.tensor_type).astype(np.float64)

    def vocab(self) -> list[str]:
        return list(self.field("tokenizer.ggml.tokens"))


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, scale: float,
         neox: bool) -> np.ndarray:
    """x: [n_tokens, n_heads, head_dim]; rotates the first n_rot dims of every head."""
    out = x.copy()
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)  # [half]
    angle = (positions.astype(np.float64) * scale)[:, None] * inv_freq[None, :]  # [n, half]
    cos = np.cos(angle)[:, None, :]  # [n, 1, half]
    sin = np.sin(angle)[:, None, :]
    if neox:
        a, b = x[:, :, :half], x[:, :, half:n_rot]
        out[:, :, :half] = a * cos - b * sin
        out[:, :, half:n_rot] = a * sin + b * cos
    else:
        a, b = x[:, :, 0:n_rot:2], x[:, :, 1:n_rot:2]
        out[:, :, 0:n_rot:2] = a * cos - b * sin
        out[:, :, 1:n_rot:2] = a * sin + b * cos
    return out


def forward(g: Gguf, ids: list[int]) -> np.ndarray:
    arch = g.field("general.architecture")
    if arch not in ("llama", "qwen2", "mistral"):
        sys.exit(f"unsupported architecture {arch}")
    n_layer = int(g.field(f"{arch}.block_count"))
    n_embd = int(g.field(f"{arch}.embedding_length"))
    n_head = int(g.field(f"{arch}.attention.head_count"))
    n_head_kv = int(g.field(f"{arch}.attention.head_count_kv", n_head))
    head_dim = n_embd // n_head
    n_rot = int(g.field(f"{arch}.rope.dimension_count", head_dim))
    base = float(g.field(f"{arch}.rope.freq_base", 10000.0))
    scale = 1.0
    if g.field(f"{arch}.rope.scaling.type") == "linear":
        scale = 1.0 / float(g.field(f"{arch}.rope.scaling.factor", 1.0))
    eps = float(g.field(f"{arch}.attention.layer_norm_rms_epsilon"))
    neox = arch == "qwen2"

    n = len(ids)
    pos = np.arange(n)
    emb = g.tensor("token_embd.weight")  # [n_vocab, n_embd]
    x = emb[np.array(ids)]  # [n, n_embd]
    group = n_head // n_head_kv
    mask = np.triu(np.full((n, n), -np.inf), k=1)  # [n, n]: token i sees keys <= i

    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms_norm(x, g.tensor(p + "attn_norm.weight"), eps)  # [n, n_embd]
        q = h @ g.tensor(p + "attn_q.weight").T  # [n, n_head * head_dim]
        k = h @ g.tensor(p + "attn_k.weight").T  # [n, n_head_kv * head_dim]
        v = h @ g.tensor(p + "attn_v.weight").T
        for name, t in (("q", "attn_q.bias"), ("k", "attn_k.bias"), ("v", "attn_v.bias")):
            b = g.tensor(p + t)
            if b is not None:
                if name == "q":
                    q = q + b
                elif name == "k":
                    k = k + b
                else:
                    v = v + b
        q = rope(q.reshape(n, n_head, head_dim), pos, n_rot, base, scale, neox)
        k = rope(k.reshape(n, n_head_kv, head_dim), pos, n_rot, base, scale, neox)
        v = v.reshape(n, n_head_kv, head_dim)
        attn = np.empty((n, n_head, head_dim))
        for hh in range(n_head):
            kv = hh // group
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(head_dim) + mask  # [n, n]
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            attn[:, hh, :] = s @ v[:, kv, :]
        x = x + attn.reshape(n, n_head * head_dim) @ g.tensor(p + "attn_output.weight").T
        h = rms_norm(x, g.tensor(p + "ffn_norm.weight"), eps)
        gate = h @ g.tensor(p + "ffn_gate.weight").T  # [n, n_ff]
        up = h @ g.tensor(p + "ffn_up.weight").T
        act = gate / (1.0 + np.exp(-gate)) * up
        x = x + act @ g.tensor(p + "ffn_down.weight").T

    x = rms_norm(x, g.tensor("output_norm.weight"), eps)
    out = g.tensor("output.weight")
    if out is None:
        out = emb  # tied embeddings
    return x @ out.T  # [n, n_vocab]


# ---- tiny synthetic models -------------------------------------------------------------------

TINY_IDS = [1, 17, 42, 5, 88, 23, 23, 60, 3, 71, 9, 50]


def write_tiny(path: pathlib.Path, arch: str, rng: np.random.Generator) -> None:
    import gguf
    Q = gguf.GGMLQuantizationType
    n_embd, n_head, head_dim, n_layer, n_vocab = 64, 4, 16, 2, 96
    if arch == "qwen2":
        n_head_kv, n_ff, n_rot, mat_types = 2, 128, head_dim, (Q.Q8_0, Q.Q4_1)
    else:
        n_head_kv, n_ff, n_rot, mat_types = 1, 96, 8, (Q.Q5_0, Q.F16, Q.F32)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_block_count(n_layer)
    w.add_context_length(128)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(n_rot)
    w.add_vocab_size(n_vocab)
    if arch == "qwen2":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(2.0)

    count = [0]

    def add(name: str, shape: tuple[int, ...], qtype=None, scale: float = 0.2,
            offset: float = 0.0) -> None:
        data = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
        if qtype is None:
            qtype = mat_types[count[0] % len(mat_types)] if len(shape) == 2 else Q.F32
            count[0] += 1
        if qtype == Q.F32:
            w.add_tensor(name, data)
        elif qtype == Q.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    add("token_embd.weight", (n_vocab, n_embd), Q.F16, scale=1.0)
    add("output_norm.weight", (n_embd,), scale=0.1, offset=1.0)
    if arch == "qwen2":
        add("output.weight", (n_vocab, n_embd), Q.F16)
    for il in range(n_layer):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", (n_embd,), scale=0.1, offset=1.0)
        add(p + "attn_q.weight", (q_dim, n_embd))
        add(p + "attn_k.weight", (kv_dim, n_embd))
        add(p + "attn_v.weight", (kv_dim, n_embd))
        if arch == "qwen2":
            add(p + "attn_q.bias", (q_dim,), scale=0.5)
            add(p + "attn_k.bias", (kv_dim,), scale=0.5)
            add(p + "attn_v.bias", (kv_dim,), scale=0.5)
        add(p + "attn_output.weight", (n_embd, q_dim))
        add(p + "ffn_norm.weight", (n_embd,), scale=0.1, offset=1.0)
        add(p + "ffn_gate.weight", (n_ff, n_embd))
        add(p + "ffn_up.weight", (n_ff, n_embd))
        add(p + "ffn_down.weight", (n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for i, arch in enumerate(("qwen2", "llama")):
        path = OUT_DIR / f"tiny_{arch}.gguf"
        write_tiny(path, arch, np.random.default_rng(1234 + i))
        logits = forward(Gguf(str(path)), TINY_IDS)  # [n, n_vocab]
        meta = {
            "model": path.name,
            "generator": "tests/tools/ref_llama.py --make-tiny (numpy float64)",
            "ids": TINY_IDS,
            "n_vocab": int(logits.shape[1]),
            "logits_file": f"tiny_{arch}_logits.f32",
            "argmax": [int(np.argmax(r)) for r in logits],
        }
        (OUT_DIR / f"tiny_{arch}_logits.json").write_text(json.dumps(meta, indent=1) + "\n")
        logits.astype("<f4").tofile(OUT_DIR / f"tiny_{arch}_logits.f32")
        print(f"{path.name}: {path.stat().st_size} bytes, argmax {meta['argmax']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--name", default="smollm2")
    ap.add_argument("--make-tiny", action="store_true")
    args = ap.parse_args()
    if args.make_tiny:
        make_tiny()
    if not os.path.exists(args.model):
        sys.exit(f"model not found: {args.model} (run scripts/fetch-models.sh)")

    g = Gguf(args.model)
    vocab = g.vocab()
    ids = [vocab.index(t) for t in PROMPT_TOKENS]
    logits = forward(g, ids)  # [n, n_vocab] float64

    positions = []
    for row in logits:
        top = np.argsort(-row, kind="stable")[:TOP_K]
        positions.append({"ids": [int(i) for i in top],
                          "logits": [float(np.float32(row[i])) for i in top]})
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": os.path.basename(args.model),
        "generator": "tests/tools/ref_llama.py (numpy float64, gguf-py dequantization)",
        "ids": ids,
        "tokens": PROMPT_TOKENS,
        "n_vocab": int(logits.shape[1]),
        "top_k": TOP_K,
        "positions": positions,
        "last_logits_file": f"{args.name}_last_logits.f32",
    }
    if logits.shape[1] <= 65536:
        logits[-1].astype("<f4").tofile(OUT_DIR / f"{args.name}_last_logits.f32")
    else:
        # A large vocabulary (Qwen2: 151,936): the last row's LAST_TOP largest logits instead of
        # the whole row, to keep the fixture small; the test compares those entries.
        del meta["last_logits_file"]
        top = np.argsort(-logits[-1], kind="stable")[:LAST_TOP]
        meta["last_top"] = {"ids": [int(i) for i in top],
                            "logits": [float(np.float32(logits[-1][i])) for i in top]}
    (OUT_DIR / f"{args.name}_logits.json").write_text(json.dumps(meta, indent=1) + "\n")
    greedy = [vocab[p["ids"][0]] for p in positions]
    print("next-token argmax per position:", " ".join(greedy))


if __name__ == "__main__":
    main()
