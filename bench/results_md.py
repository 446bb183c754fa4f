#!/usr/bin/env python3
"""Writes docs/results.md, the strategy table of issue 41, from the JSON in bench/results/.

Each row sets one strategy's variant against the same recipe without it, both measured in one
run of `rinfer bench` (or `llm_cuda_bench`), and reads from the JSON: per-token decode latency,
decode throughput, peak memory, and the precision the run measured between the two. Beside it, the
range commonly claimed for the strategy, marked confirmed where every measured figure of the row
falls in it or beyond it in the strategy's favour. Rows whose measurement does not exist yet are
listed as such, never filled by hand.

  python3 bench/results_md.py            # rewrite docs/results.md
  python3 bench/results_md.py --check    # exit 1 when docs/results.md differs (CI)
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
OUT = os.path.join(ROOT, "docs", "results.md")

# The ranges commonly claimed: latency reduction, throughput gain, memory saved (fractions,
# a gain as a factor). None: no claim.
CLAIMS = {
    "kv": ("40-60% lower latency, 2-3x throughput, 30% less memory", (0.40, 0.60), (2, 3),
           (0.30, 0.30)),
    "fusion": ("15-25% lower latency, 1.2-1.5x throughput, 10% less memory", (0.15, 0.25),
               (1.2, 1.5), (0.10, 0.10)),
    "int8": ("20-30% lower latency, 1.5-2x throughput, 50% less memory", (0.20, 0.30), (1.5, 2),
             (0.50, 0.50)),
}

# (strategy, model and machine, JSON under bench/results, variant without, variant with, claim)
BENCH_ROWS = [
    ("KV cache", "SmolLM2-135M Q4_1, 2-core EPYC", "cpu-2core/smollm2-135m.json", "no-kv-cache",
     "optimized", "kv"),
    ("Operator fusion (SwiGLU, merged QKV)", "SmolLM2-135M Q4_1, 2-core EPYC",
     "cpu-2core/smollm2-135m.json", "unfused", "optimized", "fusion"),
    ("Operator fusion (attention, residual+norm, SwiGLU, QKV)", "SmolLM2-135M Q4_1, H200",
     "h200/smollm2-135m.json", "cuda-unfused", "cuda", "fusion"),
    ("INT8 activations (integer dot products on the stored 4-bit weights)",
     "SmolLM2-135M Q4_1, 2-core EPYC", "cpu-2core/smollm2-135m.json", "f32-activations",
     "optimized", "int8"),
    ("8-bit KV cache (int8, a scale per 16), 1792-token prompt", "SmolLM2-135M Q4_1, 2-core EPYC",
     "cpu-2core/int8_kv/smollm2-135m_bench_prompt1792.json", "optimized", "int8-kv", None),
    ("CUDA graphs", "SmolLM2-135M Q4_1, H200", "h200/smollm2-135m.json", "cuda-no-graphs", "cuda",
     None),
    ("INT8 W8A8 (weights per row, activations per token and 64 columns) instead of Q8_0",
     "SmolLM2-135M from Q4_1, 2-core EPYC", "cpu-2core/w8a8/smollm2-135m_q8_0_vs_int8.json", "q8_0",
     "int8", "int8"),
]

# (strategy, model and machine, JSON, variant without, variant with): llm_cuda_bench rows.
CUDA_BENCH_ROWS = [
    ("FP8 E4M3 (weights per row; prefill W8A8, one-row decode W8A16 before its wide "
     "configuration)", "Llama-3-8B shape, random weights, H100",
     "h100/fp8/llm_cuda_fp8_w8a16.json", "optimized bf16", "optimized f8_e4m3", "int8"),
]

NOT_MEASURED = [
    ("INT8 W8A8", "GPU; Gemma 3 on the CPU", "not built on CUDA; Gemma 3's int8 recipe has a "
     "precision run only (docs/strategies/quantization.md)"),
    ("FP8", "SmolLM2 and Gemma 3, H200", "no H200 lent; SmolLM2's precision and speed on an H100 "
     "are in docs/gpu-inference.md (h100/fp8/smollm2_fp8_w8a16.json, not a with/without pair of "
     "this table's kind)"),
    ("8-bit KV cache", "H200", "the CUDA arena and kernels are not built yet"),
    ("KV cache, fusion, 8-bit", "Gemma 3 270M", "no bench JSON yet"),
    ("INT8 convolutions", "ResNet-50, MobileNetV2, EfficientNet-Lite0", "not built yet"),
    ("Dynamic batching", "SmolLM2, Llama-3-8B shape", "bench-serve JSON exist; not set in rows yet"),
]


def load(rel):
    with open(os.path.join(RESULTS, rel), encoding="utf-8") as f:
        return json.load(f)


def pct(x):
    return f"{100 * x:+.1f}%"


def verdict(claim, lat, thr, mem):
    """'confirmed' when each measured figure reaches the claim's lower end; else what falls short."""
    if claim is None:
        return "-", "no claim"
    text, (lat_lo, _), (thr_lo, _), (mem_lo, _) = CLAIMS[claim]
    short = []
    if lat is not None and lat < lat_lo:
        short.append("latency")
    if thr is not None and thr < thr_lo:
        short.append("throughput")
    if mem is not None and mem < mem_lo:
        short.append("memory")
    return text, "confirmed" if not short else "not confirmed: " + ", ".join(short)


def precision_text(p):
    if not p:
        return "-"
    return f"{p['top1_agreement']:.3f} / {p['mean_kl']:.3g} / {pct(p['ppl_change'])}"


def bench_row(strategy, where, rel, without, with_, claim):
    j = load(rel)
    v = {x["name"]: x for x in j["variants"]}
    a, b = v[without], v[with_]
    lat = 1 - b["median"]["token_ms"] / a["median"]["token_ms"]
    thr = b["median"]["decode_tps"] / a["median"]["decode_tps"]
    mem_a = a["host_peak_bytes"] + a["device_peak_bytes"]
    mem_b = b["host_peak_bytes"] + b["device_peak_bytes"]
    mem = 1 - mem_b / mem_a if mem_a else None
    # The run's precision is each variant's against its baseline, one of the two.
    p = b["precision"] or a["precision"]
    ref = without if b["precision"] else with_
    claim_text, v_text = verdict(claim, lat, thr, mem)
    return (f"| {strategy} | {where} | `{without}` -> `{with_}` | {pct(lat)} "
            f"({a['median']['token_ms']:.3g} -> {b['median']['token_ms']:.3g} ms) | "
            f"{thr:.2f}x | {pct(mem) if mem is not None else '-'} | {precision_text(p)} "
            f"(against `{ref}`) | {claim_text} | {v_text} | `{rel}` ({j['git_sha'][:10]}) |")


def cuda_row(strategy, where, rel, without, with_, claim):
    j = load(rel)
    v = {x["variant"]: x for x in j["results"]}
    a, b = v[without], v[with_]
    lat = 1 - a["decode_tok_s"] / b["decode_tok_s"]
    thr = b["decode_tok_s"] / a["decode_tok_s"]
    mem = 1 - b["device_peak_bytes"] / a["device_peak_bytes"]
    claim_text, v_text = verdict(claim, lat, thr, mem)
    return (f"| {strategy} | {where} | `{without}` -> `{with_}` | {pct(lat)} | {thr:.2f}x "
            f"(prefill 2048: {b['prefill_2048_tok_s'] / a['prefill_2048_tok_s']:.2f}x) | "
            f"{pct(mem)} | not in this run | {claim_text} (INT8's claim) | {v_text} | "
            f"`{rel}` ({j['git_sha'][:10]}) |")


def render():
    lines = [
        "# Results: what each strategy buys, measured",
        "",
        "<!-- generated by `python3 bench/results_md.py` from the JSON in bench/results/: do not "
        "edit -->",
        "",
        "Each row: one strategy's variant against the same recipe without it, both from one run "
        "(the JSON named in the row). Latency: per-token decode latency (a reduction is positive); "
        "throughput: decode tokens per second, with over without; memory: peak host plus device "
        "memory saved; precision: teacher-forced top-1 agreement / mean KL / perplexity change "
        "between the two, as the run measured it (against the variant named). The claimed "
        "ranges are those commonly quoted for the strategy; a row confirms its claim when every "
        "figure reaches the claim's lower end.",
        "",
        "| strategy | model, machine | without -> with | latency | throughput | memory saved | "
        "precision (top-1 / KL / ppl) | claimed | verdict | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in BENCH_ROWS:
        lines.append(bench_row(*r))
    for r in CUDA_BENCH_ROWS:
        lines.append(cuda_row(*r))
    lines += ["", "Not measured yet (each is a row to fill, from its own JSON):", ""]
    lines += ["| strategy | where | why not |", "|---|---|---|"]
    lines += [f"| {s} | {w} | {why} |" for s, w, why in NOT_MEASURED]
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/results.md is stale")
    args = ap.parse_args()
    text = render()
    if args.check:
        try:
            with open(OUT, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = ""
        if current != text:
            print("docs/results.md is stale: run python3 bench/results_md.py", file=sys.stderr)
            return 1
        return 0
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
