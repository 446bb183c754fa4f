#!/usr/bin/env bash
# Runs on the GPU machine over the bundle (carry: [".device"]): the decode step time of the
# random-weight models (llm_cuda_bench --profile: a request through the engine core, the
# median of 64 warm steps after a 128-token prompt) for each line of SWEEP,
# "shape:format [K=key=value,key=value] [BIN=name]", so that
# kernel switches (strategies.kernels.cuda: matvec_split, matvec_stream, matvec_stream_kb,
# producer_l2, attention_mma, pdl, split_norm; `rinfer strategies` lists their domains) are
# compared in one call on one machine; BIN=name in a line runs .device/bin/name instead of
# llm_cuda_bench (variant builds bundled side by side). REPEAT=N runs the whole list N times
# (interleaved, to see the noise). ARGS adds llm_cuda_bench arguments to every run
# (ARGS="--skip 3800": later positions). Prints one line per run
# and writes them to $OUT/sweep.txt.
#   SWEEP=$'llama3-8b:q4_0\nllama3-8b:q4_0 K=pdl=false\nllama3-8b:q4_0 BIN=llm_cuda_bench_old' \
#     REPEAT=2 bash scripts/device/sweep.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for ((rep = 1; rep <= ${REPEAT:-1}; ++rep)); do
  while read -r sf opts; do
    [ -n "$sf" ] || continue
    bin=llm_cuda_bench
    [[ " $opts " =~ \ BIN=([^ ]+) ]] && bin=${BASH_REMATCH[1]}
    kernels=()
    [[ " $opts " =~ \ K=([^ ]+) ]] && kernels=(--kernels "${BASH_REMATCH[1]}")
    # shellcheck disable=SC2086
    r=$(timeout 120 "$b/bin/$bin" --profile --shape "${sf%%:*}" --format "${sf##*:}" \
      --decode-tokens 1 "${kernels[@]}" ${ARGS:-} 2>&1 | grep -E '^profile|rror' | head -3)
    printf '%-16s %-58s %s\n' "$sf" "${opts:-(defaults)}" "$r" | tee -a "$out/sweep.txt"
  done <<<"${SWEEP:-llama3-8b:q4_0}"
done
