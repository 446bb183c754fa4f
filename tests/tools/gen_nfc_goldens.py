#!/usr/bin/env python3
"""NFC goldens from Python's unicodedata.normalize for tests/tokenizer/nfc_test.cpp:
tests/data/tokenizer/nfc_goldens.json, pairs [input, NFC(input)]:
  * every code point that has a canonical decomposition: alone, and decomposed (NFD) with an
    acute accent after it;
  * Hangul syllables in pieces (L V, L V T, LV T);
  * 2,000 random strings from a fixed seed mixing starters, combining marks of different
    classes (reordering), Hangul jamo and composition exclusions.

    python3 tests/tools/gen_nfc_goldens.py
"""
import json
import os
import random
import unicodedata

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer",
                   "nfc_goldens.json")


def main():
    pairs = []
    decomposable = [cp for cp in range(0x110000)
                    if not 0xD800 <= cp <= 0xDFFF and unicodedata.decomposition(chr(cp))
                    and not unicodedata.decomposition(chr(cp)).startswith("<")]
    for cp in decomposable:
        s = chr(cp)
        for x in (s, unicodedata.normalize("NFD", s) + "\u0301"):
            pairs.append([x, unicodedata.normalize("NFC", x)])
    for l in (0x1100, 0x1112):
        for v in (0x1161, 0x1175):
            pairs.append([chr(l) + chr(v), unicodedata.normalize("NFC", chr(l) + chr(v))])
            for t in (0x11A8, 0x11C2):
                x = chr(l) + chr(v) + chr(t)
                pairs.append([x, unicodedata.normalize("NFC", x)])
                x = unicodedata.normalize("NFC", chr(l) + chr(v)) + chr(t)
                pairs.append([x, unicodedata.normalize("NFC", x)])
    rng = random.Random(20261207)
    pool = ("aeiouAEIOUnNcCsSzZ" + "\u0300\u0301\u0302\u0303\u0308\u030A\u030C\u0323\u0327\u0328"
            "\u0345\u05B0\u0951\u093C\u0958\u0915\u1100\u1161\u11A8\u3099\u304B\u212B\u2126"
            "\u1E9B\u0344\u0F73 ,.!\u00E9\u00C5\uAC00")
    for _ in range(2000):
        x = "".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        pairs.append([x, unicodedata.normalize("NFC", x)])
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"unicode": unicodedata.unidata_version, "pairs": pairs}, f, ensure_ascii=False,
                  separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(OUT), len(pairs), "pairs", os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
