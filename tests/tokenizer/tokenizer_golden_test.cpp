// Exact parity with the reference tokenizers on the committed goldens (see
// tests/tools/gen_tokenizer_goldens.py): SmolLM2 (byte-level BPE, smollm pre-tokenizer) and
// Qwen2.5-Coder 1.5B and 0.5B (byte-level BPE, qwen2 pre-tokenizer, NFC) against Hugging Face
// tokenizers, Gemma 3 (SentencePiece BPE) against the sentencepiece library.
#include <gtest/gtest.h>

#include <filesystem>

#include "golden_fixture.h"
#include "tokenizer/streaming_decoder.h"
#include "tokenizer/unicode.h"

namespace rinfer {
namespace {

using test::goldens;
using test::reference_tokenizer;

struct Model {
  const char* name;
  const char* goldens;
};

void PrintTo(const Model& m, std::ostream* os) { *os << m.name; }

class GoldenTest : public ::testing::TestWithParam<Model> {
 protected:
  void SetUp() override {
    tok_ = reference_tokenizer(GetParam().name);
    if (tok_ == nullptr) GTEST_SKIP() << test::missing_model_message(GetParam().name);
    g_ = &goldens(GetParam().goldens);
  }
  const Tokenizer* tok_ = nullptr;
  const nlohmann::json* g_ = nullptr;
};

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Every case, parse_special off and on, encode and decode.
void check_cases(const Tokenizer& tok, const nlohmann::json& g) {
  const auto& cases = g["cases"];
  ASSERT_GE(cases.size(), 200u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_special =
        c.contains("ids_special") ? c["ids_special"].get<std::vector<int32_t>>() : want;
    auto plain = tok.encode(text, {.add_special = false, .parse_special = false});
    auto special = tok.encode(text, {.add_special = false, .parse_special = true});
    ASSERT_TRUE(plain.ok() && special.ok());
    if (plain.value() != want && failures++ < 10) {
      ADD_FAILURE() << "encode '" << text << "'\n  got  " << show(plain.value()) << "\n  want "
                    << show(want);
    }
    if (special.value() != want_special && failures++ < 10) {
      ADD_FAILURE() << "encode (parse_special) '" << text << "'\n  got  " << show(special.value())
                    << "\n  want " << show(want_special);
    }
    const std::string want_text = c.contains("decoded") ? c["decoded"].get<std::string>() : text;
    auto decoded = tok.decode(want);
    ASSERT_TRUE(decoded.ok());
    if (decoded.value() != want_text && failures++ < 10) {
      ADD_FAILURE() << "decode of '" << text << "' gave '" << decoded.value() << "'";
    }
    auto decoded_special = tok.decode(want_special);
    ASSERT_TRUE(decoded_special.ok());
    EXPECT_EQ(decoded_special.value(), want_text);
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(GoldenTest, EveryCaseMatchesBothWays) { check_cases(*tok_, *g_); }

TEST_P(GoldenTest, LargeTextsMatch) {
  for (const auto& big : (*g_)["big"]) {
    const std::string name = big["name"].get<std::string>();
    const std::string text =
        name == "mix" ? test::lcg_text((*g_)["cases"], 1'000'000, (*g_)["mix_seed"].get<uint64_t>())
                      : std::string(1'000'000, 'a');
    ASSERT_EQ(text.size(), big["bytes"].get<size_t>()) << name;
    auto ids = tok_->encode(text, {.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok());
    const auto head = big["head"].get<std::vector<int32_t>>();
    ASSERT_GE(ids->size(), head.size());
    EXPECT_EQ(std::vector<int32_t>(ids->begin(), ids->begin() + static_cast<long>(head.size())),
              head)
        << name;
    EXPECT_EQ(ids->size(), big["n_ids"].get<size_t>()) << name;
    EXPECT_EQ(test::fnv1a64(ids.value()), big["fnv1a64"].get<std::string>()) << name;
    auto back = tok_->decode(ids.value());
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(back.value() == test::expected_round_trip(*tok_, text))
        << name << ": decode(encode(text)) != text";
  }
}

TEST_P(GoldenTest, StreamingDecodeEqualsDecode) {
  for (const auto& c : (*g_)["cases"]) {
    const auto ids = c.contains("ids_special") ? c["ids_special"].get<std::vector<int32_t>>()
                                               : c["ids"].get<std::vector<int32_t>>();
    StreamingDecoder stream(*tok_);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = stream.push(id);
      EXPECT_TRUE(unicode::is_valid_utf8(part));
      streamed += part;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, tok_->decode(ids).value());
  }
}

TEST_P(GoldenTest, AddsBosAsTheModelSays) {
  auto ids = tok_->encode("Hello", {.add_special = true, .parse_special = true});
  ASSERT_TRUE(ids.ok());
  auto bare = tok_->encode("Hello", {.add_special = false, .parse_special = true});
  if (tok_->add_bos()) {
    ASSERT_EQ(ids->size(), bare->size() + 1);
    EXPECT_EQ(ids->front(), tok_->bos());
  } else {
    EXPECT_EQ(ids.value(), bare.value());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenTest,
    ::testing::Values(Model{"smollm2-135m-instruct-q4_1", "smollm2_goldens.json"},
                      Model{"gemma3-270m-q4_k_m", "gemma3_goldens.json"},
                      Model{"qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2_goldens.json"},
                      Model{"qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2_goldens.json"}),
    [](const auto& info) {
      std::string n = info.param.name;
      return n.substr(0, n.find('-')) == "qwen2.5"
                 ? (n.find("1.5b") != std::string::npos ? std::string("qwen15")
                                                        : std::string("qwen05"))
                 : std::string(info.param.goldens).substr(0, 6);
    });

// from_hf_json on a tokenizer.json written from the SmolLM2 GGUF (vocab, merges, control tokens
// as special added tokens, SmolLM2's real pre-tokenizer) gives the same ids as from_gguf.
TEST(HfTokenizerJson, SmolLM2JsonMatchesGoldens) {
  auto path = test::reference_model("smollm2-135m-instruct-q4_1");
  if (!path) GTEST_SKIP() << test::missing_model_message("smollm2-135m-instruct-q4_1");
  auto file = GgufFile::open(*path);
  ASSERT_TRUE(file.ok());
  const auto tokens = file->find("tokenizer.ggml.tokens")->array_strings();
  const auto types = file->find("tokenizer.ggml.token_type")->to_vector<int32_t>().value();
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[std::string(tokens[i])] = i;
    if (types[i] == 3) {
      added.push_back({{"id", i}, {"content", std::string(tokens[i])}, {"special", true}});
    }
  }
  nlohmann::json merges = nlohmann::json::array();
  for (std::string_view m : file->find("tokenizer.ggml.merges")->array_strings()) {
    const size_t sp = m.find(' ');  // the newer [left, right] form
    merges.push_back({std::string(m.substr(0, sp)), std::string(m.substr(sp + 1))});
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", true}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
  const std::string json_path = test::write_temp_file("smollm2_tokenizer.json", j.dump());
  auto tok = Tokenizer::from_hf_json(json_path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok.value()->pre_tokenizer(), "smollm");
  check_cases(*tok.value(), goldens("smollm2_goldens.json"));
  std::filesystem::remove(json_path);
}

}  // namespace
}  // namespace rinfer
