"""rinfer serve on loopback, used through curl and the official `openai` Python client: chat and
completions, streamed and whole, stop strings, max tokens, usage, logprobs, seeds, the model list,
every error status, a client that leaves mid-stream, a full queue and a graceful SIGTERM.

  .venv-test/bin/python tests/server/serve_api_test.py --rinfer build/default/rinfer
"""

import json
import os
import socket
import tempfile
import threading
import time
import unittest

import harness
from harness import SMOLLM2, SMOLLM2_RECIPE, Server, curl, sse_events

harness.require_model()
import openai  # noqa: E402  (after the skip: the venv may be absent where the model is)

KEY = "test-key-123"
AUTH = ["-H", "Authorization: Bearer " + KEY]
JSON = ["-H", "Content-Type: application/json"]


def chat_body(content="What is the capital of France?", **kw):
    body = {"model": SMOLLM2, "messages": [{"role": "user", "content": content}],
            "temperature": 0, "max_tokens": 12}
    body.update(kw)
    return body


class ServeApiTest(unittest.TestCase):
    srv = None

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(SMOLLM2_RECIPE, "--api-key", KEY, "--max-body-bytes", "65536",
                         "--max-headers", "40", "--timeout", "5", "--threads", "2").__enter__()
        cls.client = openai.OpenAI(base_url=cls.srv.url + "/v1", api_key=KEY, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    def curl_post(self, path, body, *extra):
        data = body if isinstance(body, str) else json.dumps(body)
        return curl(self.srv.url + path, *AUTH, *JSON, "--data-binary", data, *extra)

    def error_of(self, body):
        e = json.loads(body)["error"]
        for k in ("message", "type", "param", "code"):
            self.assertIn(k, e)
        return e

    # -- curl ------------------------------------------------------------------------------------

    def test_health_models_and_metrics(self):
        status, body = curl(self.srv.url + "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ready"}))
        status, body = curl(self.srv.url + "/v1/models", *AUTH)
        self.assertEqual(status, 200)
        ids = [m["id"] for m in json.loads(body)["data"]]
        self.assertEqual(ids, [SMOLLM2])
        status, body = curl(self.srv.url + "/metrics")
        self.assertEqual(status, 200)
        for family in ("rinfer_http_requests_total", "rinfer_time_to_first_token_seconds",
                       "rinfer_kv_blocks_used", "rinfer_requests_waiting",
                       "rinfer_prefix_cache_hit_rate", "rinfer_preemptions_total"):
            self.assertIn("# TYPE " + family, body)

    def test_chat_whole_and_streamed_agree(self):
        status, body = self.curl_post("/v1/chat/completions", chat_body())
        self.assertEqual(status, 200, body)
        whole = json.loads(body)
        self.assertEqual(whole["object"], "chat.completion")
        choice = whole["choices"][0]
        self.assertEqual(choice["message"]["role"], "assistant")
        self.assertTrue(choice["message"]["content"])
        self.assertIn(choice["finish_reason"], ("stop", "length"))
        u = whole["usage"]
        self.assertGreater(u["prompt_tokens"], 10)
        self.assertLessEqual(u["completion_tokens"], 12)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])

        status, body = self.curl_post("/v1/chat/completions",
                                      chat_body(stream=True, stream_options={"include_usage": True}),
                                      "-N")
        self.assertEqual(status, 200, body)
        events, done = sse_events(body)
        self.assertTrue(done, body)
        self.assertEqual(events[0]["object"], "chat.completion.chunk")
        self.assertEqual(events[0]["choices"][0]["delta"].get("role"), "assistant")
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        # Greedy: the streamed reply is the whole one, piece by piece.
        self.assertEqual(text, choice["message"]["content"])
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"]["completion_tokens"], u["completion_tokens"])
        finishes = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
        self.assertEqual(finishes[-1], choice["finish_reason"])
        self.assertTrue(all(f is None for f in finishes[:-1]))
        self.assertEqual(len({e["id"] for e in events}), 1)

    def test_completions_whole_and_streamed(self):
        body = {"model": SMOLLM2, "prompt": "The three primary colors are", "max_tokens": 8,
                "temperature": 0, "ignore_eos": True}
        status, whole = self.curl_post("/v1/completions", body)
        self.assertEqual(status, 200, whole)
        whole = json.loads(whole)
        self.assertEqual(whole["object"], "text_completion")
        self.assertEqual(whole["usage"]["completion_tokens"], 8)
        self.assertEqual(whole["choices"][0]["finish_reason"], "length")
        status, streamed = self.curl_post("/v1/completions", dict(body, stream=True), "-N")
        events, done = sse_events(streamed)
        self.assertTrue(done)
        self.assertEqual("".join(e["choices"][0]["text"] for e in events),
                         whole["choices"][0]["text"])

    def test_chat_choices_whole_streamed_and_through_openai(self):
        """n = 3 chat choices: greedy ones agree with the one-choice reply; streamed, each index
        opens with the assistant role and ends with its own finish_reason; text prompts batched."""
        status, body = self.curl_post("/v1/chat/completions", chat_body())
        one = json.loads(body)["choices"][0]["message"]["content"]
        r = self.client.chat.completions.create(**chat_body(n=3))
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertEqual([c.message.content for c in r.choices], [one] * 3)
        self.assertEqual(r.usage.completion_tokens, 3 * json.loads(body)["usage"]["completion_tokens"])
        status, body = self.curl_post("/v1/chat/completions", chat_body(n=2, stream=True), "-N")
        self.assertEqual(status, 200, body)
        events, done = sse_events(body)
        self.assertTrue(done)
        roles, texts, finishes = {}, {}, {}
        for e in events:
            ch = e["choices"][0]
            if "role" in ch["delta"]:
                self.assertNotIn(ch["index"], roles, "the role comes once per choice")
                self.assertNotIn(ch["index"], texts, "the role comes first")
                roles[ch["index"]] = ch["delta"]["role"]
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["delta"].get("content", "")
            if ch["finish_reason"] is not None:
                finishes[ch["index"]] = ch["finish_reason"]
        self.assertEqual(roles, {0: "assistant", 1: "assistant"})
        self.assertEqual(texts, {0: one, 1: one})
        self.assertEqual(set(finishes), {0, 1})
        c = self.client.completions.create(model=SMOLLM2, prompt=["The sky is", "Water is"],
                                           max_tokens=5, temperature=0)
        self.assertEqual([x.index for x in c.choices], [0, 1])
        self.assertNotEqual(c.choices[0].text, c.choices[1].text)

    def test_structured_output_always_validates(self):
        """response_format json_schema (sampled, several choices, streamed too), json_object, the
        client's parse() with a pydantic model, and the `grammar` extension: every reply parses
        and validates (jsonschema)."""
        import jsonschema
        import pydantic
        # Bounded strings and arrays: a small model sampled at temperature 1 would otherwise
        # fill an unbounded array until max_tokens (finish "length", the JSON cut short).
        name = {"type": "string", "maxLength": 30}
        schemas = [
            {"type": "object", "properties": {
                "name": name, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b \"c\""]},
                         "maxItems": 3},
                "address": {"type": "object", "properties": {"city": name, "zip": name},
                            "required": ["city"]}},
             "required": ["name", "age"]},
            {"type": "object", "properties": {"ok": {"type": "boolean"},
                                              "score": {"type": "number"},
                                              "items": {"type": "array", "maxItems": 4,
                                                        "items": {"type": "integer",
                                                                  "minimum": -99, "maximum": 99}}},
             "required": ["ok", "score", "items"]},
        ]
        count = 0
        for i, schema in enumerate(schemas):
            r = self.client.chat.completions.create(
                **chat_body("Describe a person as JSON.", temperature=1.0, seed=i, n=4,
                            max_tokens=300),
                response_format={"type": "json_schema",
                                 "json_schema": {"name": f"s{i}", "schema": schema}})
            for c in r.choices:
                self.assertEqual(c.finish_reason, "stop", c.message.content)
                jsonschema.validate(json.loads(c.message.content), schema)
                count += 1
        # Streamed: the deltas join into JSON that validates.
        status, body = self.curl_post("/v1/chat/completions", chat_body(
            "Describe a person as JSON.", stream=True, max_tokens=200,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "p", "schema": schemas[0]}}), "-N")
        events, done = sse_events(body)
        self.assertTrue(done)
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        jsonschema.validate(json.loads(text), schemas[0])
        r = self.client.chat.completions.create(
            **chat_body('What is 2+2? Answer as a JSON object with the key "answer".',
                        max_tokens=150),
            response_format={"type": "json_object"})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)

        class City(pydantic.BaseModel):
            city: str = pydantic.Field(max_length=30)
            country: str = pydantic.Field(max_length=30)
            population: int = pydantic.Field(ge=0, le=100_000_000)

        p = self.client.beta.chat.completions.parse(
            **chat_body("Describe Paris.", max_tokens=200), response_format=City)
        self.assertIsInstance(p.choices[0].message.parsed, City)
        # The grammar extension (EBNF), on completions.
        r = self.client.completions.create(model=SMOLLM2, prompt="Is the sky blue? Answer:",
                                           max_tokens=5, extra_body={"grammar": 'root ::= " yes" | " no"'})
        self.assertIn(r.choices[0].text, (" yes", " no"))
        self.assertGreaterEqual(count, 8)
        # A schema that does not compile is a 400 naming the field.
        status, body = self.curl_post("/v1/chat/completions", chat_body(
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x", "schema": {"type": "nope"}}}))
        self.assertEqual(status, 400, body)
        self.assertEqual(self.error_of(body)["param"], "response_format")

    def test_error_statuses(self):
        url = self.srv.url
        with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
            f.write(b'{"model": "x\xff", "messages": []}')
            self.bad_utf8 = f.name
        self.addCleanup(os.unlink, f.name)
        cases = [
            # (curl args, status, substring of the message, param)
            ([url + "/v1/chat/completions", *AUTH, *JSON, "-d", "{not json"], 400, "not valid JSON", None),
            ([url + "/v1/chat/completions", *AUTH, *JSON, "-d",
              json.dumps(chat_body(temperature="hot"))], 400, "expected a number", "temperature"),
            ([url + "/v1/chat/completions", *AUTH, *JSON, "-d",
              json.dumps(chat_body(max_tokens=-1))], 400, "out of range", "max_tokens"),
            ([url + "/v1/chat/completions", *AUTH, *JSON, "--data-binary", "@" + self.bad_utf8],
             400, "not valid UTF-8", None),
            ([url + "/v1/chat/completions", *AUTH, *JSON, "-d",
              json.dumps(chat_body(content="word " * 3000))], 400, "context", "messages"),
            ([url + "/v1/chat/completions", *JSON, "-d", json.dumps(chat_body())], 401, "API key", None),
            ([url + "/v1/chat/completions", "-H", "Authorization: Bearer wrong", *JSON, "-d",
              json.dumps(chat_body())], 401, "API key", None),
            ([url + "/v1/nowhere", *AUTH], 404, "no route", None),
            ([url + "/v1/chat/completions", *AUTH, *JSON, "-d",
              json.dumps(chat_body(model="gpt-9"))], 404, "not served here", "model"),
            ([url + "/v1/embeddings", *AUTH, *JSON, "-d", '{"model": "x", "input": "hi"}'], 404,
             "not served here", "model"),
            ([url + "/v1/embeddings", *AUTH, *JSON, "-d",
              json.dumps({"model": SMOLLM2, "input": "hi"})], 400, "needs an embedding recipe",
             "model"),
            ([url + "/v1/chat/completions", *AUTH], 405, "takes POST", None),
            ([url + "/v1/chat/completions", *AUTH, *JSON, "-d", "x" * 70000], 413, "at most 65536", None),
            ([url + "/v1/chat/completions", *AUTH, "-H", "Content-Type: text/plain", "-d",
              json.dumps(chat_body())], 415, "must be JSON", None),
            ([url + "/health", *[a for i in range(60) for a in ("-H", f"X-H{i}: v")]], 431,
             "header fields", None),
        ]
        for args, status, needle, param in cases:
            got, body = curl(*args)
            self.assertEqual(got, status, f"{args[:1]} {body}")
            e = self.error_of(body)
            self.assertIn(needle, e["message"])
            if param:
                self.assertEqual(e["param"], param)
        # The server still serves.
        self.assertEqual(self.curl_post("/v1/chat/completions", chat_body(max_tokens=2))[0], 200)

    def test_model_may_be_left_out_when_one_is_served(self):
        body = chat_body(max_tokens=4, temperature=0)
        del body["model"]
        status, reply = self.curl_post("/v1/chat/completions", body)
        self.assertEqual(status, 200, reply)
        whole = json.loads(reply)
        self.assertEqual(whole["model"], SMOLLM2)
        status, named = self.curl_post("/v1/chat/completions", chat_body(max_tokens=4, temperature=0))
        self.assertEqual(status, 200, named)
        self.assertEqual(whole["choices"][0]["message"]["content"],
                         json.loads(named)["choices"][0]["message"]["content"])
        # No embedding model here: /v1/embeddings without a model says so.
        status, reply = self.curl_post("/v1/embeddings", {"input": "hi"})
        self.assertEqual(status, 400, reply)
        e = self.error_of(reply)
        self.assertIn("'model': missing, and this server serves no embedding model", e["message"])
        self.assertEqual(e["param"], "model")

    def test_a_client_leaving_mid_stream_frees_its_blocks(self):
        aborted = self.srv.metric("rinfer_requests_total", {"model": SMOLLM2, "finish": "aborted"})
        body = json.dumps(chat_body(content="Tell me a long story.", max_tokens=400,
                                    ignore_eos=True, stream=True)).encode()
        s = socket.create_connection(("127.0.0.1", self.srv.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 3:
            got += s.recv(4096)
        self.assertGreater(self.srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}), 0)
        s.close()
        deadline = time.time() + 20
        while time.time() < deadline:
            if (self.srv.metric("rinfer_requests_in_flight", {"model": SMOLLM2}) == 0 and
                    self.srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}) == 0):
                break
            time.sleep(0.05)
        self.assertEqual(self.srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}), 0)
        self.assertEqual(
            self.srv.metric("rinfer_requests_total", {"model": SMOLLM2, "finish": "aborted"}),
            aborted + 1)

    # -- the openai client -----------------------------------------------------------------------

    def test_openai_chat_stream_and_models(self):
        c = self.client
        self.assertEqual([m.id for m in c.models.list()], [SMOLLM2])
        r = c.chat.completions.create(model=SMOLLM2, messages=[{"role": "user", "content": "Hi!"}],
                                      temperature=0, max_tokens=10)
        self.assertTrue(r.choices[0].message.content)
        self.assertLessEqual(r.usage.completion_tokens, 10)
        stream = c.chat.completions.create(model=SMOLLM2,
                                           messages=[{"role": "user", "content": "Hi!"}],
                                           temperature=0, max_tokens=10, stream=True,
                                           stream_options={"include_usage": True})
        parts, usage = [], None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                parts.append(ch.delta.content or "")
        self.assertEqual("".join(parts), r.choices[0].message.content)
        self.assertEqual(usage.completion_tokens, r.usage.completion_tokens)

    def test_openai_completions_max_tokens_and_stop(self):
        c = self.client
        prompt = "List the days of the week: Monday, Tuesday,"
        r = c.completions.create(model=SMOLLM2, prompt=prompt, temperature=0, max_tokens=16,
                                 extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 16)
        self.assertEqual(r.choices[0].finish_reason, "length")
        text = r.choices[0].text
        words = [w for w in text.split() if len(w) > 3]
        self.assertTrue(words, text)
        stop = words[len(words) // 2]
        r2 = c.completions.create(model=SMOLLM2, prompt=prompt, temperature=0, max_tokens=16,
                                  stop=[stop], extra_body={"ignore_eos": True})
        self.assertEqual(r2.choices[0].finish_reason, "stop")
        self.assertEqual(r2.choices[0].text, text[: text.index(stop)])

    def test_openai_logprobs_and_seeds(self):
        c = self.client
        r = c.chat.completions.create(model=SMOLLM2, messages=[{"role": "user", "content": "Hi"}],
                                      temperature=0, max_tokens=6, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 3)
            lps = [a.logprob for a in t.top_logprobs]
            self.assertEqual(lps, sorted(lps, reverse=True))
            self.assertEqual(t.top_logprobs[0].token, t.token)  # greedy picks the top one
            self.assertAlmostEqual(t.top_logprobs[0].logprob, t.logprob, places=5)
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)

        def sample(seed):
            return c.chat.completions.create(
                model=SMOLLM2, messages=[{"role": "user", "content": "Write a word."}],
                temperature=1.0, top_p=1.0, max_tokens=12, seed=seed).choices[0].message.content

        self.assertEqual(sample(7), sample(7))

    def test_greedy_reply_is_its_own_top_logprobs(self):
        # temperature 0 sent, no penalties sent: each token is the model's most likely one, as
        # the logprobs report it, although the recipe sets a repeat penalty (a reply that repeats
        # itself shows the difference).
        r = self.client.chat.completions.create(
            model=SMOLLM2, messages=[{"role": "user", "content": "Repeat the word 'yes' forty times."}],
            temperature=0, max_tokens=48, logprobs=True, top_logprobs=1,
            extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 48)
        self.assertEqual([t.token for t in content], [t.top_logprobs[0].token for t in content])

    def test_openai_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=SMOLLM2,
                                                messages=[{"role": "user", "content": "x"}],
                                                temperature=5)
        self.assertIn("temperature", str(e.exception))
        with self.assertRaises(openai.NotFoundError):
            self.client.chat.completions.create(model="nope",
                                                messages=[{"role": "user", "content": "x"}])
        bad = openai.OpenAI(base_url=self.srv.url + "/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.models.list()


class QueueAndShutdownTest(unittest.TestCase):
    def test_full_queue_is_429_and_sigterm_drains(self):
        with Server(SMOLLM2_RECIPE, "--max-queue", "0", "--threads", "2",
                    "--drain-timeout", "120") as srv:
            # Short replies and long client timeouts: under the sanitizers, beside other tests on
            # two cores, 16 seats of SmolLM2 decode slowly.
            body = {"model": SMOLLM2, "prompt": "Count: 1, 2, 3,", "max_tokens": 8,
                    "temperature": 0, "ignore_eos": True}
            results = []
            lock = threading.Lock()

            def one():
                status, data = srv.post("/v1/completions", body, timeout=600)
                with lock:
                    results.append((status, data))

            threads = [threading.Thread(target=one) for _ in range(40)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            statuses = sorted(s for s, _ in results)
            self.assertIn(429, statuses)
            self.assertGreaterEqual(statuses.count(200), 16)
            self.assertEqual(set(statuses), {200, 429})
            for status, data in results:
                if status == 429:
                    self.assertIn("busy", json.loads(data)["error"]["message"])
                else:
                    self.assertEqual(json.loads(data)["usage"]["completion_tokens"], 8)

            # SIGTERM with streams in flight: they finish, new connections are refused, exit 0.
            # The signal goes once every stream has its headers: the server has admitted it (a
            # request that reaches the server after the signal is rightly refused with 503).
            streams = []
            admitted = threading.Semaphore(0)

            def stream():
                status, data = srv.post("/v1/completions", dict(body, stream=True, max_tokens=16),
                                        timeout=600, on_headers=lambda _: admitted.release())
                with lock:
                    streams.append((status, data.decode()))

            threads = [threading.Thread(target=stream) for _ in range(4)]
            for t in threads:
                t.start()
            for _ in threads:
                self.assertTrue(admitted.acquire(timeout=300), "a stream got no headers in 300 s")
            srv.proc.send_signal(15)
            time.sleep(0.5)
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
            for t in threads:
                t.join()
            self.assertEqual(srv.stop(), 0, "".join(srv.stderr_lines))
            self.assertEqual(len(streams), 4)
            for status, data in streams:
                self.assertEqual(status, 200)
                events, done = sse_events(data)
                self.assertTrue(done)
                self.assertEqual(events[-1]["choices"][0]["finish_reason"], "length")

    def test_sigterm_aborts_what_outlives_the_drain_deadline(self):
        with Server(SMOLLM2_RECIPE, "--threads", "2", "--drain-timeout", "1") as srv:
            body = {"model": SMOLLM2, "prompt": "Once", "max_tokens": 100000, "temperature": 0,
                    "ignore_eos": True, "stream": True}
            got = {}
            admitted = threading.Event()

            def stream():
                got["r"] = srv.post("/v1/completions", body, timeout=120,
                                    on_headers=lambda _: admitted.set())

            t = threading.Thread(target=stream)
            t.start()
            self.assertTrue(admitted.wait(120), "the stream got no headers in 120 s")
            t0 = time.time()
            srv.proc.send_signal(15)
            t.join(60)
            self.assertEqual(srv.stop(), 0, "".join(srv.stderr_lines))
            self.assertLess(time.time() - t0, 30)
            status, data = got["r"]
            self.assertEqual(status, 200)
            events, done = sse_events(data.decode())
            self.assertTrue(done)
            self.assertIn("cancelled", events[-1]["error"]["message"])
            self.assertIn("1 requests aborted at the deadline", "".join(srv.stderr_lines))


if __name__ == "__main__":
    unittest.main(verbosity=2)
