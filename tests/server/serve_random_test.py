"""`rinfer serve` of a random-weight model on the CPU (model: random:tiny:f32): the same engine
path as a real model (LlmEngine, the engine core) with no tokenizer: a prompt of token ids in,
each generated id as "<id>" out, through curl and the official openai client; a text prompt or
a chat is a 400 that says why. Needs no reference model."""

import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import unittest

import harness
from harness import Server, curl

import openai  # noqa: E402

RECIPE = """scenario: llm-serve
model: random:tiny:f32
device: cpu
context_length: 256
sampling: {temperature: 0, seed: 3}
strategies:
  batching: {max_seqs: 4}
"""


def write_recipe(directory):
    """RECIPE as random.yaml in `directory`; returns its path."""
    path = os.path.join(directory, "random.yaml")
    with open(path, "w") as f:
        f.write(RECIPE)
    return path


class ServeRandomTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.recipe = write_recipe(cls.dir.name)
        cls.srv = Server(cls.recipe, "--threads", "2").__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)
        cls.dir.cleanup()

    def test_token_ids_in_ids_as_text_out(self):
        body = {"model": "random:tiny:f32", "prompt": [5, 6, 7, 8], "max_tokens": 6}
        status, out = curl(self.srv.url + "/v1/completions", "-H",
                           "Content-Type: application/json", "--data-binary", json.dumps(body))
        self.assertEqual(status, 200, out)
        reply = json.loads(out)
        text = reply["choices"][0]["text"]
        ids = re.findall(r"<(\d+)>", text)
        self.assertEqual(len(ids), 6, text)
        self.assertEqual("".join(f"<{i}>" for i in ids), text)
        self.assertTrue(all(0 <= int(i) < 512 for i in ids), text)
        self.assertEqual(reply["usage"]["prompt_tokens"], 4)
        self.assertEqual(reply["usage"]["completion_tokens"], 6)
        # Greedy and seeded: the openai client gets the same reply.
        client = openai.OpenAI(base_url=self.srv.url + "/v1", api_key="none", max_retries=0)
        r = client.completions.create(model="random:tiny:f32", prompt=[5, 6, 7, 8], max_tokens=6)
        self.assertEqual(r.choices[0].text, text)

    def test_text_prompts_and_chats_are_refused_with_the_reason(self):
        for path, body in (("/v1/completions", {"model": "random:tiny:f32", "prompt": "hello"}),
                           ("/v1/chat/completions",
                            {"model": "random:tiny:f32",
                             "messages": [{"role": "user", "content": "hi"}]})):
            status, out = self.srv.post(path, body)
            self.assertEqual(status, 400, out)
            msg = json.loads(out)["error"]["message"]
            self.assertIn("no tokenizer", msg)
            self.assertIn("token ids", msg)
        # No tokenizer, no grammar over its tokens.
        status, out = self.srv.post("/v1/completions", {
            "model": "random:tiny:f32", "prompt": [5, 6], "response_format": {"type": "json_object"}})
        self.assertEqual(status, 400, out)
        err = json.loads(out)["error"]
        self.assertEqual(err["param"], "response_format")
        self.assertIn("no tokenizer", err["message"])

    def test_half_closed_clients_get_their_replies(self):
        # A client that shuts its write side down after a complete request (HTTP/1.0-style
        # clients, some proxies) still gets the whole reply, then the connection closes. An
        # HTTP/1.1 client may get an interim 100 first (the server's probe for a client that is
        # gone).
        body = {"model": "random:tiny:f32", "prompt": [5, 6, 7, 8], "max_tokens": 12}
        status, out = self.srv.post("/v1/completions", body)
        self.assertEqual(status, 200, out)
        want = json.loads(out)["choices"][0]["text"]
        for i in range(20):
            version = "HTTP/1.0" if i % 4 == 3 else "HTTP/1.1"
            stream = i % 5 == 4
            data = json.dumps(dict(body, stream=stream)).encode()
            head = (f"POST /v1/completions {version}\r\nHost: x\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
            t0 = time.monotonic()
            with socket.create_connection(("127.0.0.1", self.srv.port), timeout=60) as s:
                s.sendall(head.encode() + data)
                s.shutdown(socket.SHUT_WR)
                raw = b""
                while chunk := s.recv(65536):
                    raw += chunk
            took = time.monotonic() - t0
            interim, status, headers, reply = parse_http(raw)
            self.assertEqual(status, 200, (i, raw))
            # The interim 100 comes unless the reply had begun (a stream's headers) by then.
            self.assertIn(interim, ([], [100]) if version == "HTTP/1.1" else ([],), (i, raw))
            if stream:
                events, done = harness.sse_events(reply.decode())
                self.assertTrue(done, (i, raw))
                text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
            else:
                text = json.loads(reply)["choices"][0]["text"]
            self.assertEqual(text, want, (i, version, stream))
            self.assertLess(took, 20, (i, "closed after the reply, not the idle timeout"))


def parse_http(raw):
    """(interim 1xx statuses, status, headers with lower-case names, body) of one HTTP response
    read to the end of the connection; a chunked body is joined."""
    interim = []
    while True:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        if status >= 200:
            break
        interim.append(status)
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if headers.get("transfer-encoding") != "chunked":
        return interim, status, headers, raw
    body = b""
    while True:
        size, _, raw = raw.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return interim, status, headers, body
        body, raw = body + raw[:n], raw[n + 2:]


class ServeChoicesTest(unittest.TestCase):
    """Several choices in one request: n per prompt (chat and completions) and a batch of prompts
    (completions), whole and streamed, through curl and the openai client. A prompt's followers
    start after its leader has computed the prompt and take its KV blocks from the prefix cache
    (rinfer_prefix_cache_hits_total rises by the shared blocks)."""

    MODEL = "random:tiny:f32"
    LONG = list(range(3, 43))  # 40 ids: two full 16-token blocks to share

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.recipe = write_recipe(cls.dir.name)
        cls.srv = Server(cls.recipe, "--threads", "2").__enter__()
        cls.client = openai.OpenAI(base_url=cls.srv.url + "/v1", api_key="none", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)
        cls.dir.cleanup()

    def complete(self, **body):
        status, out = self.srv.post("/v1/completions", {"model": self.MODEL, **body})
        self.assertEqual(status, 200, out)
        return json.loads(out)

    def test_greedy_choices_agree_and_share_the_prompt(self):
        hits = self.srv.metric("rinfer_prefix_cache_hits_total", {"model": self.MODEL})
        r = self.complete(prompt=self.LONG, n=4, max_tokens=5, temperature=0)
        self.assertEqual([c["index"] for c in r["choices"]], [0, 1, 2, 3])
        texts = {c["text"] for c in r["choices"]}
        self.assertEqual(len(texts), 1, r)
        self.assertEqual(len(re.findall(r"<\d+>", texts.pop())), 5)
        self.assertEqual(r["usage"]["prompt_tokens"], 40)  # once per prompt, as OpenAI counts
        self.assertEqual(r["usage"]["completion_tokens"], 20)
        # Three followers, each finding both full blocks of the prompt cached.
        after = self.srv.metric("rinfer_prefix_cache_hits_total", {"model": self.MODEL})
        self.assertGreaterEqual(after - hits, 6, (hits, after))

    def test_sampled_choices_differ_and_repeat_with_the_seed(self):
        body = dict(prompt=[5, 6, 7], n=3, max_tokens=8, temperature=1.0, seed=11)
        first = [c["text"] for c in self.complete(**body)["choices"]]
        self.assertEqual(len(first), 3)
        self.assertGreater(len(set(first)), 1, first)
        again = [c["text"] for c in self.complete(**body)["choices"]]
        self.assertEqual(first, again)

    def test_a_batch_of_prompts_answers_each_in_order(self):
        single = [self.complete(prompt=p, max_tokens=4, temperature=0)["choices"][0]["text"]
                  for p in ([5, 6, 7], [9, 10, 11, 12])]
        r = self.complete(prompt=[[5, 6, 7], [9, 10, 11, 12]], n=2, max_tokens=4, temperature=0)
        self.assertEqual([c["text"] for c in r["choices"]],
                         [single[0], single[0], single[1], single[1]])
        self.assertEqual(r["usage"]["prompt_tokens"], 7)
        self.assertEqual(r["usage"]["completion_tokens"], 16)
        # echo: each choice starts with its own prompt.
        r = self.complete(prompt=[[5, 6, 7], [9, 10, 11, 12]], max_tokens=2, temperature=0,
                          echo=True)
        self.assertTrue(r["choices"][0]["text"].startswith("<5><6><7><"), r)
        self.assertTrue(r["choices"][1]["text"].startswith("<9><10><11><12><"), r)
        # The openai client: a list of token-id lists, n per prompt.
        c = self.client.completions.create(model=self.MODEL, prompt=[[5, 6, 7], [9, 10, 11, 12]],
                                           n=2, max_tokens=4, temperature=0)
        self.assertEqual([x.index for x in c.choices], [0, 1, 2, 3])
        self.assertEqual([x.text for x in c.choices], [single[0], single[0], single[1], single[1]])

    def test_streamed_choices_match_the_whole_reply(self):
        body = {"model": self.MODEL, "prompt": [[5, 6, 7], self.LONG], "n": 2, "max_tokens": 6,
                "temperature": 0.9, "seed": 5, "logprobs": 2}
        status, out = self.srv.post("/v1/completions", body)
        self.assertEqual(status, 200, out)
        whole = json.loads(out)
        status, out = self.srv.post("/v1/completions",
                                    {**body, "stream": True, "stream_options": {"include_usage": True}})
        self.assertEqual(status, 200, out)
        events, done = harness.sse_events(out.decode())
        self.assertTrue(done)
        texts, finishes, tokens = {}, {}, {}
        for e in events[:-1]:
            self.assertEqual(len(e["choices"]), 1, e)
            ch = e["choices"][0]
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
            if ch["logprobs"] is not None:
                tokens.setdefault(ch["index"], []).extend(ch["logprobs"]["tokens"])
            if ch["finish_reason"] is not None:
                self.assertNotIn(ch["index"], finishes, "one finish per choice")
                finishes[ch["index"]] = ch["finish_reason"]
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"], whole["usage"])
        for c in whole["choices"]:
            self.assertEqual(texts[c["index"]], c["text"])
            self.assertEqual(finishes[c["index"]], c["finish_reason"])
            self.assertEqual(tokens[c["index"]], c["logprobs"]["tokens"])
        # Chat with n: a model without a tokenizer refuses the chat itself, whatever n is.
        status, out = self.srv.post("/v1/chat/completions", {
            "model": self.MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2})
        self.assertEqual(status, 400, out)

    def test_a_refused_prompt_refuses_the_batch_and_leaves_nothing_running(self):
        status, out = self.srv.post("/v1/completions", {
            "model": self.MODEL, "prompt": [[5, 6], list(range(1, 300))], "n": 3,
            "max_tokens": 4})
        self.assertEqual(status, 400, out)
        err = json.loads(out)["error"]
        self.assertIn("prompt[1]", err["message"])
        self.assertEqual(err["code"], "context_length_exceeded")
        status, out = self.srv.post("/v1/completions", {
            "model": self.MODEL, "prompt": [[5, 6]] * 3, "n": 43})
        self.assertEqual(status, 400, out)
        self.assertEqual(json.loads(out)["error"]["param"], "n")
        for _ in range(100):
            if self.srv.metric("rinfer_requests_in_flight", {"model": self.MODEL}) == 0 and \
                    self.srv.metric("rinfer_requests_running", {"model": self.MODEL}) == 0:
                break
            time.sleep(0.05)
        self.assertEqual(self.srv.metric("rinfer_requests_running", {"model": self.MODEL}), 0)
        self.assertEqual(self.srv.metric("rinfer_requests_in_flight", {"model": self.MODEL}), 0)


class ServeSurfaceTest(unittest.TestCase):
    """What OpenAI clients and browser front-ends expect beyond generation: GET /v1/models/{id}
    (client.models.retrieve), OpenAI's string error codes (or null) with the status in the HTTP
    line, and opt-in CORS (--cors-origin): the preflight answered before the key check, the origin
    header on every reply, errors and streams included."""

    ORIGIN = "https://app.example.com"
    KEY = "surface-key"

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.recipe = write_recipe(cls.dir.name)
        cls.srv = Server(cls.recipe, "--threads", "2", "--api-key", cls.KEY, "--cors-origin",
                         cls.ORIGIN).__enter__()
        cls.client = openai.OpenAI(base_url=cls.srv.url + "/v1", api_key=cls.KEY, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)
        cls.dir.cleanup()

    def call(self, method, path, body=None, headers=None, key=True):
        """(status, headers with lower-case names, body text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=120)
        h = {"Origin": self.ORIGIN, **(headers or {})}
        if key:
            h["Authorization"] = "Bearer " + self.KEY
        if body is not None:
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    def test_models_retrieve(self):
        m = self.client.models.retrieve("random:tiny:f32")
        self.assertEqual(m.id, "random:tiny:f32")
        self.assertEqual(m.object, "model")
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.models.retrieve("gpt-9")
        self.assertEqual(e.exception.code, "model_not_found")
        status, _, body = self.call("POST", "/v1/models/random:tiny:f32", {})
        self.assertEqual(status, 405, body)

    def test_error_codes_are_openais_strings_or_null(self):
        cases = [
            # (method, path, body, key, status, code)
            ("POST", "/v1/completions", {"model": "random:tiny:f32", "prompt": [1]}, False, 401,
             "invalid_api_key"),
            ("POST", "/v1/completions", {"model": "gpt-9", "prompt": [1]}, True, 404,
             "model_not_found"),
            ("POST", "/v1/completions", {"model": "random:tiny:f32", "prompt": [3] * 300}, True,
             400, "context_length_exceeded"),
            ("POST", "/v1/completions", {"model": "random:tiny:f32", "prompt": [1],
                                         "temperature": "hot"}, True, 400, None),
            ("GET", "/v1/nowhere", None, True, 404, None),
            ("GET", "/v1/completions", None, True, 405, None),
        ]
        for method, path, body, key, status, code in cases:
            got, headers, text = self.call(method, path, body, key=key)
            self.assertEqual(got, status, f"{path} {text}")
            e = json.loads(text)["error"]
            self.assertEqual(e["code"], code, text)
            self.assertIsInstance(e["type"], str)
            # Errors carry the origin header too, so that the page can read them.
            self.assertEqual(headers.get("access-control-allow-origin"), self.ORIGIN, path)
        # The pre-handler limits (a body over the limit) answer in the same shape.
        got, headers, text = self.call("POST", "/v1/completions", None,
                                       headers={"Content-Length": str(1 << 30)})
        self.assertEqual(got, 413, text)
        self.assertIsNone(json.loads(text)["error"]["code"])
        self.assertEqual(headers.get("access-control-allow-origin"), self.ORIGIN)

    def test_completions_echo_the_prompt(self):
        req = {"model": "random:tiny:f32", "prompt": [5, 6, 7], "max_tokens": 3}
        status, _, body = self.call("POST", "/v1/completions", req)
        self.assertEqual(status, 200, body)
        plain = json.loads(body)["choices"][0]["text"]
        status, _, body = self.call("POST", "/v1/completions", dict(req, echo=True))
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["choices"][0]["text"], "<5><6><7>" + plain)
        # Streamed: the prompt comes with the first chunk; the whole text is the same.
        status, _, body = self.call("POST", "/v1/completions", dict(req, echo=True, stream=True))
        self.assertEqual(status, 200, body)
        events, done = harness.sse_events(body)
        self.assertTrue(done)
        self.assertTrue(events[0]["choices"][0]["text"].startswith("<5><6><7>"), events[0])
        self.assertEqual("".join(e["choices"][0]["text"] for e in events if e["choices"]),
                         "<5><6><7>" + plain)
        # The official client's echo, and what is refused with the reason.
        r = self.client.completions.create(model="random:tiny:f32", prompt=[5, 6, 7],
                                           max_tokens=3, echo=True)
        self.assertEqual(r.choices[0].text, "<5><6><7>" + plain)
        for extra, needle in (({"echo": True, "logprobs": 2}, "logprobs"),
                              ({"echo": "yes"}, "expected a boolean")):
            status, _, body = self.call("POST", "/v1/completions", dict(req, **extra))
            self.assertEqual(status, 400, body)
            e = json.loads(body)["error"]
            self.assertEqual(e["param"], "echo")
            self.assertIn(needle, e["message"])

    def test_cors_preflight_and_replies(self):
        status, headers, body = self.call(
            "OPTIONS", "/v1/chat/completions", key=False,
            headers={"Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"})
        self.assertEqual(status, 204, body)
        self.assertEqual(headers.get("access-control-allow-origin"), self.ORIGIN)
        self.assertIn("POST", headers.get("access-control-allow-methods", ""))
        self.assertEqual(headers.get("access-control-allow-headers"), "authorization, content-type")
        self.assertEqual(headers.get("vary"), "Origin")
        req = {"model": "random:tiny:f32", "prompt": [5, 6, 7], "max_tokens": 3}
        for stream in (False, True):
            status, headers, body = self.call("POST", "/v1/completions", dict(req, stream=stream))
            self.assertEqual(status, 200, body)
            self.assertEqual(headers.get("access-control-allow-origin"), self.ORIGIN, stream)
        status, headers, _ = self.call("GET", "/v1/models")
        self.assertEqual((status, headers.get("access-control-allow-origin")), (200, self.ORIGIN))


class ServeWithoutCorsTest(unittest.TestCase):
    def test_no_cors_headers_unless_asked(self):
        with tempfile.TemporaryDirectory() as d:
            recipe = write_recipe(d)
            with Server(recipe, "--threads", "1") as srv:
                conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
                conn.request("OPTIONS", "/v1/models", headers={"Origin": "https://x.example"})
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, 405)  # no preflight without --cors-origin
                self.assertIsNone(r.getheader("Access-Control-Allow-Origin"))
                conn.close()
            # A malformed origin is refused at the command line.
            out = subprocess.run(
                [harness.RINFER, "serve", recipe, "--cors-origin", "app.example.com"],
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("--cors-origin", out.stderr)


if __name__ == "__main__":
    unittest.main()
