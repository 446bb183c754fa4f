"""POST /v1/embeddings of rinfer serve with an embedding recipe (all-MiniLM-L6-v2) beside a chat
one, through curl and the official `openai` client (which asks for base64 by default): the
vectors against sentence-transformers' (the fixture of tests/tools/ref_sentence_embeddings.py),
float and base64 alike, token-id inputs, concurrent requests batched together, the model list,
and every error status.

  .venv-test/bin/python tests/server/serve_embeddings_test.py --rinfer build/default/rinfer
"""

import base64
import json
import math
import os
import struct
import threading
import unittest

import harness
from harness import MINILM, MINILM_RECIPE, SMOLLM2, SMOLLM2_RECIPE, Server, curl

harness.require_model()
harness.require_model(MINILM)
import openai  # noqa: E402

JSON = ["-H", "Content-Type: application/json"]
FIXTURE = os.path.join(harness.SOURCE_DIR, "tests/data/embedding")


def reference(n):
    with open(os.path.join(FIXTURE, "minilm_reference.json"), encoding="utf-8") as f:
        meta = json.load(f)
    with open(os.path.join(FIXTURE, "minilm_reference.f16"), "rb") as f:
        raw = f.read()
    dim = meta["dim"]
    vecs = []
    for i in range(n):
        vecs.append(list(struct.unpack_from(f"<{dim}e", raw, i * dim * 2)))
    return meta["texts"][:n], vecs


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


class ServeEmbeddingsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(SMOLLM2_RECIPE, MINILM_RECIPE, "--threads", "2").__enter__()
        cls.client = openai.OpenAI(base_url=cls.srv.url + "/v1", api_key="none", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    def post(self, body):
        status, data = self.srv.post("/v1/embeddings", body)
        return status, json.loads(data)

    def test_openai_client_matches_sentence_transformers(self):
        texts, want = reference(24)
        r = self.client.embeddings.create(model=MINILM, input=texts)  # base64 on the wire
        self.assertEqual(len(r.data), len(texts))
        self.assertEqual([d.index for d in r.data], list(range(len(texts))))
        self.assertGreater(r.usage.prompt_tokens, len(texts) * 2)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens)
        for d, w in zip(r.data, want):
            self.assertEqual(len(d.embedding), 384)
            self.assertGreaterEqual(cosine(d.embedding, w), 0.9999)

    def test_float_and_base64_agree_and_curl(self):
        texts, want = reference(3)
        s1, f = self.post({"model": MINILM, "input": texts, "encoding_format": "float"})
        s2, b = self.post({"model": MINILM, "input": texts, "encoding_format": "base64"})
        self.assertEqual((s1, s2), (200, 200))
        self.assertEqual(f["object"], "list")
        self.assertEqual(f["model"], MINILM)
        for fe, be in zip(f["data"], b["data"]):
            self.assertEqual(fe["object"], "embedding")
            decoded = struct.unpack("<384f", base64.b64decode(be["embedding"]))
            for x, y in zip(fe["embedding"], decoded):
                self.assertAlmostEqual(x, y, places=6)
        status, body = curl(self.srv.url + "/v1/embeddings", *JSON, "--data-binary",
                            json.dumps({"model": MINILM, "input": texts[0]}))
        self.assertEqual(status, 200, body)
        one = json.loads(body)["data"][0]["embedding"]
        self.assertGreaterEqual(cosine(one, want[0]), 0.9999)

    def test_token_ids_are_the_texts_pieces(self):
        # "hello world" is [CLS] 7592 2088 [SEP]: the ids give the text's vector.
        _, by_text = self.post({"model": MINILM, "input": "hello world"})
        _, by_ids = self.post({"model": MINILM, "input": [7592, 2088]})
        _, nested = self.post({"model": MINILM, "input": [[7592, 2088], [7592]]})
        a, b = by_text["data"][0]["embedding"], by_ids["data"][0]["embedding"]
        self.assertGreaterEqual(cosine(a, b), 0.999999)
        self.assertEqual(len(nested["data"]), 2)

    def test_concurrent_requests_get_their_own_vectors(self):
        texts, want = reference(64)
        results = {}

        def one(i):
            results[i] = self.post({"model": MINILM, "input": texts[i], "encoding_format": "float"})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(len(texts)):
            status, body = results[i]
            self.assertEqual(status, 200)
            self.assertGreaterEqual(cosine(body["data"][0]["embedding"], want[i]), 0.9999, i)
        self.assertGreaterEqual(
            self.srv.metric("rinfer_embedding_inputs_total", {"model": MINILM}), len(texts))

    def test_models_list_both(self):
        models = {m.id: m for m in self.client.models.list().data}
        self.assertIn(MINILM, models)
        self.assertIn(SMOLLM2, models)
        _, body = self.srv.get("/v1/models")
        entry = [m for m in json.loads(body)["data"] if m["id"] == MINILM][0]
        self.assertEqual(entry["task"], "embedding")
        self.assertEqual(entry["context_length"], 256)

    def test_errors(self):
        cases = [
            ({"model": MINILM}, 400, "input"),
            ({"model": MINILM, "input": []}, 400, "input"),
            ({"model": MINILM, "input": 7}, 400, "input"),
            ({"model": MINILM, "input": ["a", 3]}, 400, "input"),
            ({"model": MINILM, "input": [[1, 2], "a"]}, 400, "input"),
            ({"model": MINILM, "input": [[]]}, 400, "input"),
            ({"model": MINILM, "input": [5, -1]}, 400, "input"),
            ({"model": MINILM, "input": [99999999]}, 400, "input"),
            ({"model": MINILM, "input": ["x"] * 2049}, 400, "input"),
            ({"model": MINILM, "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
            ({"model": MINILM, "input": "x", "dimensions": 128}, 400, "dimensions"),
            ({"model": MINILM, "input": "x", "dimensions": "big"}, 400, "dimensions"),
            ({"model": "nope", "input": "x"}, 404, "model"),
            ({"model": SMOLLM2, "input": "x"}, 400, "model"),
        ]
        for body, status, param in cases:
            got, data = self.post(body)
            self.assertEqual(got, status, (body if len(json.dumps(body)) < 200 else "big", data))
            self.assertEqual(data["error"]["param"], param, data)
        # `model` left out: the one model of the endpoint's kind this server serves (one
        # embedding model, one text-generation model).
        got, data = self.post({"input": "x"})
        self.assertEqual(got, 200, data)
        self.assertEqual(data["model"], MINILM)
        got, raw = self.srv.post("/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        self.assertEqual(got, 200, raw)
        self.assertEqual(json.loads(raw)["model"], SMOLLM2)
        # An embedding model asked for a chat reply.
        status, data = self.srv.post("/v1/chat/completions",
                                     {"model": MINILM, "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(status, 400)
        self.assertIn("/v1/embeddings", json.loads(data)["error"]["message"])
        status, _ = self.srv.get("/v1/embeddings")
        self.assertEqual(status, 405)
        status, data = self.srv.request("POST", "/v1/embeddings", b"{\"model\": \"x\", \"input\": \"\xff\"}",
                                        headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400)
        with self.assertRaises(openai.BadRequestError):
            self.client.embeddings.create(model=MINILM, input="x", dimensions=100)


if __name__ == "__main__":
    unittest.main(verbosity=2)
