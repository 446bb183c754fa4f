#!/usr/bin/env bash
# Runs on the GPU machine over a bundle made by bundle.sh (carry: [".device"]): the same load
# through `rinfer serve` + `rinfer loadgen` over loopback and through `rinfer bench-serve` in
# process, one after the other on the same GPU. Writes $OUT/serve_http_<name>.json (loadgen),
# $OUT/serve_<name>_inproc.json (bench-serve) and the tables to $OUT/serve_http.txt.
#   NAME=llama3-8b_128x128_c512 RECIPE=recipes/llm-serve/llama3-8b-random/seats512.yaml \
#     LOAD="--requests 1024 --input-len 128 --output-len 128 --concurrency 512" \
#     bash scripts/device/serve_http.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
NAME="${NAME:-llama3-8b_128x128_c512}"
RECIPE="${RECIPE:-recipes/llm-serve/llama3-8b-random/seats512.yaml}"
LOAD="${LOAD:---requests 1024 --input-len 128 --output-len 128 --concurrency 512}"
WARM="${WARM:---requests 512 --input-len 128 --output-len 32 --concurrency 512}"
PORT="${PORT:-8311}"
# The server's context: bench-serve sizes its own to the load (input + output + 1), so the KV
# pool holds the same seats.
SERVE_ARGS="${SERVE_ARGS:---ctx 257}"
log="$out/serve_http.txt"
fail=0

# shellcheck disable=SC2086
"$b/bin/rinfer" serve "$RECIPE" --port "$PORT" --max-queue 8192 --http-threads 4 $SERVE_ARGS \
  2>"$out/serve_http_server.err" &
server=$!
for _ in $(seq 1 600); do
  python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/health').status == 200 else 1)" \
    2>/dev/null && break
  kill -0 $server 2>/dev/null || break
  sleep 0.5
done
echo "== loadgen warm-up: $WARM" | tee -a "$log"
# shellcheck disable=SC2086
timeout 300 "$b/bin/rinfer" loadgen "http://127.0.0.1:$PORT" $WARM 2>>"$log" | tee -a "$log" || fail=1
echo "== loadgen: $LOAD" | tee -a "$log"
# shellcheck disable=SC2086
timeout 400 "$b/bin/rinfer" loadgen "http://127.0.0.1:$PORT" $LOAD \
  --json "$out/serve_http_$NAME.json" 2>>"$log" | tee -a "$log" || fail=1
curl -s "http://127.0.0.1:$PORT/metrics" > "$out/serve_http_metrics.txt" 2>/dev/null ||
  python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" \
    > "$out/serve_http_metrics.txt"
kill -TERM $server
wait $server
echo "server exit status: $?" | tee -a "$log"
tail -3 "$out/serve_http_server.err" | tee -a "$log"

echo "== bench-serve: $LOAD" | tee -a "$log"
# shellcheck disable=SC2086
timeout 400 "$b/bin/rinfer" bench-serve "$RECIPE" $LOAD --no-baseline \
  --json "$out/serve_${NAME}_inproc.json" 2>"$out/serve_inproc.err" | tee -a "$log" || {
  fail=1
  tail -20 "$out/serve_inproc.err" | tee -a "$log"
}
exit $fail
