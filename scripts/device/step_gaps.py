#!/usr/bin/env python3
"""Where the decode steps of an Nsight Systems trace (nsys stats -r cuda_gpu_trace -f csv) go on
the GPU's timeline: steps are cut at each launch of FIRST (a kernel name's prefix, the step's
first kernel), and for each step its span (to the next step's first kernel), the time some
kernel runs (the union of the kernels' intervals), the idle time between them, and the copies
and memsets inside it. Prints the medians over the whole steps and the idle gaps of the median
step larger than 0.5 us, with the operations around them.

    step_gaps.py trace_cuda_gpu_trace.csv [FIRST]   (FIRST: embed_norm by default)
"""
import csv
import statistics
import sys


def short(name):
    return name.split("(")[0].replace("void ", "").split("::")[-1][:40]


def main(path, first):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    ops = []
    for r in rows:
        name = r.get("Name", "")
        if not name:
            continue
        start = int(r["Start (ns)"])
        ops.append((start, start + int(r["Duration (ns)"]), name))
    ops.sort()
    cuts = [i for i, o in enumerate(ops) if short(o[2]).startswith(first)]
    if len(cuts) < 2:
        print(f"fewer than 2 launches of {first}: no whole step")
        return
    steps = []
    for a, b in zip(cuts, cuts[1:]):
        seg = ops[a:b]
        span = ops[b][0] - ops[a][0]
        busy, cur_s, cur_e = 0, seg[0][0], seg[0][1]
        gaps = []
        prev = seg[0]
        for o in seg[1:]:
            if o[0] > cur_e:
                busy += cur_e - cur_s
                gaps.append((o[0] - cur_e, short(prev[2]), short(o[2])))
                cur_s, cur_e = o[0], o[1]
            else:
                cur_e = max(cur_e, o[1])
            prev = o if o[1] >= prev[1] else prev
        busy += min(cur_e, ops[b][0]) - cur_s
        if ops[b][0] > cur_e:
            gaps.append((ops[b][0] - cur_e, short(prev[2]), short(ops[b][2])))
        copies = sum(1 for o in seg if "memcpy" in o[2].lower() or "memset" in o[2].lower())
        steps.append((span, busy, copies, gaps))
    med = statistics.median
    print(f"{len(steps)} whole steps cut at {first}")
    print(f"span   median {med(s[0] for s in steps) / 1e3:9.1f} us")
    print(f"busy   median {med(s[1] for s in steps) / 1e3:9.1f} us")
    print(f"idle   median {med(s[0] - s[1] for s in steps) / 1e3:9.1f} us")
    print(f"copies and memsets a step: {sorted(set(s[2] for s in steps))}")
    mid = sorted(steps, key=lambda s: s[0])[len(steps) // 2]
    for g, a, b in sorted(mid[3], reverse=True):
        if g >= 500:
            print(f"  gap {g / 1e3:7.1f} us after {a} before {b}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "embed_norm")
