#!/usr/bin/env python3
"""An independent numpy float64 reference for the Gemma 3 forward pass (GGUF arch gemma3).

Written from the architecture description, not from our C++ code: embeddings scaled by
sqrt(n_embd); per layer RMSNorm before and after attention and before and after the MLP
(attn_norm, post_attention_norm, ffn_norm, post_ffw_norm); per-head RMSNorm of Q and K
(attn_q_norm, attn_k_norm); NeoX RoPE with base rope.freq_base on global layers and 10000 on
local (sliding-window) layers; every 6th layer (il % 6 == 5) global, the rest attending to the
last sliding_window positions only; attention scale 1/sqrt(head_dim) (= query_pre_attn_scalar
for 270M); GeGLU with the tanh GELU; final norm; tied output.

Norm weights: Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter already adds the 1
when it writes the GGUF, so the stored weights are used as they are. --check-norm-offset
runs the forward both ways and prints the next-token argmax of each: only "as stored" gives
sensible text.

Writes, for a fixed 16-token prompt (BOS + "The capital of France is Paris. It is known for its
art, food"):
  tests/data/gemma3/gemma3_logits.json      ids, per-position top-20 ids and logits, metadata
  tests/data/gemma3/gemma3_last_logits.f32  the full logits of the last position (little-endian)

With --layers: the residual stream after the embedding scale and after every layer for the
first 64 tokens of the GPL-3 text (LAYER_IDS), in tests/data/gemma3/gemma3_layers.{json,f24}.

With --make-tiny: a tiny synthetic gemma3 model (window 4, crossed by its 14 ids) and its full
logits in tests/data/gemma3/tiny_gemma3*, so CI checks the sample without the real model.

Usage: python3 tests/tools/ref_gemma3.py [--model PATH] [--check-norm-offset] [--make-tiny]
       [--layers]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ref_llama import Gguf, rope  # noqa: E402

OUT_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "gemma3"
TOP_K = 20
PROMPT_TOKENS = ["<bos>", "The", "▁capital", "▁of", "▁France", "▁is", "▁Paris", ".", "▁It",
                 "▁is", "▁known", "▁for", "▁its", "▁art", ",", "▁food"]
SWA_PATTERN = 6
SWA_BASE = 10000.0


def default_model() -> str:
    d = os.environ.get("RINFER_MODEL_DIR")
    if not d:
        xdg = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
        d = os.path.join(xdg, "recipes-infer", "models")
    return os.path.join(d, "gemma3-270m-q4_k_m.gguf")


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def embed_rows(g: Gguf, ids: list[int]) -> np.ndarray:
    """Rows `ids` of token_embd.weight, dequantizing only those rows: [len(ids), n_embd]."""
    from gguf import quants
    t = g.tensors["token_embd.weight"]
    return quants.dequantize(t.data[np.array(ids)], t.tensor_type).astype(np.float64)


def forward(g: Gguf, ids: list[int], norm_offset: float = 0.0,
            hidden: list[np.ndarray] | None = None, logits: bool = True) -> np.ndarray | None:
    """Logits [n, n_vocab] of every position. hidden: when a list, receives the residual stream
    [n, n_embd] after the embedding scale and after every layer. logits=False stops after the
    last layer (returns None) without dequantizing the whole embedding matrix."""
    a = "gemma3"
    n_layer = int(g.field(f"{a}.block_count"))
    n_embd = int(g.field(f"{a}.embedding_length"))
    n_head = int(g.field(f"{a}.attention.head_count"))
    n_head_kv = int(g.field(f"{a}.attention.head_count_kv", n_head))
    head_dim = int(g.field(f"{a}.attention.key_length"))
    base = float(g.field(f"{a}.rope.freq_base"))
    eps = float(g.field(f"{a}.attention.layer_norm_rms_epsilon"))
    window = int(g.field(f"{a}.attention.sliding_window"))

    def nw(name: str) -> np.ndarray:
        return g.tensor(name) + norm_offset

    n = len(ids)
    pos = np.arange(n)
    emb = g.tensor("token_embd.weight") if logits else None  # [n_vocab, n_embd]
    x = (emb[np.array(ids)] if logits else embed_rows(g, ids)) * np.sqrt(n_embd)  # [n, n_embd]
    if hidden is not None:
        hidden.append(x.copy())
    group = n_head // n_head_kv
    dist = pos[:, None] - pos[None, :]  # [n, n] query - key
    for il in range(n_layer):
        p = f"blk.{il}."
        is_global = il % SWA_PATTERN == SWA_PATTERN - 1
        visible = dist >= 0 if is_global else (dist >= 0) & (dist < window)
        mask = np.where(visible, 0.0, -np.inf)
        lbase = base if is_global else SWA_BASE
        h = rms_norm(x, nw(p + "attn_norm.weight"), eps)
        q = (h @ g.tensor(p + "attn_q.weight").T).reshape(n, n_head, head_dim)
        k = (h @ g.tensor(p + "attn_k.weight").T).reshape(n, n_head_kv, head_dim)
        v = (h @ g.tensor(p + "attn_v.weight").T).reshape(n, n_head_kv, head_dim)
        q = rms_norm(q, nw(p + "attn_q_norm.weight"), eps)
        k = rms_norm(k, nw(p + "attn_k_norm.weight"), eps)
        q = rope(q, pos, head_dim, lbase, 1.0, True)
        k = rope(k, pos, head_dim, lbase, 1.0, True)
        attn = np.empty((n, n_head, head_dim))
        for hh in range(n_head):
            kv = hh // group
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(head_dim) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            attn[:, hh, :] = s @ v[:, kv, :]
        o = attn.reshape(n, n_head * head_dim) @ g.tensor(p + "attn_output.weight").T
        x = x + rms_norm(o, nw(p + "post_attention_norm.weight"), eps)
        h = rms_norm(x, nw(p + "ffn_norm.weight"), eps)
        gate = h @ g.tensor(p + "ffn_gate.weight").T
        up = h @ g.tensor(p + "ffn_up.weight").T
        f = (gelu_tanh(gate) * up) @ g.tensor(p + "ffn_down.weight").T
        x = x + rms_norm(f, nw(p + "post_ffw_norm.weight"), eps)
        if hidden is not None:
            hidden.append(x.copy())
    if not logits:
        return None
    x = rms_norm(x, nw("output_norm.weight"), eps)
    return x @ emb.T  # tied output [n, n_vocab]


TINY_IDS = [2, 17, 42, 5, 88, 23, 23, 60, 3, 71, 9, 50, 11, 64]

# The first 64 ids of the first 420 bytes of /usr/share/common-licenses/GPL-3 ("GNU GENERAL
# PUBLIC LICENSE / Version 3, 29 June 2007 / Copyright (C) 2007 Free Software Foundation ..."),
# from our tokenizer: `rinfer tokenize gemma3-270m-q4_k_m --ids -` (BOS first).
LAYER_IDS = [
    2, 156, 204930, 53642, 43956, 86749, 107, 159, 9038, 236743, 236800, 236764, 236743, 236778,
    236819, 5142, 236743, 236778, 236771, 236771, 236832, 108, 16247, 568, 236780, 236768, 236743,
    236778, 236771, 236771, 236832, 9617, 15435, 11032, 236764, 5295, 236761, 655, 2574, 1411,
    8097, 236760, 236761, 2187, 5336, 107, 26335, 563, 18345, 531, 4865, 532, 30016, 188495,
    16258, 107, 529, 672, 10945, 2354, 236764, 840, 9199, 625]


def f24_round(x: np.ndarray) -> np.ndarray:
    """x as f32 rounded to nearest (ties away) at 16 significant bits: uint32 with low byte 0."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x80) & 0xFFFFFF00  # the exponent carries over correctly; no inf/nan here
    return u.astype("<u4")


def write_layers(g: Gguf) -> None:
    """tests/data/gemma3/gemma3_layers.{json,f24}: the residual stream after the embedding scale
    and after each of the n_layer blocks, for the 64 LAYER_IDS: [n_layer + 1, 64, n_embd], each
    value an f32 rounded to its top 3 bytes (sign, exponent, 15 mantissa bits: relative error
    <= 2^-16), stored as those 3 little-endian bytes."""
    hidden: list[np.ndarray] = []
    forward(g, LAYER_IDS, hidden=hidden, logits=False)
    h = np.stack(hidden)  # [n_layer + 1, n, n_embd] float64
    u = f24_round(h.astype(np.float32))
    raw = u.view(np.uint8).reshape(-1, 4)[:, 1:4]  # little-endian: drop byte 0
    (OUT_DIR / "gemma3_layers.f24").write_bytes(raw.tobytes())
    stored = u.view("<f4").astype(np.float64)
    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))
    meta = {
        "model": "gemma3-270m-q4_k_m.gguf",
        "generator": "tests/tools/ref_gemma3.py --layers (numpy float64, gguf-py dequantization)",
        "ids": LAYER_IDS,
        "n_states": int(h.shape[0]),
        "n_tokens": int(h.shape[1]),
        "n_embd": int(h.shape[2]),
        "states": "state 0: embeddings * sqrt(n_embd); state l + 1: after block l",
        "file": "gemma3_layers.f24",
        "encoding": "f32 rounded to nearest at 16 significant bits, stored as its 3 high "
                    "little-endian bytes (byte 0, always 0, dropped), [n_states, n_tokens, n_embd]",
        "storage_rel_l2": [rel(stored[i], h[i]) for i in range(h.shape[0])],
        "rms": [float(np.sqrt(np.mean(h[i] ** 2))) for i in range(h.shape[0])],
        "max_abs": [float(np.abs(h[i]).max()) for i in range(h.shape[0])],
    }
    (OUT_DIR / "gemma3_layers.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"gemma3_layers.f24: {raw.size} bytes; storage rel L2 max "
          f"{max(meta['storage_rel_l2']):.2g}; max |x| per state {meta['max_abs']}")


def make_tiny() -> None:
    """tests/data/gemma3/tiny_gemma3.gguf: 6 layers (5 local with sliding_window 4, layer 5
    global), 2 heads / 1 KV head of 16, Q8_0 / Q5_0 / f16 / f32 weights, and its logits for the
    14 TINY_IDS (tiny_gemma3_logits.json / .f32 [14, n_vocab]): the window is crossed."""
    import gguf
    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(4321)
    n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, n_vocab = 32, 2, 1, 16, 64, 6, 96
    path = OUT_DIR / "tiny_gemma3.gguf"
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("tiny-gemma3")
    w.add_block_count(n_layer)
    w.add_context_length(128)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_sliding_window(4)
    w.add_vocab_size(n_vocab)
    mats = (Q.Q8_0, Q.Q5_0, Q.F16)
    count = [0]

    def add(name, shape, scale=0.2, offset=0.0, qtype=None):
        data = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
        if qtype is None:
            qtype = mats[count[0] % len(mats)] if len(shape) == 2 else Q.F32
            count[0] += 1
        if qtype == Q.F32:
            w.add_tensor(name, data)
        elif qtype == Q.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    add("token_embd.weight", (n_vocab, n_embd), scale=0.1, qtype=Q.Q8_0)
    add("output_norm.weight", (n_embd,), scale=0.1, offset=1.0)
    for il in range(n_layer):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", (n_embd,), scale=0.1, offset=1.0)
        add(p + "attn_q.weight", (n_head * head_dim, n_embd))
        add(p + "attn_k.weight", (n_head_kv * head_dim, n_embd))
        add(p + "attn_v.weight", (n_head_kv * head_dim, n_embd))
        add(p + "attn_q_norm.weight", (head_dim,), scale=0.1, offset=1.0)
        add(p + "attn_k_norm.weight", (head_dim,), scale=0.1, offset=1.0)
        add(p + "attn_output.weight", (n_embd, n_head * head_dim))
        add(p + "post_attention_norm.weight", (n_embd,), scale=0.1, offset=1.0)
        add(p + "ffn_norm.weight", (n_embd,), scale=0.1, offset=1.0)
        add(p + "ffn_gate.weight", (n_ff, n_embd))
        add(p + "ffn_up.weight", (n_ff, n_embd))
        add(p + "ffn_down.weight", (n_embd, n_ff))
        add(p + "post_ffw_norm.weight", (n_embd,), scale=0.1, offset=1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    logits = forward(Gguf(str(path)), TINY_IDS)  # [n, n_vocab]
    meta = {
        "model": path.name,
        "generator": "tests/tools/ref_gemma3.py --make-tiny (numpy float64)",
        "ids": TINY_IDS,
        "n_vocab": int(logits.shape[1]),
        "logits_file": "tiny_gemma3_logits.f32",
        "argmax": [int(np.argmax(r)) for r in logits],
    }
    (OUT_DIR / "tiny_gemma3_logits.json").write_text(json.dumps(meta, indent=1) + "\n")
    logits.astype("<f4").tofile(OUT_DIR / "tiny_gemma3_logits.f32")
    print(f"{path.name}: {path.stat().st_size} bytes, argmax {meta['argmax']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--check-norm-offset", action="store_true")
    ap.add_argument("--make-tiny", action="store_true",
                    help="write the tiny synthetic gemma3 model and its logits, then exit")
    ap.add_argument("--layers", action="store_true",
                    help="write the per-layer hidden states of the 64 LAYER_IDS, then exit")
    args = ap.parse_args()
    if args.make_tiny:
        make_tiny()
        return
    if not os.path.exists(args.model):
        sys.exit(f"model not found: {args.model} (run scripts/fetch-models.sh)")
    g = Gguf(args.model)
    if args.layers:
        write_layers(g)
        return
    vocab = g.vocab()
    ids = [vocab.index(t) for t in PROMPT_TOKENS]
    if args.check_norm_offset:
        for off in (0.0, 1.0):
            lg = forward(g, ids, off)
            print(f"norm weights + {off}:", " ".join(vocab[int(np.argmax(r))] for r in lg))
        return
    logits = forward(g, ids)  # [n, n_vocab] float64
    positions = []
    for row in logits:
        top = np.argsort(-row, kind="stable")[:TOP_K]
        positions.append({"ids": [int(i) for i in top],
                          "logits": [float(np.float32(row[i])) for i in top]})
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": os.path.basename(args.model),
        "generator": "tests/tools/ref_gemma3.py (numpy float64, gguf-py dequantization)",
        "ids": ids,
        "tokens": PROMPT_TOKENS,
        "n_vocab": int(logits.shape[1]),
        "top_k": TOP_K,
        "positions": positions,
        "last_logits_file": "gemma3_last_logits.f32",
    }
    (OUT_DIR / "gemma3_logits.json").write_text(json.dumps(meta, indent=1) + "\n")
    logits[-1].astype("<f4").tofile(OUT_DIR / "gemma3_last_logits.f32")
    print("next-token argmax per position:", " ".join(vocab[p["ids"][0]] for p in positions))


if __name__ == "__main__":
    main()
