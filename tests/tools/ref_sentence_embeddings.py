#!/usr/bin/env python3
"""Reference sentence embeddings of all-MiniLM-L6-v2 from sentence-transformers (PyTorch), the
fixture that tests/models/bert_test.cpp compares rinfer's embeddings with.

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch sentence-transformers
    /tmp/ref/bin/python tests/tools/ref_sentence_embeddings.py GENSIM_TEST_DATA_DIR

GENSIM_TEST_DATA_DIR is gensim/test/test_data from the gensim==4.4.0 wheel (pip download
--no-deps gensim==4.4.0, unzip). The inputs (at least 1,000): sentences of the Lee news corpus
(lee_background.cor, lee.cor), movie-review snippets (pang_lee_polarity.cor), the varied strings
of the WordPiece goldens (accents, CJK, emoji, control characters, punctuation runs), and long
texts of whole articles, over the model's 256 tokens (truncated, as sentence-transformers
truncates). Writes tests/data/embedding/minilm_reference.json (the texts, the model's
max_seq_length, the torch and sentence-transformers versions) and minilm_reference.f16 (the
embeddings, [n, 384] float16 little-endian, row-major), computed in float32 on the CPU.
"""
import json
import os
import sys

import numpy as np
import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "data", "embedding")
MODEL_DIR = os.environ.get("RINFER_MODEL_DIR",
                           os.path.expanduser("~/.cache/recipes-infer/models"))


def sentences(text):
    out = []
    for s in text.replace("\n", " ").split(". "):
        s = s.strip()
        if len(s) > 3:
            out.append(s if s.endswith((".", "?", "!")) else s + ".")
    return out


def inputs(gensim_dir):
    with open(os.path.join(gensim_dir, "lee_background.cor"), encoding="utf-8", errors="replace") as f:
        articles = [line.strip() for line in f if line.strip()]
    with open(os.path.join(gensim_dir, "lee.cor"), encoding="latin-1") as f:
        lee = [line.strip() for line in f if line.strip()]
    with open(os.path.join(gensim_dir, "pang_lee_polarity.cor"), encoding="utf-8", errors="replace") as f:
        reviews = [line.split(" ", 1)[1].strip() for line in f if " " in line]
    goldens = json.load(open(os.path.join(HERE, "..", "data", "tokenizer",
                                          "minilm_wordpiece_goldens.json"), encoding="utf-8"))
    varied = [c["text"] for c in goldens["single"][:260]]
    texts = []
    for a in articles[:150]:
        texts += sentences(a)[:4]
    texts = texts[:560]
    texts += reviews[:150]
    texts += varied
    texts += lee[:30]            # whole documents: many are over 256 tokens
    texts += articles[150:180]   # whole news articles: over 256 tokens
    return texts


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    texts = inputs(sys.argv[1])
    torch.manual_seed(0)
    model = SentenceTransformer(os.path.join(MODEL_DIR, "all-minilm-l6-v2"), device="cpu")
    emb = model.encode(texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
    lengths = [len(model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"])
               for t in texts]
    os.makedirs(OUT_DIR, exist_ok=True)
    emb.astype("<f2").tofile(os.path.join(OUT_DIR, "minilm_reference.f16"))
    meta = {"model": "all-minilm-l6-v2", "dim": int(emb.shape[1]), "count": len(texts),
            "max_seq_length": model.max_seq_length, "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "over_max_length": sum(1 for n in lengths if n >= model.max_seq_length),
            "texts": texts}
    with open(os.path.join(OUT_DIR, "minilm_reference.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(texts)} texts ({meta['over_max_length']} truncated at {model.max_seq_length}) -> "
          f"{OUT_DIR}")


if __name__ == "__main__":
    main()
