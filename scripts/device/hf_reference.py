#!/usr/bin/env python3
"""Reference logits from PyTorch/transformers for `rinfer parity` (runs on the GPU machine).

Builds a random-weight LlamaForCausalLM of a real shape directly on the GPU, saves it as a
Hugging Face checkpoint (config.json + bf16 safetensors), draws random token ids and writes the
logits of one teacher-forced forward pass over them:

  OUT/config.json, OUT/model*.safetensors   the checkpoint (bf16), loaded by rinfer from OUT
  OUT/tokens.i32                            int32 little-endian [n_tokens]
  OUT/logits_fp32.f32                       f32 [n_tokens, n_vocab]: the bf16 weights upcast to
                                            float32, computed in float32 (TF32 off): the accurate
                                            reference
  OUT/logits_bf16.f32                       f32 [n_tokens, n_vocab]: transformers in bf16, the
                                            usual deployment numerics
  OUT/reference.json                        shape, versions, attention implementation, and how
                                            bf16 transformers agrees with fp32 (the noise floor)

  python3 hf_reference.py --shape smollm2|llama3-8b --out DIR --tokens 512 --seed 0

Attention: attn_implementation="eager" by default (--attn sdpa to change; printed and recorded),
for both passes: plain matmul + softmax, in float32 for the reference.
Dependencies: torch (CUDA), transformers, numpy. No network access is needed.

Note on top-1 agreement: with random weights the next-token distributions are flat and the top
two logits are often close, so even bf16 transformers vs fp32 disagrees on some rows (untied
shapes especially). The noise floor printed here is what any bf16 engine can be expected to
reach; set `rinfer parity --min-top1` from it.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

SHAPES = {
    # SmolLM2-135M's shape.
    "smollm2": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        tie_word_embeddings=True,
        rope_theta=100000.0,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
    ),
    # Llama-3-8B's shape (with a 32000-token vocabulary).
    "llama3-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=32000,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
    ),
}


def log(msg):
    print(f"[hf_reference {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def compare(ref, test):
    """rel L2, max |diff|, top-1 agreement, mean/max KL(ref || test) in float64 (as rinfer)."""
    ref = ref.to(torch.float64)
    test = test.to(torch.float64)
    diff = test - ref
    rel_l2 = (diff.norm() / ref.norm()).item()
    max_abs = diff.abs().max().item()
    top1 = (ref.argmax(dim=-1) == test.argmax(dim=-1)).to(torch.float64).mean().item()
    lp = torch.log_softmax(ref, dim=-1)
    lq = torch.log_softmax(test, dim=-1)
    kl = (lp.exp() * (lp - lq)).sum(dim=-1).clamp_min(0)
    return dict(rel_l2=rel_l2, max_abs=max_abs, top1_agreement=top1,
                mean_kl=kl.mean().item(), max_kl=kl.max().item())


def write_f32(path, logits):
    arr = logits.detach().to(torch.float32).cpu().numpy()
    np.ascontiguousarray(arr, dtype="<f4").tofile(path)


def restore_rope_fp32(model, shape):
    """model.to(dtype) casts every floating buffer, RoPE's inv_freq included; from_pretrained
    keeps it float32. Recompute it in float32 (default RoPE: theta^(-2i/d)) after each cast so
    both passes rotate as deployed transformers does. Returns how many modules were fixed."""
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    inv_freq = 1.0 / (shape["rope_theta"] ** (
        torch.arange(0, head_dim, 2, dtype=torch.int64, device="cuda").to(torch.float32) /
        head_dim))
    fixed = 0
    for module in model.modules():
        for name in ("inv_freq", "original_inv_freq"):
            t = getattr(module, name, None)
            if isinstance(t, torch.Tensor) and t.shape == inv_freq.shape:
                setattr(module, name, inv_freq.clone())
                fixed += 1
    return fixed


def forward_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids[None, :], use_cache=False)
    return out.logits[0].to(torch.float32)  # [n_tokens, n_vocab]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--tokens", type=int, default=512, help="number of token ids")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"],
                    help="transformers attention implementation for both passes")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("hf_reference.py: no CUDA device (this script runs on the GPU machine)")
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = SHAPES[args.shape]
    if not 1 <= args.tokens <= shape["max_position_embeddings"]:
        sys.exit(f"--tokens {args.tokens} must be in [1, {shape['max_position_embeddings']}]")
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda")
    # The fp32 reference must be real fp32: no TF32 in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    config = LlamaConfig(hidden_act="silu", attention_bias=False, mlp_bias=False,
                         rope_scaling=None, attn_implementation=args.attn, **shape)
    # transformers 5 keeps RoPE settings in config.rope_parameters: make sure theta landed.
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and rp.get("rope_theta") != shape["rope_theta"]:
        rp["rope_theta"] = shape["rope_theta"]
        rp.setdefault("rope_type", "default")
    log(f"{args.shape}: building a random LlamaForCausalLM on {torch.cuda.get_device_name(0)} "
        f"(torch {torch.__version__}, transformers {transformers.__version__}, "
        f"attention {args.attn})")
    torch.manual_seed(args.seed)
    t0 = time.time()
    with dev:
        model = LlamaForCausalLM(config)  # float32 init on the GPU (deterministic per seed)
    model = model.to(torch.bfloat16).eval()  # the bf16 weights are the model
    if restore_rope_fp32(model, shape) == 0:
        log("warning: no RoPE inv_freq buffer found to keep in float32")
    n_params = sum(p.numel() for p in model.parameters())
    attn_used = getattr(model.config, "_attn_implementation", args.attn)
    log(f"{n_params / 1e9:.3f} B parameters in bf16, attention '{attn_used}' "
        f"({time.time() - t0:.1f} s)")

    t0 = time.time()
    model.save_pretrained(args.out, safe_serialization=True)
    log(f"saved the checkpoint to {args.out} ({time.time() - t0:.1f} s)")

    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    ids = torch.randint(0, shape["vocab_size"], (args.tokens,), generator=gen, dtype=torch.int64)
    np.ascontiguousarray(ids.numpy(), dtype="<i4").tofile(os.path.join(args.out, "tokens.i32"))
    ids = ids.to(dev)

    # bf16: transformers as usually deployed.
    t0 = time.time()
    logits_bf16 = forward_logits(model, ids)
    torch.cuda.synchronize()
    log(f"bf16 forward of {args.tokens} tokens ({time.time() - t0:.2f} s)")
    write_f32(os.path.join(args.out, "logits_bf16.f32"), logits_bf16)

    # fp32: the same (bf16-valued) weights upcast, every op in float32. Llama-3-8B is 32 GB in
    # fp32, which fits next to the activations on a 141 GB H200.
    model = model.to(torch.float32)
    restore_rope_fp32(model, shape)
    t0 = time.time()
    with torch.autocast(device_type="cuda", enabled=False):
        logits_fp32 = forward_logits(model, ids)
    torch.cuda.synchronize()
    log(f"fp32 forward ({time.time() - t0:.2f} s), peak GPU memory "
        f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    write_f32(os.path.join(args.out, "logits_fp32.f32"), logits_fp32)

    floor = compare(logits_fp32, logits_bf16)
    log("noise floor, bf16 transformers vs fp32: "
        f"rel L2 {floor['rel_l2']:.4e}, top-1 {floor['top1_agreement']:.4f}, "
        f"mean KL {floor['mean_kl']:.3e}, max KL {floor['max_kl']:.3e}, "
        f"max |diff| {floor['max_abs']:.3e}")
    summary = dict(
        shape=args.shape, config=shape, n_tokens=args.tokens, n_vocab=shape["vocab_size"],
        seed=args.seed, attn_implementation=attn_used, torch=torch.__version__,
        transformers=transformers.__version__, device=torch.cuda.get_device_name(0),
        weights_dtype="bfloat16", n_params=n_params,
        files=dict(tokens="tokens.i32", logits_fp32="logits_fp32.f32",
                   logits_bf16="logits_bf16.f32"),
        noise_floor_bf16_vs_fp32=floor,
    )
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(dict(shape=args.shape, noise_floor_bf16_vs_fp32=floor)))


if __name__ == "__main__":
    main()
