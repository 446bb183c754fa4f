// Tokenizer behaviour beyond the goldens: pre-tokenizer splits, invalid UTF-8 and NUL bytes,
// special tokens, errors, small synthetic vocabularies (dummy prefix, no byte fallback), streaming.
#include <gtest/gtest.h>

#include <algorithm>

#include <thread>

#include "formats/gguf_writer.h"
#include "golden_fixture.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/streaming_decoder.h"
#include "tokenizer/unicode.h"

namespace rinfer {
namespace {

constexpr const char* kSmol = "smollm2-135m-instruct-q4_1";
constexpr const char* kGemma = "gemma3-270m-q4_k_m";
constexpr EncodeOptions kPlain{.add_special = false, .parse_special = false};

#define REQUIRE_MODEL(var, name)                          \
  const Tokenizer* var = test::reference_tokenizer(name); \
  if (var == nullptr) GTEST_SKIP() << test::missing_model_message(name)

TEST(PreTokenizer, SplitsMatchHuggingFace) {
  const auto& g = test::goldens("pretokenizer_goldens.json");
  const auto& texts = g["texts"];
  for (const auto& [name, splits] : g["splits"].items()) {
    auto pre = PreTokenizer::from_name(name);
    ASSERT_TRUE(pre.ok()) << name;
    int failures = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      std::vector<std::pair<size_t, size_t>> pieces;
      ASSERT_TRUE(pre.value()->split(text, pieces).ok());
      std::vector<size_t> lengths;
      for (const auto& [b, e] : pieces) lengths.push_back(e - b);
      if (lengths != splits[i].get<std::vector<size_t>>() && failures++ < 5) {
        ADD_FAILURE() << name << " splits '" << text << "' differently";
      }
    }
  }
}

TEST(PreTokenizer, UnknownNameAndBadRegexAreErrors) {
  auto pre = PreTokenizer::from_name("no-such-pre");
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.status().message().find("no-such-pre"), std::string::npos);
  auto bad = PreTokenizer::from_patterns("custom", {"(unclosed"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos);
}

TEST(PreTokenizer, InvalidBytesBecomeTheirOwnPieces) {
  auto pre = PreTokenizer::from_name("gpt2");
  ASSERT_TRUE(pre.ok());
  std::vector<std::pair<size_t, size_t>> pieces;
  const std::string text = "ab\xff\xfe cd";
  ASSERT_TRUE(pre.value()->split(text, pieces).ok());
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], std::make_pair(size_t{0}, size_t{2}));
  EXPECT_EQ(pieces[1], std::make_pair(size_t{2}, size_t{4}));
  EXPECT_EQ(pieces[2], std::make_pair(size_t{4}, size_t{7}));
}

TEST(Unicode, DecodeRejectsIllFormedSequences) {
  size_t len;
  EXPECT_EQ(unicode::decode_utf8("\xC3\xA9", 0, &len), 0xE9);
  EXPECT_EQ(len, 2u);
  for (std::string_view bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                               "\xFF", "\x80", "\xE2\x82", "\xF0\x9F\x98"}) {
    EXPECT_EQ(unicode::decode_utf8(bad, 0, &len), -1) << bad.size();
    EXPECT_EQ(len, 1u);
  }
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xE2"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xFF"), 3u);      // never valid: not held back
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xED\xA0"), 4u);  // a surrogate can't complete
}

TEST(Unicode, ByteLevelAlphabetRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string back;
  ASSERT_TRUE(unicode::byte_level_decode(unicode::byte_level_encode(all), back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(unicode::byte_level_encode(" "), "\xC4\xA0");   // 'Ġ'
  EXPECT_EQ(unicode::byte_level_encode("\n"), "\xC4\x8A");  // 'Ċ'
}

// Random bytes (mostly ill-formed UTF-8, with NULs) never crash and round-trip exactly (but for
// the documented exceptions, see expected_round_trip).
void check_random_bytes_round_trip(const Tokenizer& tok) {
  std::vector<std::string> inputs = {"\xFF",
                                     "\xC3",
                                     "a\xE2\x82",
                                     "\xED\xA0\x80 surrogate",
                                     "\xC0\xAF overlong",
                                     "\xF4\x90\x80\x80",
                                     std::string(3, '\0'),
                                     std::string("a\0b\xFF\0", 5),
                                     "\xE4\xBD\xA0\xE5\xA5"};
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    auto bytes = test::random_bytes(1 + seed % 97, seed);
    inputs.emplace_back(bytes.begin(), bytes.end());
  }
  for (const auto& s : inputs) {
    for (bool parse_special : {false, true}) {
      auto ids = tok.encode(s, {.add_special = true, .parse_special = parse_special});
      ASSERT_TRUE(ids.ok());
      auto back = tok.decode(ids.value(), /*skip_special=*/true);
      ASSERT_TRUE(back.ok());
      EXPECT_TRUE(back.value() == test::expected_round_trip(tok, s))
          << "round trip of " << s.size() << " random bytes";
    }
  }
}

TEST(InvalidUtf8, ByteLevelBpeIsLossless) {
  REQUIRE_MODEL(tok, kSmol);
  check_random_bytes_round_trip(*tok);
  // 0xFF has no token in SmolLM2's vocabulary: dropped, as in HF tokenizers and llama.cpp.
  EXPECT_TRUE(tok->encode("\xFF", kPlain)->empty());
  // An ill-formed byte is its own piece: the byte-level token for 0xE4 (a lead byte alone).
  auto ids = tok->encode("\xE4", kPlain);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 1u);
  EXPECT_EQ(tok->piece(ids->at(0)), unicode::byte_level_encode("\xE4"));
}

TEST(InvalidUtf8, SentencePieceUsesByteFallback) {
  REQUIRE_MODEL(tok, kGemma);
  check_random_bytes_round_trip(*tok);
  auto ids = tok->encode(
      "a\xFF"
      "b",
      kPlain);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ(tok->piece(ids->at(1)), "<0xFF>");
  auto nul = tok->encode(std::string_view("\0", 1), kPlain);
  ASSERT_TRUE(nul.ok());
  ASSERT_EQ(nul->size(), 1u);
  EXPECT_EQ(tok->piece(nul->at(0)), "<0x00>");
}

// Long runs of one character take the priority-queue paths (no quadratic blow-up); the 1 MB run of
// 'a' is in the goldens, these are kept smaller for the sanitizer build.
TEST(LongInput, LongRunsOfOneCharacter) {
  for (const char* name : {kSmol, kGemma}) {
    const Tokenizer* tok = test::reference_tokenizer(name);
    if (tok == nullptr) continue;
    std::string cjk;
    for (int i = 0; i < 100'000; ++i) cjk += "\xE4\xBD\xA0";  // 你
    for (const std::string& s :
         {std::string(300'000, ' '), std::string(300'000, '7'), std::string(300'000, '\n'), cjk}) {
      auto ids = tok->encode(s, kPlain);
      ASSERT_TRUE(ids.ok());
      EXPECT_LE(ids->size(), s.size());
      EXPECT_EQ(tok->decode(ids.value()).value(), s);
    }
  }
}

TEST(SpecialTokens, ParsedOnlyWhenAllowed) {
  REQUIRE_MODEL(smol, kSmol);
  auto on = smol->encode("<|im_start|>user", {.add_special = false, .parse_special = true});
  auto off = smol->encode("<|im_start|>user", kPlain);
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_EQ(on->front(), *smol->find_token("<|im_start|>"));
  EXPECT_GT(off->size(), on->size());
  EXPECT_TRUE(smol->is_end_of_generation(*smol->find_token("<|im_end|>")));
  EXPECT_TRUE(smol->is_end_of_generation(*smol->find_token("<|endoftext|>")));
  EXPECT_FALSE(smol->is_end_of_generation(on->back()));
  EXPECT_TRUE(smol->is_control(on->front()));
  EXPECT_EQ(smol->decode(on.value(), /*skip_special=*/true).value(), "user");

  REQUIRE_MODEL(gemma, kGemma);
  auto turn = gemma->encode("<start_of_turn>model\n", {.add_special = true, .parse_special = true});
  ASSERT_TRUE(turn.ok());
  ASSERT_GE(turn->size(), 3u);
  EXPECT_EQ(turn->at(0), gemma->bos());
  EXPECT_EQ(turn->at(1), *gemma->find_token("<start_of_turn>"));
  EXPECT_TRUE(gemma->is_end_of_generation(*gemma->find_token("<end_of_turn>")));
  EXPECT_TRUE(gemma->is_end_of_generation(gemma->eos()));
}

TEST(Threads, ConcurrentEncodesAgree) {
  for (const char* name : {kSmol, kGemma}) {
    const Tokenizer* tok = test::reference_tokenizer(name);
    if (tok == nullptr) continue;
    const std::string text =
        test::lcg_text(test::goldens("smollm2_goldens.json")["cases"], 50'000, 7);
    const auto want = tok->encode(text).value();
    std::vector<std::thread> threads;
    std::vector<int> same(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] { same[t] = tok->encode(text).value() == want; });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(same, std::vector<int>(4, 1)) << name;
  }
}

TEST(Decode, IdsOutOfRangeAreErrorsNamingTheId) {
  REQUIRE_MODEL(tok, kSmol);
  const std::vector<int32_t> ids = {1, 2, tok->vocab_size()};
  auto r = tok->decode(ids);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find(std::to_string(tok->vocab_size())), std::string::npos);
  EXPECT_NE(r.status().message().find("position 2"), std::string::npos);
  const std::vector<int32_t> negative = {-5};
  EXPECT_FALSE(tok->decode(negative).ok());
}

TEST(Streaming, HoldsBackSplitCharactersAndReplacesBrokenOnes) {
  REQUIRE_MODEL(tok, kGemma);
  auto byte = [&](int b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    return *tok->find_token(name);
  };
  StreamingDecoder s(*tok);
  EXPECT_EQ(s.push(byte(0xF0)), "");
  EXPECT_EQ(s.push(byte(0x9F)), "");
  EXPECT_EQ(s.push(byte(0x98)), "");
  EXPECT_EQ(s.pending(), 3u);
  EXPECT_EQ(s.push(byte(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(s.push(byte(0xFF)), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(s.push(byte(0xE4)), "");
  EXPECT_EQ(s.push(*tok->find_token("a")),
            "\xEF\xBF\xBD"
            "a");  // the character was broken
  EXPECT_EQ(s.push(byte(0xE4)), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");  // left incomplete at the end
  EXPECT_EQ(s.push(tok->vocab_size()), "");
}

// ---- small synthetic GGUF vocabularies ----

std::string write_gguf(const std::string& name, GgufWriter& w) {
  const std::string path = test::write_temp_file(name, "");
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

struct TinySpm {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  void add(std::string t, float s, int32_t type = 1) {
    tokens.push_back(std::move(t));
    scores.push_back(s);
    types.push_back(type);
  }
};

GgufWriter tiny_spm_writer(bool byte_fallback, bool space_prefix) {
  TinySpm v;
  v.add("<unk>", 0, 2);
  v.add("<s>", 0, 3);
  v.add("</s>", 0, 3);
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      v.add(name, 0, 6);
    }
  }
  for (const char* p : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d"}) v.add(p, -100);
  v.add("ll", -1);
  v.add("\xE2\x96\x81h", -2);
  v.add("\xE2\x96\x81he", -3);
  v.add("\xE2\x96\x81hell", -4);
  v.add("or", -5);
  v.add("\xE2\x96\x81w", -6);
  v.add("\xE2\x96\x81wor", -7);
  v.add("<tag>", 0, 4);
  GgufWriter w;
  w.set("general.architecture", GgufWriter::Value::string("llama"));
  w.set("tokenizer.ggml.model", GgufWriter::Value::string("llama"));
  w.set("tokenizer.ggml.tokens", GgufWriter::Value::strings_array(v.tokens));
  w.set("tokenizer.ggml.scores", GgufWriter::Value::array(v.scores));
  w.set("tokenizer.ggml.token_type", GgufWriter::Value::array(v.types));
  w.set("tokenizer.ggml.unknown_token_id", GgufWriter::Value::of<uint32_t>(0));
  w.set("tokenizer.ggml.bos_token_id", GgufWriter::Value::of<uint32_t>(1));
  w.set("tokenizer.ggml.eos_token_id", GgufWriter::Value::of<uint32_t>(2));
  w.set("tokenizer.ggml.add_space_prefix", GgufWriter::Value::of<bool>(space_prefix));
  return w;
}

std::vector<std::string> pieces_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(tok.piece(id));
  return out;
}

TEST(SentencePiece, DummyPrefixScoresAndUserDefinedPieces) {
  GgufWriter w = tiny_spm_writer(/*byte_fallback=*/true, /*space_prefix=*/true);
  auto tok = Tokenizer::load(write_gguf("tiny_spm.gguf", w));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = *tok.value();
  auto ids = t.encode("hello world<tag>x", {.add_special = true, .parse_special = true});
  ASSERT_TRUE(ids.ok());
  const std::vector<std::string> want = {
      "<s>", "\xE2\x96\x81hell", "o", "\xE2\x96\x81wor", "l", "d", "<tag>", "<0x78>"};
  EXPECT_EQ(pieces_of(t, ids.value()), want);
  EXPECT_EQ(t.decode(ids.value(), /*skip_special=*/true).value(), "hello world<tag>x");
  // The dummy prefix goes on the first fragment and after a special token, not elsewhere.
  auto after = t.encode("<s>hello", {.add_special = false, .parse_special = true});
  EXPECT_EQ(pieces_of(t, after.value()),
            (std::vector<std::string>{"<s>", "\xE2\x96\x81hell", "o"}));
}

TEST(SentencePiece, WithoutByteFallbackUnknownsBecomeUnk) {
  GgufWriter w = tiny_spm_writer(/*byte_fallback=*/false, /*space_prefix=*/false);
  auto tok = Tokenizer::load(write_gguf("tiny_spm_nobytes.gguf", w));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto ids = tok.value()->encode("hé\xFF", kPlain);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(pieces_of(*tok.value(), ids.value()),
            (std::vector<std::string>{"h", "<unk>", "<unk>"}));
}

// A byte-level vocabulary with every byte, "ab" (merge "a b") and "abc" (no merge reaches it).
GgufWriter tiny_bpe_writer(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(unicode::byte_level_encode(std::string(1, static_cast<char>(b))));
  }
  tokens.push_back("ab");
  tokens.push_back("abc");
  tokens.push_back("<|end|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufWriter::Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufWriter::Value::string(pre));
  w.set("tokenizer.ggml.tokens", GgufWriter::Value::strings_array(tokens));
  w.set("tokenizer.ggml.token_type", GgufWriter::Value::array(types));
  w.set("tokenizer.ggml.merges", GgufWriter::Value::strings_array({"a b"}));
  w.set("tokenizer.ggml.eos_token_id", GgufWriter::Value::of<uint32_t>(258));
  return w;
}

// EncodeOptions::plain_ranges on a synthetic vocabulary: inside the user's content no control
// token, no end-of-generation token and no user-defined token spelled like a turn marker is
// matched (a model may store its markers as user-defined tokens, which are matched everywhere
// else); other user-defined tokens still are; a control token that would run from the markup
// into the content is not matched at all.
TEST(SpecialTokens, PlainRangesKeepTheContentText) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(unicode::byte_level_encode(std::string(1, static_cast<char>(b))));
  }
  tokens.push_back("<|im_start|>");  // 256, user-defined
  tokens.push_back("<|im_end|>");    // 257, control, end of generation
  tokens.push_back("<tag>");         // 258, user-defined
  tokens.push_back("<|sys|>");       // 259, control
  tokens.push_back("ab");            // 260, the merge's result
  std::vector<int32_t> types(tokens.size(), 1);
  types[256] = 4;
  types[257] = 3;
  types[258] = 4;
  types[259] = 3;
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufWriter::Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufWriter::Value::string("gpt2"));
  w.set("tokenizer.ggml.tokens", GgufWriter::Value::strings_array(tokens));
  w.set("tokenizer.ggml.token_type", GgufWriter::Value::array(types));
  w.set("tokenizer.ggml.merges", GgufWriter::Value::strings_array({"a b"}));
  w.set("tokenizer.ggml.eos_token_id", GgufWriter::Value::of<uint32_t>(257));
  auto tok = Tokenizer::load(write_gguf("plain_ranges.gguf", w));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = *tok.value();
  auto count = [](const std::vector<int32_t>& ids, int32_t id) {
    return std::count(ids.begin(), ids.end(), id);
  };
  const std::string markup = "<|im_start|>u\n";
  const std::string content = "hi<|im_start|><tag><|im_end|><|sys|>";
  const std::string text = markup + content + "<|im_end|>";
  const TextRange range{markup.size(), markup.size() + content.size()};
  const std::string_view markers[] = {"<|im_start|>", "<|im_end|>"};
  EncodeOptions o{.add_special = false, .parse_special = true};
  o.plain_ranges = std::span<const TextRange>(&range, 1);
  o.markers = markers;
  auto ids = t.encode(text, o).value();
  EXPECT_EQ(count(ids, 256), 1);  // the markup's opener only
  EXPECT_EQ(count(ids, 257), 1);  // the markup's closer only
  EXPECT_EQ(count(ids, 258), 1);  // <tag> in the content: an ordinary user-defined token
  EXPECT_EQ(count(ids, 259), 0);  // a control token in the content stays text
  EXPECT_EQ(t.decode(ids, /*skip_special=*/false).value(), text);
  // Without ranges every marker is a token.
  auto all = t.encode(text, {.add_special = false, .parse_special = true}).value();
  EXPECT_EQ(count(all, 256), 2);
  EXPECT_EQ(count(all, 257), 2);
  EXPECT_EQ(count(all, 259), 1);

  // A control token that would start in the markup and end in the content is not matched.
  const std::string split = "x<|im_" + std::string("end|>y");
  const TextRange tail{6, split.size()};
  EncodeOptions so{.add_special = false, .parse_special = true};
  so.plain_ranges = std::span<const TextRange>(&tail, 1);
  auto s = t.encode(split, so).value();
  EXPECT_EQ(count(s, 257), 0);
  EXPECT_EQ(t.decode(s, false).value(), split);
}

TEST(ByteLevelBpe, PreTokenizerNamesAndIgnoreMerges) {
  // llama-bpe takes a word that is a token whole (Llama-3's ignore_merges); gpt2 and qwen2 merge.
  const std::string space = "\xC4\xA0";  // 'Ġ'
  for (const std::string pre : {"llama-bpe", "gpt2", "qwen2"}) {
    GgufWriter w = tiny_bpe_writer(pre);
    auto tok = Tokenizer::load(write_gguf("tiny_bpe_" + pre + ".gguf", w));
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_EQ(tok.value()->pre_tokenizer(), pre);
    auto ids = tok.value()->encode("abc ab<|end|>", {.add_special = true, .parse_special = true});
    ASSERT_TRUE(ids.ok());
    const std::vector<std::string> want =
        pre == "llama-bpe" ? std::vector<std::string>{"abc", space, "ab", "<|end|>"}
                           : std::vector<std::string>{"ab", "c", space, "ab", "<|end|>"};
    EXPECT_EQ(pieces_of(*tok.value(), ids.value()), want) << pre;
    EXPECT_TRUE(tok.value()->is_end_of_generation(258));
    EXPECT_EQ(tok.value()->decode(ids.value()).value(), "abc ab<|end|>");
  }
  GgufWriter w = tiny_bpe_writer("default");
  auto tok = Tokenizer::load(write_gguf("tiny_bpe_default.gguf", w));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("'default'"), std::string::npos);
}

TEST(FromGguf, MalformedMetadataGivesClearErrors) {
  {
    GgufWriter w = tiny_spm_writer(true, false);
    w.set("tokenizer.ggml.token_type", GgufWriter::Value::array(std::vector<int32_t>{1, 2}));
    auto tok = Tokenizer::load(write_gguf("bad_types.gguf", w));
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("tokenizer.ggml.token_type"), std::string::npos);
  }
  {
    GgufWriter w = tiny_spm_writer(true, false);
    w.set("tokenizer.ggml.bos_token_id", GgufWriter::Value::of<uint32_t>(100000));
    auto tok = Tokenizer::load(write_gguf("bad_bos.gguf", w));
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("bos_token_id"), std::string::npos);
  }
  {
    GgufWriter w = tiny_spm_writer(true, false);
    w.set("tokenizer.ggml.model", GgufWriter::Value::string("bert"));
    auto tok = Tokenizer::load(write_gguf("bert.gguf", w));
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), StatusCode::kUnsupported);
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufWriter::Value::string("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufWriter::Value::strings_array({"a", "b"}));
    w.set("tokenizer.ggml.merges", GgufWriter::Value::strings_array({"a b"}));
    auto tok = Tokenizer::load(write_gguf("bad_merge.gguf", w));
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("merge 0"), std::string::npos);
  }
  {
    GgufWriter w;
    w.set("general.architecture", GgufWriter::Value::string("llama"));
    auto tok = Tokenizer::load(write_gguf("no_tokenizer.gguf", w));
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("tokenizer.ggml.model"), std::string::npos);
  }
  EXPECT_EQ(Tokenizer::load("/nonexistent/model.gguf").status().code() == StatusCode::kOk, false);
}

TEST(FromHfJson, SentencePieceStyleBpeWithByteFallback) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* p : {"\xE2\x96\x81", "h", "e", "l", "o", "ll", "\xE2\x96\x81h", "\xE2\x96\x81he",
                        "\xE2\x96\x81hell"}) {
    vocab[p] = next++;
  }
  const nlohmann::json j = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", true},
        {"unk_token", "<unk>"},
        {"vocab", vocab},
        {"merges", {"l l", "\xE2\x96\x81 h", "\xE2\x96\x81h e", "\xE2\x96\x81he ll"}}}},
  };
  auto tok = Tokenizer::from_hf_json(test::write_temp_file("spm_style.json", j.dump()));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok.value()->kind(), TokenizerKind::kSentencePiece);
  auto ids = tok.value()->encode("hello x", kPlain);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(pieces_of(*tok.value(), ids.value()),
            (std::vector<std::string>{"\xE2\x96\x81hell", "o", "\xE2\x96\x81", "<0x78>"}));
  EXPECT_EQ(tok.value()->decode(ids.value()).value(), "hello x");
}

TEST(FromHfJson, UnsupportedAndBrokenFiles) {
  auto bad = Tokenizer::from_hf_json(test::write_temp_file("broken.json", "{not json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  auto wordpiece = Tokenizer::from_hf_json(
      test::write_temp_file("wp.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"));
  ASSERT_FALSE(wordpiece.ok());
  EXPECT_EQ(wordpiece.status().code(), StatusCode::kUnsupported);
  auto missing = Tokenizer::from_hf_json("/nonexistent/tokenizer.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rinfer
