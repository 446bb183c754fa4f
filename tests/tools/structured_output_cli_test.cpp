// `rinfer run --json-object | --json-schema FILE | --grammar FILE` (docs/structured-output.md):
// SmolLM2's replies follow the schema or grammar, and bad schema files, grammars and flag
// combinations are errors that name the flag and the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace rinfer {
namespace {

constexpr const char* kSmol = "smollm2-135m-instruct-q4_1";

std::string run(const std::string& args) {
  return std::string("'") + RINFER_BINARY + "' run '" + test::source_dir() +
         "/recipes/llm-chat/smollm2-135m/optimized.yaml' --temperature 0 " + args;
}

class StructuredOutputCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::reference_model(kSmol)) GTEST_SKIP() << test::missing_model_message(kSmol);
  }
};

TEST_F(StructuredOutputCli, RepliesFollowTheSchemaOrTheGrammar) {
  const std::string schema = test::write_temp_file("city.schema.json", R"({
    "type": "object", "required": ["city", "population"],
    "properties": {"city": {"type": "string", "maxLength": 30},
                   "population": {"type": "integer", "minimum": 0}}})");
  auto r = test::run_command(
      run("--json-schema '" + schema + "' --json -n 80 -p " + "'The capital of France as JSON'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto reply = nlohmann::json::parse(r.out);
  EXPECT_EQ(reply["finish_reason"], "end of generation") << r.out;
  const auto j = nlohmann::json::parse(reply["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.size(), 2u) << r.out;
  EXPECT_TRUE(j["city"].is_string() && j["population"].is_number_integer()) << r.out;
  EXPECT_GE(j["population"].get<int64_t>(), 0);

  const std::string grammar = test::write_temp_file("yes_no.ebnf", "root ::= \"yes\" | \"no\"\n");
  r = test::run_command(run("--grammar '" + grammar + "' -p 'Is Paris in France?'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == "yes\n" || r.out == "no\n") << r.out;

  r = test::run_command(
      run("--json-object -n 150 -p 'What is 2+2? Answer as a JSON object with the key answer.'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out, nullptr, false).is_object()) << r.out;
}

TEST_F(StructuredOutputCli, BadSchemasGrammarsAndFlagsNameWhatIsWrong) {
  const std::string bad = test::write_temp_file("bad.schema.json", R"({"type": "nope"})");
  auto r = test::run_command(run("--json-schema '" + bad + "' -p x"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--json-schema " + bad +
                       ": the JSON schema is not usable: Unsupported type \"nope\""),
            std::string::npos)
      << r.err;
  const std::string not_json = test::write_temp_file("not.schema.json", "[1, 2");
  r = test::run_command(run("--json-schema '" + not_json + "' -p x"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a JSON object"), std::string::npos) << r.err;
  const std::string g = test::write_temp_file("bad.ebnf", "root ::= undefined_rule\n");
  r = test::run_command(run("--grammar '" + g + "' -p x"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--grammar " + g + ": the grammar does not parse"), std::string::npos)
      << r.err;
  r = test::run_command(run("--grammar /nonexistent/g.ebnf -p x"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/g.ebnf"), std::string::npos) << r.err;
  r = test::run_command(run("--json-object --grammar '" + g + "' -p x"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("excludes"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rinfer
