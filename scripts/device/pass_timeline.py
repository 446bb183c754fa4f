#!/usr/bin/env python3
"""The host's and the GPU's timelines of one traced pass (an Nsight Systems report exported to
SQLite: nsys export --type sqlite), side by side: when the first CUDA runtime call began, when
the GPU's first operation started and its last ended, when the last runtime call (the pass's
synchronization) returned; the GPU's busy and idle time between its first and last operation,
its largest idle gaps with the operations around them and how late the host launched the one
after each; the GPU's operations and the runtime calls by total time. WALL_MS (the pass's wall time as the program
printed it) adds the host time outside every runtime call.

    pass_timeline.py report.sqlite [WALL_MS]
"""
import sqlite3
import sys
from collections import defaultdict


def query(db, sql):
    try:
        return db.execute(sql).fetchall()
    except sqlite3.Error as e:  # a table the report lacks (no copies, say)
        print(f"  ({e})")
        return []


def short(name):
    return name.split("(")[0].replace("void ", "").split("::")[-1][:36]


def main(path, wall_ms):
    db = sqlite3.connect(path)
    names = dict(query(db, "select id, value from StringIds"))
    api = query(db, "select start, end, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME "
                    "order by start")
    ops = [(s, e, c, names.get(n, str(n))) for s, e, c, n in query(
        db, "select start, end, correlationId, shortName from CUPTI_ACTIVITY_KIND_KERNEL")]
    ops += [(s, e, c, f"memcpy kind {k}") for s, e, c, k in query(
        db, "select start, end, correlationId, copyKind from CUPTI_ACTIVITY_KIND_MEMCPY")]
    ops += [(s, e, c, "memset") for s, e, c in query(
        db, "select start, end, correlationId from CUPTI_ACTIVITY_KIND_MEMSET")]
    ops.sort()
    if not api or not ops:
        print("no runtime calls or no GPU operations in the report")
        return 1
    by_corr = {c: (s, e, names.get(n, str(n))) for s, e, c, n in api}
    t0, t_end = api[0][0], api[-1][1]
    us = lambda t: (t - t0) / 1e3  # noqa: E731
    print(f"runtime calls: {len(api)}, from 0 to {us(t_end):.1f} us "
          f"(the last: {names.get(api[-1][3], '?')[:40]})")
    print(f"GPU operations: {len(ops)}; the first starts at {us(ops[0][0]):.1f} us "
          f"({short(ops[0][3])}), the last ends at {us(max(o[1] for o in ops)):.1f} us")
    if wall_ms is not None:
        print(f"wall {wall_ms * 1e3:.1f} us: {wall_ms * 1e3 - us(t_end):.1f} us of it outside "
              "the first to last runtime call")
    busy, cs, ce, gaps, prev = 0, ops[0][0], ops[0][1], [], ops[0]
    for o in ops[1:]:
        if o[0] > ce:
            busy += ce - cs
            a = by_corr.get(o[2])
            late = (a[0] - ce) / 1e3 if a else float("nan")
            gaps.append((o[0] - ce, short(prev[3]), short(o[3]), a[2][:28] if a else "?", late))
            cs, ce = o[0], o[1]
        else:
            ce = max(ce, o[1])
        prev = o
    busy += ce - cs
    span = max(o[1] for o in ops) - ops[0][0]
    print(f"GPU span {span / 1e3:.1f} us: busy {busy / 1e3:.1f}, idle {(span - busy) / 1e3:.1f} "
          f"in {len(gaps)} gaps")
    for g in sorted(gaps, reverse=True)[:8]:
        print(f"  idle {g[0] / 1e3:7.1f} us after {g[1]:36} before {g[2]:36} "
              f"(its {g[3]} began {g[4]:.1f} us after the GPU went idle)")
    launches = [a for a in api if "Launch" in names.get(a[3], "")]
    if launches:
        print(f"the last launch call returns at {us(launches[-1][1]):.1f} us")
    kern = defaultdict(lambda: [0, 0])
    for s, e, _, n in ops:
        kern[short(n)][0] += 1
        kern[short(n)][1] += e - s
    print("GPU operations by total time:")
    for n, (c, t) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {n:40} {c:6d} x {t / 1e3 / c:9.1f} us = {t / 1e3:10.1f} us")
    print("runtime calls by total time:")
    tot = defaultdict(lambda: [0, 0])
    for s, e, _, n in api:
        tot[names.get(n, str(n))][0] += 1
        tot[names.get(n, str(n))][1] += e - s
    for n, (c, t) in sorted(tot.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"  {n[:40]:40} {c:6d} calls {t / 1e3:10.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else None))
