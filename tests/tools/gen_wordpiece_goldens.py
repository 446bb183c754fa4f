#!/usr/bin/env python3
"""Generates tests/data/tokenizer/minilm_wordpiece_goldens.json from Hugging Face `tokenizers`.

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install tokenizers==0.22.1
    RINFER_MODEL_DIR=~/.cache/recipes-infer/models /tmp/ref/bin/python \
        tests/tools/gen_wordpiece_goldens.py [GENSIM_TEST_DATA_DIR]

Ground truth: all-MiniLM-L6-v2's own tokenizer.json (BertNormalizer lowercase + accent strip +
CJK split + control removal, BertPreTokenizer, WordPiece with '##', TemplateProcessing
[CLS] A [SEP] / [CLS] A [SEP] B [SEP]) run by `tokenizers`, its padding off. Three kinds of case:
  * single texts, truncated to max_length (the model's 256, or a smaller one for some), as ids;
  * sentence pairs (longest-first truncation), as ids and token type ids;
  * the pre-tokenized words of each single text are not stored: ids are the whole contract.
With a gensim test-data directory, real news sentences from lee_background.cor are added.
"""
import json
import os
import sys

from tokenizers import Tokenizer

MODEL_DIR = os.environ.get("RINFER_MODEL_DIR",
                           os.path.expanduser("~/.cache/recipes-infer/models"))
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer",
                   "minilm_wordpiece_goldens.json")


def cases():
    c = []
    # ASCII prose and casing
    c += ["", " ", "   \t\n  ", "Hello world", "Hello, World!", "HELLO", "hello", "HeLLo WoRLD",
          "The quick brown fox jumps over the lazy dog.",
          "A man is eating food.", "A man is eating a piece of bread.",
          "The girl is carrying a baby.", "A man is riding a horse.",
          "A woman is playing violin.", "Two men pushed carts through the woods.",
          "A man is riding a white horse on an enclosed ground.",
          "A monkey is playing drums.", "Someone in a gorilla costume is playing a set of drums.",
          "What is the capital of France?", "Paris is the capital of France.",
          "How do I bake sourdough bread at home?",
          "Semantic search finds documents by meaning, not by keywords.",
          "Sentence embeddings map text to vectors; similar texts land close together.",
          "don't can't won't it's I'm you're they've we'd she'll",
          "e-mail, co-operate, state-of-the-art, well-known",
          "U.S.A. vs. U.K., e.g. i.e. etc.", "Mr. Smith went to Washington D.C. on Jan. 5th.",
          "supercalifragilisticexpialidocious", "antidisestablishmentarianism",
          "pneumonoultramicroscopicsilicovolcanoconiosis",
          "unbelievably uncharacteristically counterrevolutionaries"]
    # numbers, units, dates, money
    c += ["3.14159", "1,000,000", "42", "2024-12-02", "12:30pm", "$100.00", "€50", "£7.99",
          "100%", "-273.15°C", "1e-12", "0x1F600", "+1 (555) 123-4567", "v2.0.1-beta",
          "Room 101, 3rd floor", "1st 2nd 3rd 4th 21st", "H2O CO2 C6H12O6", "3/4 cup", "50km/h"]
    # punctuation runs and symbols
    c += ["!!!", "???", "...", "?!?!", "--", "---", "***", "###", "@@@", "((()))", "[[x]]",
          "{\"key\": \"value\"}", "<html><body>hi</body></html>", "a+b=c", "x^2 + y^2 = z^2",
          "foo_bar_baz", "snake_case and camelCase and PascalCase", "path/to/file.txt",
          "C:\\Windows\\System32", "https://example.com/a?b=c&d=e#f", "user@example.com",
          "#hashtag @mention", "~tilde `backtick` |pipe|", "a...b", "end.", "'quoted'",
          "\"double quoted\"", "«guillemets»", "„German quotes“", "‘curly’ “quotes”",
          "em—dash en–dash", "bullet • point", "ellipsis…", "§ 12 ¶ 3", "© ® ™", "± × ÷",
          "∑ ∫ √ ∞ ≈ ≠ ≤ ≥", "→ ← ↑ ↓ ⇒", "♠ ♣ ♥ ♦", "★☆", "¿Qué? ¡Sí!", "、。「」",
          "def f(x):\n    return x * 2\n", "int main() { return 0; }", "SELECT * FROM t;"]
    # accents and Latin-script languages
    c += ["café", "naïve", "résumé", "Ñandú", "Crème Brûlée", "façade", "coöperate",
          "Ångström", "Øresund", "Straße", "Größe", "Übermäßig", "ß", "ÀÁÂÃÄÅ", "àáâãäå",
          "Łódź", "Kraków", "Zażółć gęślą jaźń", "Příliš žluťoučký kůň", "Dvořák",
          "Tiếng Việt có dấu", "Phở bò", "İstanbul", "ıiİI", "Ğğ Şş", "Ελληνικά", "ΣΊΣΥΦΟΣ",
          "Αθήνα", "Русский язык", "Привет, мир!", "Ёжик", "Українська мова", "Ґанок",
          "Беларуская", "Български", "Српски", "Македонски", "Қазақша", "ǅemal", "ǈ ǋ ǲ",
          "ﬁne ﬂow", "Æsir æble", "Œuvre œil", "þorn ðæt", "Ŋŋ", "Ħal Ħ", "Ĳssel"]
    # CJK, other scripts
    c += ["中文字符", "我爱自然语言处理", "北京是中国的首都。", "漢字", "日本語のテキスト",
          "ひらがな カタカナ", "東京タワー", "ｶﾀｶﾅ", "한국어", "안녕하세요 세계",
          "中文English混合", "Chinese中文mixed", "𠀀𠀁", "㐀㐁", "豈更", "⺀⺁", "〇一二三",
          "العربية", "مرحبا بالعالم", "עברית", "שלום עולם", "हिन्दी", "नमस्ते दुनिया",
          "বাংলা", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ภาษาไทย", "สวัสดีชาวโลก", "ລາວ",
          "ქართული", "Հայերեն", "አማርኛ", "ᚠᚢᚦᚨᚱᚲ", "Ⲙⲓⲛ", "ꯃꯩꯇꯩ", "ᠮᠣᠩᠭᠣᠯ"]
    # emoji
    c += ["😀", "😀😃😄", "I love 🍕!", "🥰 hi", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️",
          "☕ coffee", "🤖🧠", "🫠 melting", "🪷", "emoji😀in😃words", "1️⃣2️⃣", "✅ done ❌ failed"]
    # whitespace, control and invisible characters
    c += ["a\tb", "a\nb", "a\r\nb", "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b",
          "a\u200bb", "a\u200cb", "a\u200db", "a\u2060b", "\ufeffbom", "soft\u00adhyphen",
          "a\u0000b", "a\u0007b", "a\u001bb", "a\u007fb", "a\u0085b", "a\ufffdb",
          "x\u0378y", "a\ue000b", "a\U000f0000b", "a\u2002b\u2003c\u2009d", "a\u180eb",
          "  leading and trailing  ", "multiple     spaces", "\n\n\nnewlines\n\n",
          "a\u0301", "e\u0301\u0302", "\u0301alone", "n\u0303", "ﾞ", "a\u20ddb", "\u0903"]
    # fullwidth, compatibility, ligatures, letterlike
    c += ["ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３", "Ⅻ Ⅳ", "ℌℑℜ", "ℓ", "㎞", "½ ¼ ¾", "x² y³", "H₂O",
          "Ω Å K", "µ", "ﬀ ﬃ", "ª º"]
    # long words and texts
    c += ["a" * 99, "a" * 100, "a" * 101, "b" * 250, "xyz" * 40, "word " * 300,
          "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30,
          "".join(chr(0x4E00 + i) for i in range(300)), "é" * 120, "😀" * 120,
          "-" * 500, "ab" * 51, "Ünïcödé" * 20]
    return c


def pairs():
    return [("What is the capital of France?", "Paris is the capital of France."),
            ("A man is eating food.", "A man is eating a piece of bread."),
            ("", "empty first"), ("empty second", ""), ("", ""),
            ("Café au lait", "中文字符 and 😀"),
            ("short", "long " * 400), ("long " * 400, "short"),
            ("left " * 200, "right " * 200), ("How old are you?", "I am 42 years old."),
            ("Ελληνικά κείμενα", "Русский текст"), ("a" * 150, "b" * 150)]


def main():
    tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "all-minilm-l6-v2", "tokenizer.json"))
    tok.no_padding()
    singles = cases()
    if len(sys.argv) > 1:
        with open(os.path.join(sys.argv[1], "lee_background.cor"), encoding="utf-8") as f:
            text = f.read()
        sentences = [s.strip() + "." for s in text.replace("\n", " ").split(". ") if s.strip()]
        singles += sentences[: 400 - len(singles)] if len(singles) < 400 else []
    out = {"model": "all-minilm-l6-v2", "tokenizers": __import__("tokenizers").__version__,
           "single": [], "pair": []}
    for i, s in enumerate(singles):
        max_length = 256 if i % 7 else 16  # every seventh case also checks a short truncation
        tok.enable_truncation(max_length=max_length, strategy="longest_first")
        out["single"].append({"text": s, "max_length": max_length, "ids": tok.encode(s).ids})
    for a, b in pairs():
        for max_length in (256, 32):
            tok.enable_truncation(max_length=max_length, strategy="longest_first")
            e = tok.encode(a, b)
            out["pair"].append({"a": a, "b": b, "max_length": max_length, "ids": e.ids,
                                "type_ids": e.type_ids})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(out['single'])} single, {len(out['pair'])} pair cases -> {OUT}")


if __name__ == "__main__":
    main()
