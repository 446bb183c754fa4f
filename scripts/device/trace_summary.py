#!/usr/bin/env python3
"""Summarizes an Nsight Systems kernel trace (nsys stats -r cuda_gpu_trace -f csv) of decode
steps run in order on one stream: per kernel name and grid, how many, the mean duration (which,
under PDL, includes the time a kernel waits for its predecessor) and the mean increment
end[i] - end[i-1], which is what each kernel adds to the step: the increments of one step add up
to its time, so they show where a step goes once launches overlap.

    trace_summary.py trace_cuda_gpu_trace.csv
"""
import csv
import sys
from collections import defaultdict


def main(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    ks = []
    for r in rows:
        name = r.get("Name", "")
        if not name or "memcpy" in name.lower() or "memset" in name.lower():
            continue
        start = int(r["Start (ns)"])
        dur = int(r["Duration (ns)"])
        grid = f'({r.get("GrdX", "?")},{r.get("GrdY", "?")},{r.get("GrdZ", "?")})'
        short = name.split("(")[0].replace("void ", "").split("::")[-1][:40]
        ks.append((start, start + dur, short, grid))
    ks.sort()
    if not ks:
        print("no kernels")
        return
    stats = defaultdict(lambda: [0, 0.0, 0.0])
    prev_end = ks[0][0]
    for start, end, name, grid in ks:
        s = stats[(name, grid)]
        s[0] += 1
        s[1] += (end - start) / 1e3
        s[2] += (end - prev_end) / 1e3
        prev_end = max(prev_end, end)
    span = (ks[-1][1] - ks[0][0]) / 1e3
    print(f"{len(ks)} kernels over {span:.1f} us")
    print(f"{'kernel':42} {'grid':18} {'n':>4} {'dur us':>8} {'incr us':>8} {'incr total':>10}")
    for (name, grid), (n, d, inc) in sorted(stats.items(), key=lambda kv: -kv[1][2]):
        print(f"{name:42} {grid:18} {n:4d} {d / n:8.2f} {inc / n:8.2f} {inc:10.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
