"""256 concurrent streaming clients against rinfer serve with SmolLM2 on the CPU: every reply
complete (one id, the role first, a finish_reason, [DONE]) and its own (greedy replies equal
the same prompt's reply served alone), `rinfer loadgen` at 256 in flight with every reply
checked, and clients that leave mid-stream leave no KV blocks behind (/metrics once idle).
Skipped under the sanitizers (the debug preset): too slow there to mean anything.
"""

import json
import os
import random
import socket
import subprocess
import threading
import time
import unittest

import harness
from harness import SMOLLM2, SMOLLM2_RECIPE, Server, sse_events

harness.require_model()
if os.environ.get("RINFER_SANITIZE") == "ON":
    print("SKIP: a sanitizer build (the load test runs in the optimized presets)")
    raise SystemExit(harness.SKIP)

CLIENTS = 256
LEAVERS = 32  # of the clients, these hang up after their second event


def body(i, stream=True):
    return {"model": SMOLLM2, "stream": stream, "temperature": 0, "max_tokens": 12,
            "messages": [{"role": "user", "content": f"Count from {i} to {i + 5}, in words."}]}


def stream_raw(port, payload, leave_after=None, timeout=600):
    """POST a streamed chat over a raw socket: (status, text body); hangs up after
    `leave_after` events when given."""
    data = json.dumps(payload).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: " + str(len(data)).encode() +
              b"\r\n\r\n" + data)
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
        if leave_after is not None and got.count(b"data: ") >= leave_after:
            s.close()
            return None, None
    s.close()
    head, _, rest = got.partition(b"\r\n\r\n")
    # De-chunk the body (Transfer-Encoding: chunked).
    out, pos = b"", 0
    while pos < len(rest):
        eol = rest.index(b"\r\n", pos)
        n = int(rest[pos:eol], 16)
        if n == 0:
            break
        out += rest[eol + 2 : eol + 2 + n]
        pos = eol + 2 + n + 2
    return int(head.split(b" ", 2)[1]), out.decode()


class LoadTest(unittest.TestCase):
    def test_256_streaming_clients(self):
        with Server(SMOLLM2_RECIPE, "--max-queue", "1024", "--threads", "2") as srv:
            # rinfer loadgen: 256 in flight, every reply checked by it.
            lg = subprocess.run([harness.RINFER, "loadgen", srv.url, "--requests", str(CLIENTS),
                                 "--concurrency", str(CLIENTS), "--input-len", "24",
                                 "--output-len", "8"], capture_output=True, text=True, timeout=900)
            self.assertEqual(lg.returncode, 0, lg.stdout + lg.stderr)
            self.assertIn(f"| {CLIENTS} | {CLIENTS} | 0 |", lg.stdout)

            # 256 raw streaming clients at once, some of them leaving early.
            rng = random.Random(7)
            leavers = set(rng.sample(range(CLIENTS), LEAVERS))
            results = {}
            lock = threading.Lock()
            start = threading.Barrier(CLIENTS)

            def client(i):
                start.wait()
                r = stream_raw(srv.port, body(i), leave_after=2 if i in leavers else None)
                with lock:
                    results[i] = r

            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            texts = {}
            for i in range(CLIENTS):
                if i in leavers:
                    continue
                status, data = results[i]
                self.assertEqual(status, 200, data)
                events, done = sse_events(data)
                self.assertTrue(done, f"client {i}: no [DONE]")
                self.assertEqual(len({e["id"] for e in events}), 1, f"client {i}: mixed ids")
                self.assertEqual(events[0]["choices"][0]["delta"].get("role"), "assistant")
                self.assertIn(events[-1]["choices"][0]["finish_reason"], ("stop", "length"))
                texts[i] = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
                self.assertTrue(texts[i], f"client {i}: empty reply")

            # Once idle: no blocks held, nothing in flight.
            deadline = time.time() + 30
            while time.time() < deadline and (
                    srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}) != 0 or
                    srv.metric("rinfer_requests_in_flight", {"model": SMOLLM2}) != 0):
                time.sleep(0.1)
            self.assertEqual(srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}), 0)
            self.assertEqual(srv.metric("rinfer_requests_in_flight", {"model": SMOLLM2}), 0)
            self.assertEqual(srv.metric("rinfer_requests_running", {"model": SMOLLM2}), 0)
            self.assertGreaterEqual(
                srv.metric("rinfer_requests_total", {"model": SMOLLM2, "finish": "aborted"}),
                LEAVERS - 4)  # a leaver whose reply was already complete is not aborted

            # Each reply is its own: the same prompt alone gives the same greedy reply.
            for i in rng.sample(sorted(texts), 24):
                status, data = srv.post("/v1/chat/completions", body(i, stream=False))
                self.assertEqual(status, 200)
                alone = json.loads(data)["choices"][0]["message"]["content"]
                self.assertEqual(texts[i], alone, f"client {i}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
