#!/usr/bin/env python3
"""Generates the tokenizer goldens in tests/data/tokenizer/ from independent implementations.

    pip install gguf tokenizers sentencepiece protobuf
    RINFER_MODEL_DIR=/tmp/rinfer-models python3 tests/tools/gen_tokenizer_goldens.py

Ground truth (built from the GGUF vocabularies, so it is the same vocabulary rinfer reads):
  * SmolLM2 (tokenizer.ggml.model=gpt2, pre=smollm): a Hugging Face `tokenizers` BPE with the
    pre-tokenizer of SmolLM2's real tokenizer.json, Sequence[Digits(individual_digits=True),
    ByteLevel(add_prefix_space=False, use_regex=True)], no normalizer, ByteLevel decoder; the 17
    control tokens are special added tokens (parse_special) or absent (plain text).
  * Gemma 3 (tokenizer.ggml.model=llama, no merges): the `sentencepiece` library itself, with a
    ModelProto rebuilt from the GGUF pieces, scores and types: BPE, byte_fallback, identity
    normalizer, no dummy prefix, whitespace escaped to U+2581. GGUF converters write user-defined
    pieces with real spaces (llama.cpp "pre-normalizes" them); sentencepiece matches them on the
    normalized text, so they go back to U+2581 here. sentencepiece never parses control tokens, so
    parse_special splits the text on control-token strings first (leftmost, longest) and encodes
    the pieces between them, which is what HF and llama.cpp do.
  * Pre-tokenizer splits for gpt2, smollm, llama-bpe and qwen2 from `tokenizers.pre_tokenizers`
    (Split with the original regexes, Isolated; Digits), as byte lengths of the pieces.

SmolLM2's vocabulary has no token for 21 bytes (0x04 0x06 0x13 0x14 0x16 0x1D 0xC0 0xC1 0xF1
0xF2 0xF5-0xFF); `tokenizers` (without an unk_token) and llama.cpp drop such bytes, and so does
rinfer: those cases carry the "decoded" text.

Two large texts are not stored, only their id count, FNV-1a-64 of the ids (int32 little-endian)
and the first ids: "mix", about 1 MB made by an LCG from the cases (the C++ test makes the same
text), and "repeat", 1,000,000 times 'a'.
"""
import json
import os
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_pb2

MODEL_DIR = os.environ.get("RINFER_MODEL_DIR",
                           os.path.expanduser("~/.cache/recipes-infer/models"))
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer")

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
         r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def cases():
    """The golden strings, in a fixed order (the C++ test builds the 1 MB text from them)."""
    c = []
    # ASCII prose
    c += [
        "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "It was the best of times, it was the worst of times.",
        "A tokenizer splits text into tokens; a detokenizer joins them again.",
        "Once upon a time, in a land far, far away, there lived a small dragon.",
        "Transformers are neural networks built from attention layers.",
        "SmolLM2 is a family of compact language models.", "hello", "HELLO", "Hello",
        "hElLo WoRlD", "a", "I", " ", "", "x y z", "The year 1984 was a novel.",
        "Mr. Smith went to Washington D.C. on Jan. 5th.", "e.g. i.e. etc. vs. a.k.a.",
        "She said: \"Don't go!\" and left.", "Question? Answer! Exclamation!!! Ellipsis...",
        "semi;colon:colon,comma.period", "(parentheses) [brackets] {braces} <angles>",
        "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
        "email@example.com https://example.org/path?q=1&r=2#frag",
        "C:\\Users\\name\\file.txt /usr/local/bin/rinfer ~/.cache",
    ]
    # whitespace: runs of spaces, tabs, newlines, carriage returns, unicode spaces
    c += [
        "two  spaces", "three   spaces", "many          spaces", " leading space",
        "trailing space ", "  leading two", "trailing two  ", "\tleading tab", "tab\there",
        "tabs\t\t\tmany", "line\nbreak", "two\n\nbreaks", "three\n\n\nbreaks", "\n", "\n\n",
        "\n\n\n\n\n", " \n ", "\r\n", "windows\r\nline\r\nends", "mixed \t\n \t\n whitespace",
        "    indented four", "\t\tindented tabs", "trailing newline\n", "\n\nleading newlines",
        "end with spaces    ", "   ", "\t", "\t \t", " \n\n  \n", "a\u00a0b non-breaking",
        "ideographic\u3000space", "em\u2003space", "line\u2028separator", "para\u2029separator",
        "next\u0085line", "zero\u200bwidth", "mongolian\u180evowel", "bom\ufeffinside",
        "vertical\x0btab", "form\x0cfeed", "a" + " " * 40 + "b", "\n" * 40, "\t" * 33,
        " " * 33, "x\n \ny", "word \n", "word  \n  word",
    ]
    # digits and numbers
    c += [
        "0", "7", "42", "123", "1234", "12345", "123456789", "3.14159265358979",
        "1,000,000", "1.000.000,50", "-273.15", "+1 (555) 123-4567", "2024-06-30T12:34:56Z",
        "0x7FFF 0b1010 0o755", "1e10 2.5E-3", "99 bottles of beer", "v1.2.3-rc.4",
        "31415926535897932384626433832795028841971693993751", "1st 2nd 3rd 4th 21st",
        "12:30pm", "$100.00 €50 £20 ¥1000", "50%", "١٢٣٤ Arabic-Indic digits",
        "१२३ Devanagari digits", "①②③ circled", "Ⅻ roman numeral", "x²+y²=z²", "½ ¾ ⅓",
    ]
    # contractions
    c += [
        "don't", "Don't", "DON'T", "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE",
        "he'll", "HE'LL", "she'd", "it's", "IT'S", "can't won't shouldn't",
        "'s 't 're 've 'm 'll 'd", "rock 'n' roll", "the '90s", "O'Reilly's", "y'all'd've",
        "ʼs modifier apostrophe", "it’s curly", "'quoted'",
    ]
    # accented Latin, Greek, Cyrillic
    c += [
        "café", "naïve résumé", "Crème brûlée", "Ångström", "Straße", "Łódź", "Ærøskøbing",
        "São Paulo", "Dvořák", "Œuvre", "ﬁ ligature", "e\u0301 combining acute",
        "n\u0303 combining tilde", "Ελληνικά γράμματα", "Привет, мир!", "Україна",
        "Ünïcödé", "İstanbul ıi", "ǅ titlecase",
    ]
    # CJK, Arabic, Hebrew, Hindi and other scripts
    c += [
        "你好，世界！", "我爱自然语言处理。", "中文和English混合", "日本語のテキストです。",
        "カタカナとひらがな", "한국어 텍스트", "안녕하세요", "مرحبا بالعالم", "السلام عليكم",
        "שלום עולם", "नमस्ते दुनिया", "हिन्दी भाषा", "বাংলা", "தமிழ்", "ภาษาไทย",
        "ქართული", "Հայերեն", "አማርኛ", "ᚠᚢᚦᚨᚱᚲ runes", "𝕳𝖊𝖑𝖑𝖔 math letters",
        "𠜎𠜱𠝹 rare CJK", "漢字かなカナ123ABC", "مرحبا123", "אבג abc",
    ]
    # emoji
    c += [
        "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "1️⃣", "🧑🏿‍💻",
        "emoji 🎉 party", "👩‍🔬 scientist", "🐈‍⬛ black cat", "✨ sparkles ✨", "🤖🧠📚",
    ]
    # code
    c += [
        "def main():\n    print(\"hello\")\n",
        "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "#include <stdio.h>\nint main(void) { return 0; }",
        "const x = (a, b) => a + b; // arrow",
        "if x != nil {\n\treturn fmt.Errorf(\"bad: %w\", err)\n}",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "<div class=\"box\"><p>Hi</p></div>", "{\"key\": [1, 2, 3], \"ok\": true}",
        "x = [i**2 for i in range(10) if i % 2 == 0]", "a && b || !c", "a->b->c; a::b::c",
        "$ ls -la | grep '.txt' > out.log 2>&1", "// comment\n/* block */\n# hash",
        "std::vector<std::string> v{\"a\", \"b\"};", "fn main() -> Result<(), Box<dyn Error>> {}",
        "    return self.weight * x + self.bias", "<table><tr><td>1</td></tr></table>",
        "<b>bold</b> <i>it</i> <code>x</code>", "```python\nprint(1)\n```", "# Title\n\n- item\n- item",
        "====", "----------", "....", "!!!???", "@@ -1,3 +1,4 @@", "\\n \\t \\\\",
    ]
    # special-token text (plain text with parse_special off, tokens with it on)
    c += [
        "<|im_start|>user\nHi<|im_end|>\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<|endoftext|>", "text<|endoftext|>more", "<|im_end|><|im_end|>", "<|im_start",
        "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
        "<bos>hello<eos>", "<pad><unk><mask>", "<start_of_turn>", "<end_of_turn>",
        "<repo_name>rinfer<file_sep>main.cpp", "a<|im_start|>b", "<s></s>", "<unused0>",
        "[multimodal]", "<start_of_image>", "<|unknown_token|>", "< |im_start| >",
    ]
    # odd characters
    c += [
        "\x00", "a\x00b", "\x00\x00\x00", "\x01\x02\x7f", "\u2581 lower one eighth block",
        "\u2581\u2581", "\ufffd replacement", "\U0010ffff", "\ue000 private use", "\u00ad soft",
        "\u200d zwj alone", "\u200e\u200f marks", "ctrl\x04\x06\x13\x1d chars",
    ]
    # mixtures, generated deterministically
    words = ["the", "model", "tokenizer", "Ünïcödé", "数据", "🙂", "123", "don't", "  ", "\n",
             "\t", "x", "ABC", "مرحبا", "नमस्ते", "—", "...", "<|im_end|>", "ß", "42.0"]
    state = 12345
    for i in range(40):
        parts = []
        for _ in range(3 + i % 7):
            state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
            parts.append(words[(state >> 33) % len(words)])
        c.append((" " if i % 3 else "").join(parts))
    # longer paragraphs
    c += [
        "The tokenizer is the first and last step of every request: text becomes ids before the "
        "model runs, and ids become text again as they are generated. Getting it exactly right "
        "matters, because a single different id changes everything the model sees afterwards.",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
        "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
        "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.",
        "Zwei flinke Boxer jagen die quirlige Eva und ihren Mops durch Sylt. "
        "Portez ce vieux whisky au juge blond qui fume. El veloz murciélago hindú comía feliz.",
    ]
    return c


def lcg_text(cs, target_bytes, seed):
    state = seed
    out = []
    n = 0
    while n < target_bytes:
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        t = cs[(state >> 33) % len(cs)]
        sep = "\n" if (state >> 20) & 1 else " "
        piece = (t + sep).encode("utf-8")
        out.append(piece)
        n += len(piece)
    return b"".join(out).decode("utf-8")


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in (i & 0xFFFFFFFF).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001B3) % 2**64
    return "%016x" % h


def read_gguf(path):
    r = gguf.GGUFReader(path)
    f = r.fields

    def strings(key):
        fld = f[key]
        return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]

    def numbers(key):
        fld = f[key]
        return [fld.parts[i][0].item() for i in fld.data]

    meta = {"tokens": strings("tokenizer.ggml.tokens"), "types": numbers("tokenizer.ggml.token_type")}
    if "tokenizer.ggml.merges" in f:
        meta["merges"] = strings("tokenizer.ggml.merges")
    if "tokenizer.ggml.scores" in f:
        meta["scores"] = numbers("tokenizer.ggml.scores")
    for k in ("bos_token_id", "eos_token_id", "unknown_token_id"):
        key = "tokenizer.ggml." + k
        meta[k] = f[key].parts[-1][0].item() if key in f else None
    return meta


def byte_level_tokenizers(meta, pre_tokenizer, normalizer=None, user_defined=False):
    """A `tokenizers` BPE over the GGUF vocabulary and merges with a ByteLevel decoder, twice:
    plain, and with the control tokens (type 3) as special added tokens. With `user_defined`,
    the type-4 tokens are added tokens that match in any text, as in HF."""
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]

    def make():
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
        if normalizer is not None:
            tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizer
        tok.decoder = decoders.ByteLevel()
        if user_defined:
            tok.add_tokens([AddedToken(t, special=False, normalized=False)
                            for t, ty in zip(meta["tokens"], meta["types"]) if ty == 4])
        return tok

    plain = make()
    special = make()
    special.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, ty in zip(meta["tokens"], meta["types"]) if ty == 3])
    return plain, special


def smollm2_tokenizers(meta):
    """SmolLM2's tokenizer.json: Digits(individual) then ByteLevel with its regex."""
    return byte_level_tokenizers(meta, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))


def qwen2_tokenizers(meta):
    """Qwen2.5's tokenizer.json: NFC, Split(qwen2 regex, isolated) then ByteLevel without its own
    regex; user-defined tokens (<tool_call>, </tool_call>) are added tokens."""
    return byte_level_tokenizers(meta, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.NFC(), user_defined=True)


def gemma_sentencepiece(meta):
    m = sp_pb2.ModelProto()
    unk = meta["unknown_token_id"]
    for i, (t, ty, s) in enumerate(zip(meta["tokens"], meta["types"], meta["scores"])):
        p = m.pieces.add()
        p.piece = t.replace(" ", "\u2581") if ty == 4 else t
        p.score = s
        p.type = 2 if i == unk else ty  # sentencepiece wants the unknown piece typed UNKNOWN
    ts = m.trainer_spec
    ts.model_type = sp_pb2.TrainerSpec.BPE
    ts.vocab_size = len(meta["tokens"])
    ts.byte_fallback = True
    ts.unk_id = unk
    ts.bos_id = meta["bos_token_id"]
    ts.eos_id = meta["eos_token_id"]
    ts.pad_id = 0
    ts.unk_piece = meta["tokens"][unk]
    ts.bos_piece = meta["tokens"][ts.bos_id]
    ts.eos_piece = meta["tokens"][ts.eos_id]
    ts.pad_piece = meta["tokens"][0]
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def split_special(text, specials):
    """Leftmost, then longest, occurrence of a special-token string: [(is_special, str)]."""
    by_first = {}
    for s in specials:
        by_first.setdefault(s[0], []).append(s)
    for v in by_first.values():
        v.sort(key=len, reverse=True)
    out, start, pos = [], 0, 0
    while pos < len(text):
        hit = next((s for s in by_first.get(text[pos], []) if text.startswith(s, pos)), None)
        if hit is None:
            pos += 1
            continue
        if pos > start:
            out.append((False, text[start:pos]))
        out.append((True, hit))
        pos += len(hit)
        start = pos
    if start < len(text):
        out.append((False, text[start:]))
    return out


def big_entry(name, text, ids):
    return {"name": name, "bytes": len(text.encode("utf-8")), "n_ids": len(ids),
            "fnv1a64": fnv1a64(ids), "head": ids[:200]}


def main():
    cs = cases()
    assert len(cs) >= 200, len(cs)
    mix = lcg_text(cs, 1_000_000, 20240630)
    repeat = "a" * 1_000_000

    def hf_goldens(name, model, plain, special, generator):
        """Cases and big texts through a `tokenizers` pair (plain, with special tokens)."""
        out = []
        for t in cs:
            ids = plain.encode(t, add_special_tokens=False).ids
            ids_sp = special.encode(t, add_special_tokens=False).ids
            e = {"text": t, "ids": ids}
            if ids_sp != ids:
                e["ids_special"] = ids_sp
            decoded = special.decode(ids, skip_special_tokens=False)
            if decoded != t:
                # SmolLM2: a byte without a token in the vocabulary is dropped; Qwen2: the NFC form
                e["decoded"] = decoded
            out.append(e)
        bigs = [big_entry(n, x, plain.encode(x, add_special_tokens=False).ids)
                for n, x in (("mix", mix), ("repeat", repeat))]
        write(name, {"model": model, "generator": generator, "mix_seed": 20240630, "cases": out,
                     "big": bigs})

    version = __import__("tokenizers").__version__
    meta = read_gguf(os.path.join(MODEL_DIR, "smollm2-135m-instruct-q4_1.gguf"))
    hf_goldens("smollm2_goldens.json", "smollm2-135m-instruct-q4_1", *smollm2_tokenizers(meta),
               "tokenizers %s BPE + Sequence[Digits(individual), ByteLevel]" % version)
    # Qwen2.5-Coder (the 1.5B and 0.5B files share the vocabulary)
    meta = read_gguf(os.path.join(MODEL_DIR, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    hf_goldens("qwen2_goldens.json", "qwen2.5-coder-1.5b-instruct-q4_k_m", *qwen2_tokenizers(meta),
               "tokenizers %s BPE + NFC + Sequence[Split(qwen2), ByteLevel(no regex)]" % version)

    # Gemma 3
    meta = read_gguf(os.path.join(MODEL_DIR, "gemma3-270m-q4_k_m.gguf"))
    sp = gemma_sentencepiece(meta)
    controls = [t for t, ty in zip(meta["tokens"], meta["types"]) if ty in (2, 3)]
    tok_id = {t: i for i, t in enumerate(meta["tokens"])}
    out = []
    for t in cs:
        ids = sp.encode(t)
        ids_sp = []
        for is_special, s in split_special(t, controls):
            ids_sp += [tok_id[s]] if is_special else sp.encode(s)
        e = {"text": t, "ids": ids}
        if ids_sp != ids:
            e["ids_special"] = ids_sp
        decoded = sp.decode(ids)
        if decoded != t:
            e["decoded"] = decoded  # sentencepiece cannot give back a literal U+2581
        out.append(e)
    bigs = [big_entry(n, x, sp.encode(x)) for n, x in (("mix", mix), ("repeat", repeat))]
    write("gemma3_goldens.json", {
        "model": "gemma3-270m-q4_k_m",
        "generator": "sentencepiece %s BPE from the GGUF pieces/scores/types" % spm.__version__,
        "mix_seed": 20240630, "cases": out, "big": bigs})

    # Pre-tokenizer splits
    pres = {
        "gpt2": pre_tokenizers.Split(Regex(GPT2), "isolated"),
        "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                           pre_tokenizers.Split(Regex(GPT2), "isolated")]),
        "llama-bpe": pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
        "qwen2": pre_tokenizers.Split(Regex(QWEN2), "isolated"),
    }
    splits = {}
    for name, pre in pres.items():
        splits[name] = [[len(p.encode("utf-8")) for p, _ in pre.pre_tokenize_str(t)] for t in cs]
    write("pretokenizer_goldens.json", {"texts": cs, "splits": splits})


def write(name, obj):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(path), os.path.getsize(path), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
