#!/usr/bin/env bash
# Runs on the GPU machine: Nsight Compute's view of one launch of the kernel matching K (a regex)
# inside a prefill of N (default 2048) tokens of FORMAT (default bf16, Llama-3-8B shape) run by
# BIN (default the bundle's llm_cuda_bench; any binary with its --profile --prefill mode, such as
# one built at another commit): duration, the throughput of SM, tensor pipes and memory,
# occupancy (achieved and its limits: registers, shared memory, warps), and the warps' stall
# reasons, from ncu's details page, the lines that carry them.
# Carry: [".device"] and BIN's folder.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ncu_bin="$(command -v ncu || find /usr/local/cuda*/bin /opt -name ncu -type f 2>/dev/null | head -1)"
[ -x "$ncu_bin" ] || { echo "ncu not found"; exit 1; }
k="${K:?K: a regex of the kernel's name}"
bin="${BIN:-$b/bin/llm_cuda_bench}"
tag="$(echo "$k" | tr -c 'A-Za-z0-9_\n' _)"
timeout 300 "$ncu_bin" --profile-from-start off --kernel-name "regex:$k" --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis -f -o "/tmp/ncu_$tag" \
  "$bin" --profile --shape llama3-8b --format "${FORMAT:-bf16}" --prefill "${N:-2048}" \
  >"/tmp/ncu_$tag.log" 2>&1 || { tail -5 "/tmp/ncu_$tag.log"; exit 1; }
"$ncu_bin" --import "/tmp/ncu_$tag.ncu-rep" --page details 2>&1 |
  grep -E "attn|kernel|Duration|Throughput|Pipe|Registers Per|Shared Memory Config|Block Limit|Achieved|Theoretical Occ|Warp Cycles Per Issued|Issued Ipc|No Eligible|Eligible Warps|Grid Size|Block Size|Waves" |
  sed -E 's/ +/ /g' | head -60
