# Sourced by the scripts that run on the GPU machine (run-tests.sh, llm.sh, profile.sh): from the
# repository root, sets out ($OUT or /tmp/rinfer-out, created), b (the bundle, .device), the
# library path (the bundle's libraries, then the machine's cuBLASLt: lt, and cuDNN: dnn) and the bundle's commit
# for the benchmarks' JSON (the copy of .git there may be older than the build).
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/rinfer-out}"
mkdir -p "$out"
b=.device
lt="$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)"
[ -n "$lt" ] || { echo "libcublasLt.so.13 not found on this machine"; exit 1; }
# cuDNN 9: the CUDA install's, else the one PyTorch's wheels bring (nvidia/cudnn/lib).
dnn="$(find /usr/local/cuda*/ /usr/lib -name 'libcudnn.so.9*' 2>/dev/null | head -1)"
[ -n "$dnn" ] || dnn="$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib", "libcudnn.so.9"))' 2>/dev/null)"
[ -f "$dnn" ] || echo "libcudnn.so.9 not found on this machine: the image classifiers' CUDA runner cannot start"
export LD_LIBRARY_PATH="$PWD/$b/lib:$(dirname "$lt"):${dnn:+$(dirname "$dnn"):}${LD_LIBRARY_PATH:-}"
export RINFER_SOURCE_DIR="$PWD" RINFER_GIT_SHA="$(cat "$b/git_sha" 2>/dev/null)"

# serve_at RECIPE C JSON TXT: rinfer bench-serve over RECIPE at concurrency C (128/128,
# --no-baseline, 16 requests a seat), the JSON to JSON; its output tok/s, TTFT and time per
# output token lines (or the log's tail when it fails) appended to TXT. Returns 1 on failure.
serve_at() {
  local rc=0
  if ! timeout "${SERVE_TIMEOUT:-240}" "$b/bin/rinfer" bench-serve "$1" --requests $((16 * $2)) \
      --input-len 128 --output-len 128 --concurrency "$2" --no-baseline --json "$3" \
      >"$out/serve.log" 2>&1; then
    rc=1
    tail -20 "$out/serve.log" | tee -a "$4"
  fi
  grep -E "^\| (output tok/s|TTFT p50|time per output token p50)" "$out/serve.log" | tee -a "$4"
  return $rc
}

# find_nsys: sets host (the folder of the machine's nsys, the one inside Nsight Compute) and puts
# .nsyslib (libdw and libelf for its importer: nsys_trace.sh says how to bring them) on the
# library path; returns 1 without .nsyslib or without nsys.
find_nsys() {
  [ -d .nsyslib ] || return 1
  host="$(dirname "$(find /opt/nvidia /usr/local -path '*target-linux-x64/nsys' -type f \
    2>/dev/null | head -1)")"
  [ -x "$host/nsys" ] || { echo "nsys not found"; return 1; }
  export LD_LIBRARY_PATH="$PWD/.nsyslib:$LD_LIBRARY_PATH"
}
