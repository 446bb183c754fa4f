#!/usr/bin/env python3
"""Summarizes ncu's per-SASS-instruction source page (ncu --import R --page source --print-source
sass --csv; see ncu_sass.sh): consecutive instructions with the same executed count form a run
(a basic block or straight-line code); prints the runs that carry at least MIN (default 3000)
warp-level instructions or 5 stall samples, with their top opcodes, then the kernel's total.

    sass_summary.py sass.csv [MIN]
"""
import csv
import sys
from collections import Counter


def opcode(src):
    words = src.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main(path, min_total):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    hdr = next((r for r in rows if "Instructions Executed" in r), None)
    if hdr is None:
        print("no source page in", path)
        return
    data = rows[rows.index(hdr) + 1:]
    ie, src = hdr.index("Instructions Executed"), hdr.index("Source")
    smp = hdr.index("Warp Stall Sampling (All Samples)")

    def num(r, i):
        return int(r[i]) if i < len(r) and r[i].isdigit() else 0

    runs = []  # [first index, executed count, instructions, samples, opcodes]
    for i, r in enumerate(data):
        v, s = num(r, ie), num(r, smp)
        if runs and runs[-1][1] == v:
            runs[-1][2] += 1
            runs[-1][3] += s
            runs[-1][4][opcode(r[src].strip())] += 1
        else:
            runs.append([i, v, 1, s, Counter({opcode(r[src].strip()): 1})])
    total = sum(v * n for _, v, n, _, _ in runs)
    busiest = max(v for _, v, _, _, _ in runs)
    print(f"{'first':>6} {'exec':>7} {'instr':>6} {'warp instr':>10} {'samples':>7}  top opcodes")
    for first, v, n, s, ops in runs:
        if v * n >= min_total or s >= 5:
            top = " ".join(f"{o}:{c}" for o, c in ops.most_common(6))
            print(f"{first:6d} {v:7d} {n:6d} {v * n:10d} {s:7d}  {top}")
    print(f"total {total} warp instructions in {len(data)} SASS instructions; "
          f"{sum(n for _, v, n, _, _ in runs if v * 8 >= busiest)} on the path of the warps "
          f"that execute the most (count >= 1/8 of the top)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3000)
