// `rinfer tokenize` / `rinfer detokenize` end to end through the binary.
#include <gtest/gtest.h>

#include "golden_fixture.h"

namespace rinfer {
namespace {

constexpr const char* kSmol = "smollm2-135m-instruct-q4_1";

// A command line for the shell; grouped so that a "< file" inside wins over run_command's
// "</dev/null".
std::string rinfer(const std::string& args) {
  return "{ " + std::string(RINFER_BINARY) + " " + args + "; }";
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::reference_model(kSmol)) GTEST_SKIP() << test::missing_model_message(kSmol);
  }
};

TEST_F(TokenizeCli, IdsMatchTheGoldensAndDetokenizeRoundTrips) {
  auto r = test::run_command(rinfer("tokenize " + std::string(kSmol) + " --ids 'Hello, world!'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int32_t> want;
  for (const auto& c : test::goldens("smollm2_goldens.json")["cases"]) {
    if (c["text"] == "Hello, world!") want = c["ids"].get<std::vector<int32_t>>();
  }
  std::string line;
  for (size_t i = 0; i < want.size(); ++i) line += (i ? " " : "") + std::to_string(want[i]);
  EXPECT_EQ(r.out, line + "\n");
  auto d = test::run_command(rinfer("detokenize --raw " + std::string(kSmol) + " " + line));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, "Hello, world!");
}

TEST_F(TokenizeCli, JsonStdinAndSpecialTokens) {
  const std::string in = test::write_temp_file("cli_in.txt", "<|im_start|>user\nHi");
  auto r = test::run_command(rinfer("tokenize --json " + std::string(kSmol) + " - < " + in));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"][0], 1);  // <|im_start|>
  EXPECT_EQ(j["pieces"][0], "<|im_start|>");
  auto plain = test::run_command(
      rinfer("tokenize --json --no-special " + std::string(kSmol) + " - < " + in));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_GT(nlohmann::json::parse(plain.out)["n_tokens"].get<int>(), j["n_tokens"].get<int>());
}

TEST_F(TokenizeCli, ChatFormatsWithTheModelTemplate) {
  auto r = test::run_command(rinfer("tokenize --pieces --chat " + std::string(kSmol) + " Hi"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the model's chat template (Jinja)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.rfind("<|im_start|>\n", 0), 0u);  // the default system turn first
}

// An encoder's folder (WordPiece, from tokenizer.json) tokenizes and detokenizes too, by its
// cached name: the ids are Hugging Face's (the goldens' "Hello world").
TEST(TokenizeCliWordPiece, BertFolderByName) {
  const char* kMiniLm = "all-minilm-l6-v2";
  if (!test::reference_model(kMiniLm)) GTEST_SKIP() << test::missing_model_message(kMiniLm);
  auto r = test::run_command(rinfer("tokenize " + std::string(kMiniLm) + " --ids 'Hello world'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "101 7592 2088 102\n");
  r = test::run_command(rinfer("tokenize " + std::string(kMiniLm) + " --json --no-special "
                               "'Hello world'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"ids\":[7592,2088]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WordPiece, 30522 pieces, lowercase"), std::string::npos) << r.out;
  auto d = test::run_command(rinfer("detokenize --skip-special " + std::string(kMiniLm) +
                                    " 101 7592 1010 2088 999 102"));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, "hello, world!\n");
  r = test::run_command(rinfer("tokenize " + std::string(kMiniLm) + " --chat Hi"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--chat needs a GGUF model"), std::string::npos) << r.err;
}

TEST_F(TokenizeCli, ErrorsAreOneLineAndNonZero) {
  const std::string bad = test::write_temp_file("cli_bad.txt", "ok \xFF\xFE bytes");
  const std::vector<std::string> cases = {
      "detokenize " + std::string(kSmol) + " 1 2 99999999",
      "detokenize " + std::string(kSmol) + " 12 abc",
      "tokenize no-such-model-anywhere hello",
      "tokenize " + std::string(kSmol) + " - < " + bad,
  };
  for (const auto& c : cases) {
    auto r = test::run_command(rinfer(c));
    EXPECT_NE(r.exit_code, 0) << c;
    EXPECT_TRUE(r.out.empty()) << c;
    ASSERT_FALSE(r.err.empty()) << c;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << c << ": " << r.err;
    EXPECT_EQ(r.err.rfind("rinfer: error: ", 0), 0u) << c << ": " << r.err;
  }
  // A usage error: the error line, then the subcommand's usage, exit code 2.
  auto usage = test::run_command(
      rinfer("tokenize --chat --chat-template llama2 " + std::string(kSmol) + " hi"));
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_TRUE(usage.out.empty());
  EXPECT_EQ(usage.err.rfind("rinfer: error: --chat-template: llama2 not in {chatml,gemma}\n", 0),
            0u)
      << usage.err;
  EXPECT_NE(usage.err.find("\nUsage: rinfer tokenize [OPTIONS] model text\n"), std::string::npos)
      << usage.err;
  auto out_of_range = test::run_command(rinfer("detokenize " + std::string(kSmol) + " 99999999"));
  EXPECT_NE(out_of_range.err.find("99999999"), std::string::npos);
  auto raw = test::run_command(
      rinfer("tokenize --ids --allow-invalid-utf8 " + std::string(kSmol) + " - < " + bad));
  EXPECT_EQ(raw.exit_code, 0) << raw.err;
}

}  // namespace
}  // namespace rinfer
