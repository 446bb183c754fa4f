"""Over 1,000 malformed requests against rinfer serve (in CI under AddressSanitizer + UBSan, the
`debug` preset): bad JSON, wrong types, out-of-range numbers, invalid UTF-8, truncated and
oversized bodies, wrong content types, slow headers and huge header counts. Each must get a 4xx
(in OpenAI's error shape where the server writes the body), and the server must keep serving:
a valid request every 100 gets its 200, and SIGTERM ends it with exit status 0 (no leak).

A client that stops in the middle of its request (headers or body never finished) cannot be
answered; it must be disconnected within the --timeout, and that is checked too.
"""

import json
import random
import socket
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import harness
from harness import SMOLLM2, SMOLLM2_RECIPE, Server

harness.require_model()

BODY_LIMIT = 65536
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def valid_chat(**kw):
    b = {"model": SMOLLM2, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
         "temperature": 0}
    b.update(kw)
    return b


def raw_request(path, body, content_type="application/json", extra_headers=(), length=None,
                method="POST"):
    if isinstance(body, str):
        body = body.encode("utf-8")
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if content_type is not None:
        head.append("Content-Type: " + content_type)
    head.append(f"Content-Length: {len(body) if length is None else length}")
    head.extend(extra_headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def cases():
    """(name, raw request bytes, pieces delay) for every malformed request."""
    rng = random.Random(20261202)
    out = []
    add = lambda name, raw, delay=0.0: out.append((name, raw, delay))  # noqa: E731
    good = json.dumps(valid_chat())

    # Bad JSON: every cut of a valid body, garbage, and broken syntax.
    for cut in range(1, len(good) - 1, 1):
        add("truncated json", raw_request(CHAT, good[:cut]))
    good_comp = json.dumps({"model": SMOLLM2, "prompt": "Once upon a time", "max_tokens": 1})
    for cut in range(1, len(good_comp) - 1, 1):
        add("truncated json", raw_request(COMP, good_comp[:cut]))
    for _ in range(250):
        n = rng.randrange(1, 200)
        junk = bytes(rng.randrange(32, 127) for _ in range(n)).decode()
        if junk.strip().startswith(("{", "[", '"')) or junk.strip().lstrip("-").isdigit():
            junk = "@" + junk
        add("garbage", raw_request(CHAT, junk))
    for s in ["{", "}", "[]", "null", "1", '"x"', "{'model': 'a'}", '{"model": "a",}',
              '{"model" "a"}', '{"model": tru}', "{\"model\": \"a\"} extra", "\ufeff{}", "{}",
              '{"model": NaN}', '{"model": "a", "messages": [,]}', " " * 100]:
        add("broken syntax", raw_request(CHAT, s))
    add("too deep", raw_request(CHAT, "[" * 5000 + "]" * 5000))
    add("too deep object", raw_request(CHAT, '{"a":' * 200 + "1" + "}" * 200))

    # Wrong types for every field.
    fields = {"model": "s", "messages": "l", "temperature": "n", "top_p": "n", "top_k": "i",
              "min_p": "n", "max_tokens": "i", "max_completion_tokens": "i", "seed": "i",
              "stream": "b", "presence_penalty": "n", "frequency_penalty": "n", "logprobs": "b",
              "top_logprobs": "i", "stop": "s|l", "n": "i", "stream_options": "o"}
    wrong = {"s": [1, 2.5, True, [], {}], "l": ["x", 1, True, {}], "n": ["0.5", True, [], {}],
             "i": ["3", 1.5, True, [], {}], "b": ["true", 1, [], {}], "o": ["x", 1, []],
             "s|l": [1, True, {}, [1], [None]]}
    for f, kind in fields.items():
        for v in wrong[kind]:
            add(f"wrong type {f}", raw_request(CHAT, json.dumps(valid_chat(**{f: v}))))
            if f not in ("messages", "top_logprobs", "logprobs", "max_completion_tokens"):
                body = {"model": SMOLLM2, "prompt": "x", "max_tokens": 1, f: v}
                add(f"wrong type {f}", raw_request(COMP, json.dumps(body)))
    for bad_msgs in [[], [1], ["hi"], [{}], [{"role": "user"}], [{"content": "x"}],
                     [{"role": 1, "content": "x"}], [{"role": "user", "content": 5}],
                     [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
                     [{"role": "user", "content": [{"type": "text"}]}],
                     [{"role": "tool", "content": "x"}], [{"role": "user", "content": None}]]:
        add("bad messages", raw_request(CHAT, json.dumps(valid_chat(messages=bad_msgs))))
    for bad_prompt in ["", [], [[]], ["a", ""], ["a", [1]], [[1], "a"], [[1], [-1]], [1, "a"],
                       [-1], [2**40], ["a"] * 129, {}, 3, None]:
        body = {"model": SMOLLM2, "prompt": bad_prompt, "max_tokens": 1}
        add("bad prompt", raw_request(COMP, json.dumps(body)))
    add("model not a string",
        raw_request(CHAT, json.dumps({"model": 3, "messages": [{"role": "user", "content": "x"}]})))
    add("missing messages", raw_request(CHAT, json.dumps({"model": SMOLLM2})))

    # Out-of-range numbers.
    ranges = {"temperature": [-0.1, 2.01, 1e308, -1e308], "top_p": [0, -0.5, 1.0001, 7],
              "min_p": [-0.01, 1, 2], "top_k": [-2, 2**40], "max_tokens": [0, -1, 2**31, 2**70],
              "presence_penalty": [-2.5, 2.5, 100], "frequency_penalty": [-2.01, 3],
              "top_logprobs": [-1, 21, 1000], "n": [0, 129, 2**40], "seed": [2**64, -(2**64)]}
    for f, vals in ranges.items():
        for v in vals:
            extra = {"logprobs": True} if f == "top_logprobs" else {}
            add(f"out of range {f}", raw_request(CHAT, json.dumps(valid_chat(**{f: v}, **extra))))
            if f != "top_logprobs":
                body = {"model": SMOLLM2, "prompt": "x", "max_tokens": 1, f: v}
                add(f"out of range {f}", raw_request(COMP, json.dumps(body)))
    for v in ["1e400", "-1e400", "1" * 400]:
        add("huge number", raw_request(CHAT, good.replace('"temperature": 0', '"temperature": ' + v)))
    add("too many stops", raw_request(CHAT, json.dumps(valid_chat(stop=[str(i) for i in range(17)]))))
    add("empty stop", raw_request(CHAT, json.dumps(valid_chat(stop=[""]))))
    add("long stop", raw_request(CHAT, json.dumps(valid_chat(stop=["x" * 300]))))
    for f, v in [("tools", [{"type": "function"}]), ("logit_bias", {"5": 1}),
                 ("functions", [{"name": "f"}])]:
        add(f"unsupported {f}", raw_request(CHAT, json.dumps(valid_chat(**{f: v}))))
    # Structured output that cannot be: malformed response formats, schemas and grammars.
    for rf in [{"type": "json"}, {"type": 3}, {}, "json_object", {"type": "json_schema"},
               {"type": "json_schema", "json_schema": {"name": "x"}},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": "str"}},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
               {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}]:
        add("bad response_format", raw_request(CHAT, json.dumps(valid_chat(response_format=rf))))
    for g in ["", 5, "root ::= undefined_rule", "root ::= (", "no rule at all"]:
        add("bad grammar", raw_request(CHAT, json.dumps(valid_chat(grammar=g))))
    add("grammar and a json format",
        raw_request(CHAT, json.dumps(valid_chat(grammar='root ::= "a"',
                                                response_format={"type": "json_object"}))))
    add("prompt over the context",
        raw_request(CHAT, json.dumps(valid_chat(messages=[{"role": "user", "content": "ab " * 4000}]))))
    add("unknown model", raw_request(CHAT, json.dumps(valid_chat(model="no-such-model"))))

    # Invalid UTF-8 anywhere in the body.
    bad_bytes = [b"\xff", b"\xfe", b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                 b"\xc3", b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80"]
    enc = good.encode()
    for i in range(300):
        b = bad_bytes[i % len(bad_bytes)]
        at = enc.index(b'"Hi"') + 2 if i % 2 else rng.randrange(1, len(enc) - 1)
        add("invalid utf-8", raw_request(CHAT, enc[:at] + b + enc[at:]))

    # Oversized bodies: declared, and sent in chunks past the limit.
    for n in [BODY_LIMIT + 1, BODY_LIMIT * 2, 10**9, 2**62]:
        add("oversized declared", raw_request(CHAT, b"", length=n))
    for n in [BODY_LIMIT + 1, BODY_LIMIT + 5000, 3 * BODY_LIMIT]:
        body = json.dumps(valid_chat(messages=[{"role": "user", "content": "x" * n}]))
        add("oversized body", raw_request(CHAT, body))
    for n in [BODY_LIMIT + 10, 2 * BODY_LIMIT]:
        chunk = b"a" * 4096
        pieces = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(n // 4096 + 1))
        raw = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
               "application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode() + pieces + b"0\r\n\r\n"
        add("oversized chunked", raw)

    # Wrong content types.
    for ct in [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
               "application/xml", "json", "application/jsonx", "text/json", ""]:
        add(f"content type {ct}", raw_request(CHAT, good, content_type=ct))
        add(f"content type {ct}", raw_request(COMP, json.dumps({"model": SMOLLM2, "prompt": "x"}),
                                              content_type=ct))

    # Wrong methods and routes.
    for method, path in [("GET", CHAT), ("PUT", CHAT), ("DELETE", COMP), ("POST", "/v1/models"),
                         ("POST", "/health"), ("GET", "/v1/chat"), ("POST", "/v2/chat/completions"),
                         ("GET", "/../../etc/passwd"), ("GET", "/nope.js"), ("POST", "/v1/embeddings")]:
        add(f"route {method} {path}", raw_request(path, good, method=method))

    # Broken HTTP framing that the HTTP layer answers.
    add("bad header line", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
    add("bad content length", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n")
    add("bad chunk size", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    add("long header", raw_request(CHAT, good, extra_headers=["X-Long: " + "a" * 40000]))

    # Huge header counts (over --max-headers 40, and over the header bytes).
    for n in [41, 50, 100, 500, 1000, 3000]:
        hs = [f"X-H{i}: {i}" for i in range(n)]
        add(f"{n} headers", raw_request(CHAT, good, extra_headers=hs))
        add(f"{n} headers", raw_request("/health", b"", method="GET", extra_headers=hs))

    # Slow headers: a malformed request sent a few bytes at a time.
    for i in range(24):
        raw = raw_request(CHAT, good[: 10 + i], extra_headers=[f"X-Slow: {i}"])
        add("slow headers", raw, delay=0.02)
    return out


def send(port, raw, delay, timeout=30):
    """The status line's code (or -1 when the server closed without one) and the body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if delay:
            for i in range(0, len(raw), 7):
                s.sendall(raw[i : i + 7])
                time.sleep(delay)
        else:
            try:
                s.sendall(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered before the whole body went (413): read what came
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    if not data.startswith(b"HTTP/1."):
        return -1, data
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


class MalformedRequestsTest(unittest.TestCase):
    def test_every_malformed_request_gets_a_4xx_and_the_server_keeps_serving(self):
        all_cases = cases()
        self.assertGreaterEqual(len(all_cases), 1000)
        with Server(SMOLLM2_RECIPE, "--max-body-bytes", str(BODY_LIMIT), "--max-headers", "40",
                    "--timeout", "3", "--threads", "2") as srv:
            failures = []
            lock = threading.Lock()

            def run(case):
                name, raw, delay = case
                status, body = send(srv.port, raw, delay)
                ok = 400 <= status < 500
                if ok and body.startswith(b"{"):
                    try:
                        e = json.loads(body)["error"]
                        ok = all(k in e for k in ("message", "type", "param", "code"))
                    except (ValueError, KeyError, TypeError):
                        ok = False
                if not ok:
                    with lock:
                        failures.append(f"{name}: {status} {body[:200]!r}")

            with ThreadPoolExecutor(max_workers=8) as pool:
                for start in range(0, len(all_cases), 100):
                    list(pool.map(run, all_cases[start : start + 100]))
                    status, body = srv.post(CHAT, valid_chat())
                    self.assertEqual(status, 200, body)
            self.assertEqual(failures, [], f"{len(failures)} of {len(all_cases)}: " + "\n".join(failures))

            # Clients that never finish their request are cut off after --timeout (3 s).
            stalled = []
            for raw in [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-",
                        raw_request(CHAT, good_prefix := json.dumps(valid_chat())[:20],
                                    length=len(good_prefix) + 50)]:
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
                s.sendall(raw)
                stalled.append(s)
            t0 = time.time()
            for s in stalled:
                self.assertIn(s.recv(4096)[:4], (b"", b"HTTP"))  # closed (or answered)
                s.close()
            self.assertLess(time.time() - t0, 15)
            self.assertEqual(srv.get("/health")[0], 200)
            self.assertEqual(srv.metric("rinfer_requests_in_flight", {"model": SMOLLM2}), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
