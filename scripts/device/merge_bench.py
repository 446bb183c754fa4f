#!/usr/bin/env python3
"""Merges llm_cuda_bench JSON files into one record: the table of one process (every row) and
runs of one format each (`llm_cuda_bench --format F`, one model made in the process). Each
"optimized F" row of a shape is replaced by the row of its own process, with the one-process
figures kept beside it (one_process_*): in one process, a model made after others decodes
0.5-1.5% slower than one made first (the cause is not found: not the allocator's cache, not the
clocks or temperatures; docs/gpu-workflow.md).

    merge_bench.py one_process.json own_1.json own_2.json ... > llm_cuda.json
"""
import json
import sys

KEPT = ("decode_tok_s", "decode_ms_median", "decode_long_tok_s", "prefill_512_tok_s",
        "prefill_2048_tok_s")


def main(paths):
    with open(paths[0]) as f:
        merged = json.load(f)
    rows = merged["results"]
    for p in paths[1:]:
        with open(p) as f:
            own = json.load(f)
        for r in own["results"]:
            for i, a in enumerate(rows):
                if a["shape"] == r["shape"] and a["variant"] == r["variant"]:
                    r = dict(r)
                    r["process"] = "own (llm_cuda_bench --format)"
                    r["own_process_git_sha"] = own.get("git_sha")
                    r["own_process_limits"] = own.get("limits")
                    for k in KEPT:
                        if k in a:
                            r["one_process_" + k] = a[k]
                    rows[i] = r
    merged["method"] += (
        "; each optimized row comes from a process of its own (one model made in the process, "
        "as a deployment loads one; its limits from that process), with the figures of the "
        "one-process table beside it (one_process_*)")
    json.dump(merged, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
