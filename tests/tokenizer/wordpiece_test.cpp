// The WordPiece tokenizer against Hugging Face `tokenizers` (goldens from
// tests/tools/gen_wordpiece_goldens.py on all-MiniLM-L6-v2's tokenizer.json), and its errors.
#include "tokenizer/wordpiece.h"

#include <gtest/gtest.h>

#include <memory>

#include "golden_fixture.h"
#include "test_util.h"
#include "tokenizer/bert_normalizer.h"

namespace rinfer {
namespace {

const WordPieceTokenizer* minilm() {
  static std::unique_ptr<WordPieceTokenizer> tok = [] {
    std::unique_ptr<WordPieceTokenizer> t;
    if (auto dir = test::reference_model("all-minilm-l6-v2")) {
      auto r = WordPieceTokenizer::load(*dir);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (r.ok()) t = std::move(r).value();
    }
    return t;
  }();
  return tok.get();
}

#define REQUIRE_MINILM()                    \
  const WordPieceTokenizer* tok = minilm(); \
  if (tok == nullptr) GTEST_SKIP() << test::missing_model_message("all-minilm-l6-v2")

TEST(WordPieceGolden, SingleTextsMatchHuggingFace) {
  REQUIRE_MINILM();
  const auto& g = test::goldens("minilm_wordpiece_goldens.json");
  ASSERT_GE(g["single"].size(), 300u);
  size_t checked = 0;
  for (const auto& c : g["single"]) {
    const std::string text = c["text"];
    auto e = tok->encode(text, c["max_length"].get<int64_t>());
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ(e->ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    EXPECT_EQ(e->type_ids, std::vector<int32_t>(e->ids.size(), 0));
    ++checked;
  }
  EXPECT_EQ(checked, g["single"].size());
}

// Decoding as the tokenizers library's WordPiece decoder does: continuation pieces glued,
// tokenization spaces cleaned, special tokens left out on request; ids out of range refused.
TEST(WordPieceGolden, DecodeGluesPiecesAndCleansSpaces) {
  REQUIRE_MINILM();
  const std::string text = "hello, world! don't stop the tokenization.";
  auto e = tok->encode(text, 256);
  ASSERT_TRUE(e.ok());
  auto plain = tok->decode(e->ids, true);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(*plain, text);
  auto with = tok->decode(e->ids, false);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, "[CLS] " + text + " [SEP]");
  const std::vector<int32_t> bad{101, tok->vocab_size()};
  auto out = tok->decode(bad, false);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("(position 1) is outside the vocabulary"),
            std::string::npos)
      << out.status().message();
}

TEST(WordPieceGolden, PairsMatchHuggingFace) {
  REQUIRE_MINILM();
  const auto& g = test::goldens("minilm_wordpiece_goldens.json");
  ASSERT_GE(g["pair"].size(), 20u);
  for (const auto& c : g["pair"]) {
    const std::string a = c["a"], b = c["b"];
    auto e = tok->encode_pair(a, b, c["max_length"].get<int64_t>());
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ(e->ids, c["ids"].get<std::vector<int32_t>>()) << a << " | " << b;
    EXPECT_EQ(e->type_ids, c["type_ids"].get<std::vector<int32_t>>()) << a << " | " << b;
  }
}

TEST(WordPiece, TruncationIsFlaggedAndKeepsTheSpecialTokens) {
  REQUIRE_MINILM();
  auto e = tok->encode("one two three four five six seven", 5);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->truncated);
  ASSERT_EQ(e->ids.size(), 5u);
  EXPECT_EQ(e->ids.front(), tok->cls());
  EXPECT_EQ(e->ids.back(), tok->sep());
  auto whole = tok->encode("one two", 16);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->truncated);
}

TEST(WordPiece, SpecialTokensInTheTextAreMatchedAsThemselves) {
  REQUIRE_MINILM();
  auto e = tok->encode_pieces("hello [SEP] world [MASK]");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->size(), 4u);
  EXPECT_EQ((*e)[1], tok->sep());
  EXPECT_EQ(tok->piece((*e)[3]), "[MASK]");
  // Lowercase brackets are plain text, split at the punctuation.
  auto plain = tok->encode_pieces("[sep]");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(tok->piece(plain->front()), "[");
}

TEST(WordPiece, InvalidUtf8NamesTheByte) {
  REQUIRE_MINILM();
  auto e = tok->encode(
      "abc\xff"
      "def",
      32);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("byte 3"), std::string::npos) << e.status().to_string();
  auto p = tok->encode_pair("fine", "\xc3", 32);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("second text"), std::string::npos) << p.status().to_string();
  EXPECT_FALSE(tok->encode("x", 1).ok());
  EXPECT_FALSE(tok->encode_pair("x", "y", 2).ok());
}

TEST(BertNormalizer, EachStageAlone) {
  BertNormalizerOptions none{false, false, false, false};
  EXPECT_EQ(bert_normalize("Café\t中", none).value(), "Café\t中");
  BertNormalizerOptions clean = none;
  clean.clean_text = true;
  EXPECT_EQ(bert_normalize("a\tb\x01"
                           "c\u200bd",
                           clean)
                .value(),
            "a bcd");
  BertNormalizerOptions cjk = none;
  cjk.handle_chinese_chars = true;
  EXPECT_EQ(bert_normalize("ab中c", cjk).value(), "ab 中 c");
  BertNormalizerOptions strip = none;
  strip.strip_accents = true;
  EXPECT_EQ(bert_normalize("Crème Brûlée", strip).value(), "Creme Brulee");
  BertNormalizerOptions lower = none;
  lower.lowercase = true;
  EXPECT_EQ(bert_normalize("ÀB İ", lower).value(), "àb i\u0307");
  EXPECT_EQ(bert_pre_tokenize("don't stop,now"),
            (std::vector<std::string_view>{"don", "'", "t", "stop", ",", "now"}));
}

std::string write_tokenizer_json(const std::string& name, const std::string& body) {
  return test::write_temp_file(name, body);
}

TEST(WordPieceErrors, UnsupportedAndMalformedFilesAreNamed) {
  const std::string wp =
      R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1,
      "[CLS]": 2, "[SEP]": 3}}, "normalizer": {"type": "BertNormalizer"},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]}})";
  auto ok = WordPieceTokenizer::load(write_tokenizer_json("wp_ok.json", wp));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->encode("a a", 8).value().ids, (std::vector<int32_t>{2, 1, 1, 3}));

  struct Case {
    std::string body, expect;
  };
  const Case cases[] = {
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", "model type 'BPE'"},
      {"{not json", "not valid JSON"},
      {R"({"model": {"type": "WordPiece", "vocab": {}}})", "model.vocab is not"},
      {R"({"model": {"type": "WordPiece", "vocab": {"a": 0, "b": 0}}})", "distinct"},
      {R"({"model": {"type": "WordPiece", "vocab": {"a": 0}},
          "pre_tokenizer": {"type": "BertPreTokenizer"},
          "post_processor": {"type": "BertProcessing", "cls": ["a", 0], "sep": ["a", 0]}})",
       "unknown token"},
      {R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
          "normalizer": {"type": "NFKC"}})",
       "normalizer 'NFKC'"},
      {R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
          "pre_tokenizer": {"type": "Whitespace"}})",
       "pre_tokenizer 'Whitespace'"},
      {R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
          "pre_tokenizer": {"type": "BertPreTokenizer"}})",
       "post_processor 'none'"},
      {R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
          "pre_tokenizer": {"type": "BertPreTokenizer"},
          "post_processor": {"type": "BertProcessing", "cls": ["x", 7], "sep": ["y", 0]}})",
       "outside the vocabulary"},
      {R"({"model": {"type": "WordPiece", "vocab": [1, 2]}})", "model.vocab is not"},
      {R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": "zero"}}})", "structure"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string path = write_tokenizer_json("wp_bad" + std::to_string(i++) + ".json", c.body);
    auto r = WordPieceTokenizer::load(path);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << r.status().to_string() << " (expected '" << c.expect << "')";
    EXPECT_NE(r.status().to_string().find("wp_bad"), std::string::npos) << r.status().to_string();
  }
  EXPECT_FALSE(WordPieceTokenizer::load("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace rinfer
