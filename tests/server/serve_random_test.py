"""`rinfer serve` of a random-weight model on the CPU (model: random:tiny:f32): the same engine
path as a real model (LlmEngine, the engine core) with no tokenizer: a prompt of token ids in,
each generated id as "<id>" out, through curl and the official openai client; a text prompt or
a chat is a 400 that says why. Needs no reference model."""

import json
import os
import re
import tempfile
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


class ServeRandomTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.recipe = os.path.join(cls.dir.name, "random.yaml")
        with open(cls.recipe, "w") as f:
            f.write(RECIPE)
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


if __name__ == "__main__":
    unittest.main()
