#!/usr/bin/env python3
"""Builds the search corpus of the embedding recipes: real English sentences as JSON lines
({"id", "text"}), from the gensim==4.4.0 wheel's test data (scripts/fetch-search-corpus.sh
downloads it and calls this with the folder):
  * lee_background.cor: 300 Australian news articles (Lee et al. 2005), split into sentences;
  * enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2: 206 Wikipedia
    articles, their wiki markup stripped (templates, references, tables, links, formatting),
    split into sentences.
Sentences of 6 to 80 words are kept, in the order they come, deduplicated. Python's standard
library only.

    python3 tests/tools/gen_search_corpus.py GENSIM_TEST_DATA_DIR OUT.jsonl
"""
import bz2
import json
import re
import sys
import xml.etree.ElementTree as ET

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def strip_wiki(text):
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<ref[^>]*/>", " ", text)
    text = re.sub(r"<ref[^>]*>.*?</ref>", " ", text, flags=re.S)
    for _ in range(5):  # nested templates and tables, innermost first
        text = re.sub(r"\{\{[^{}]*\}\}", " ", text)
        text = re.sub(r"\{\|[^{}]*?\|\}", " ", text, flags=re.S)
    text = re.sub(r"\[\[(?:File|Image|Category|[a-z]{2,3}):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]",
                  " ", text)
    text = re.sub(r"\[\[([^\]|]*)\|([^\]]*)\]\]", r"\2", text)
    text = re.sub(r"\[\[([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[https?://[^\s\]]+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"'{2,}", "", text)
    text = text.replace("&nbsp;", " ").replace("&amp;", "&").replace("&quot;", '"')
    lines = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or line[0] in "=|!{}*#:;" or line.startswith("__"):
            continue
        lines.append(line)
    return " ".join(lines)


def sentences(text):
    for s in SENTENCE_END.split(re.sub(r"\s+", " ", text)):
        s = s.strip()
        words = s.split()
        if 6 <= len(words) <= 80 and s[-1] in ".!?" and not re.search(r"[\[\]{}|<>=]", s):
            yield s


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    docs, seen = [], set()

    def add(prefix, doc, text):
        for i, s in enumerate(sentences(text)):
            if s not in seen:
                seen.add(s)
                docs.append({"id": f"{prefix}:{doc}:{i}", "text": s})

    with open(f"{src}/lee_background.cor", encoding="utf-8", errors="replace") as f:
        for n, article in enumerate(f):
            add("lee", n, article)
    path = f"{src}/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    title = None
    with bz2.open(path) as f:
        for _, el in ET.iterparse(f):
            tag = el.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = el.text or ""
            elif tag == "text" and el.text and not el.text.startswith("#REDIRECT"):
                add("wiki", title.replace(" ", "_"), strip_wiki(el.text))
                el.clear()
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    print(f"{len(docs)} sentences -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
