#!/usr/bin/env bash
# Two recipes timed in turn, ROUNDS times (default 8), the order swapped every round, so that a
# noisy shared machine's drift falls on both alike: each round runs `rinfer bench` on each
# recipe alone (--repeat 3, prompt 512, 128 generated, no precision), then the table pairs the
# rounds' medians (decode and prefill tok/s, B over A) and gives the median of the ratios.
#   scripts/bench-interleaved.sh A.yaml B.yaml [ROUNDS] [OUTDIR]
# RINFER (default build/cuda/rinfer) picks the binary; OUTDIR keeps each run's JSON and a
# summary.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
a="$1" b="$2" rounds="${3:-8}" dir="${4:-bench/results/interleaved}"
rinfer="${RINFER:-build/cuda/rinfer}"
mkdir -p "$dir"
for i in $(seq "$rounds"); do
  order="a b"
  [ $((i % 2)) = 0 ] && order="b a"
  for w in $order; do
    r="$a"
    [ "$w" = b ] && r="$b"
    "$rinfer" bench "$r" --vs "$(basename "$r" .yaml)" --repeat 3 --prompt-tokens 512 \
      --gen-tokens 128 --no-precision --json "$dir/${w}_$i.json" --svg "$dir/${w}_$i.svg" >/dev/null
  done
done
python3 - "$dir" "$rounds" "$a" "$b" <<'PY'
import json, statistics, sys
d, n, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def med(w, i, key):
    return json.load(open(f"{d}/{w}_{i}.json"))["variants"][0]["median"][key]
rows, out = [], {"a": a, "b": b, "rounds": []}
print(f"A = {a}, B = {b}: medians of 3 runs a round, tok/s")
print("| round | decode A | decode B | B/A | prefill A | prefill B | B/A |")
print("|---|---|---|---|---|---|---|")
for i in range(1, n + 1):
    r = {k: med(w, i, key) for k, w, key in [("decode_a", "a", "decode_tps"),
         ("decode_b", "b", "decode_tps"), ("prefill_a", "a", "prefill_tps"),
         ("prefill_b", "b", "prefill_tps")]}
    out["rounds"].append(r)
    print(f"| {i} | {r['decode_a']:.1f} | {r['decode_b']:.1f} | {r['decode_b'] / r['decode_a']:.3f} "
          f"| {r['prefill_a']:.0f} | {r['prefill_b']:.0f} | {r['prefill_b'] / r['prefill_a']:.3f} |")
for k in ("decode", "prefill"):
    ratios = [r[f"{k}_b"] / r[f"{k}_a"] for r in out["rounds"]]
    out[f"{k}_ratio_median"] = statistics.median(ratios)
    out[f"{k}_b_faster_rounds"] = sum(x > 1 for x in ratios)
    print(f"{k}: B/A median {statistics.median(ratios):.3f}, B faster in "
          f"{sum(x > 1 for x in ratios)} of {n} rounds")
out["machine"] = json.load(open(f"{d}/a_1.json"))["machine"]
out["git_sha"] = json.load(open(f"{d}/a_1.json"))["git_sha"]
json.dump(out, open(f"{d}/summary.json", "w"), indent=1)
PY
