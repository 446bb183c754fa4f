// `rinfer run` and `rinfer perplexity` on a model file whose weights are corrupt: a copy of the
// SmolLM2 GGUF with one NaN in output_norm.weight (a well-formed file, so it loads).
//
// Guards the silent nonsense this used to give: an empty reply with exit 0 from `run`, and
// "perplexity nan +/- nan" with exit 0 from `perplexity`. Both now exit 1 with an error that says
// the model produced non-finite logits and the weights may be corrupt, and print no NaN value.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "gguf_copy.h"
#include "test_util.h"

namespace rinfer {
namespace {

using test::run_command;

const std::string kModel = "smollm2-135m-instruct-q4_1";

class CorruptWeightsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = test::reference_model(kModel);
    if (!path) GTEST_SKIP() << test::missing_model_message(kModel);
    if (recipe_.empty()) {  // one poisoned copy for the suite
      model_ = test::poisoned_gguf(*path, "corrupt_norm.gguf", "output_norm.weight", 7, NAN);
      ASSERT_FALSE(model_.empty());
      recipe_ = test::write_temp_file(
          "corrupt.yaml", "model: " + model_ + "\nscenario: llm-chat\ncontext_length: 128\n");
    }
  }
  // The copy is as large as the model: not left behind in the temp dir.
  static void TearDownTestSuite() {
    if (!model_.empty()) std::filesystem::remove(model_);
  }
  static std::string rinfer(const std::string& args) {
    return std::string("'") + RINFER_BINARY + "' " + args;
  }
  // No number printed as NaN (the error names NaN as "NaN", a value would print as "nan").
  static void expect_no_nan_value(const test::CommandResult& r) {
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find("nan"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("inf +/-"), std::string::npos) << r.out;
  }
  static std::string model_, recipe_;
};

std::string CorruptWeightsCliTest::model_, CorruptWeightsCliTest::recipe_;

TEST_F(CorruptWeightsCliTest, RunFailsWithTheCause) {
  // The recipe's defaults sample (temperature 0.7); the greedy path is covered by generator_test.
  auto r = run_command(rinfer("run '" + recipe_ + "' -p 'What is the capital of France?' -n 8"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("the model produced non-finite logits at generation step 1"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the weights may be corrupt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the logits hold NaN at token"), std::string::npos) << r.err;
  expect_no_nan_value(r);
}

TEST_F(CorruptWeightsCliTest, PerplexityFailsInsteadOfPrintingNaN) {
  auto r = run_command(rinfer("perplexity '" + recipe_ +
                              "' /usr/share/common-licenses/GPL-3 --ctx 32 "
                              "--max-windows 1"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.find("perplexity "), std::string::npos) << r.out;  // no result line
  EXPECT_NE(r.err.find("perplexity: the model produced non-finite logits (window 0, position 16"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the weights may be corrupt"), std::string::npos) << r.err;
  expect_no_nan_value(r);
}

}  // namespace
}  // namespace rinfer
