// `rinfer run`, `rinfer perplexity` and `rinfer strategies` end to end: the binary, a recipe, the
// real SmolLM2 model (skipped when it is not fetched), and the tiny synthetic model for the error
// paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tiny_model.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

using test::run_command;

const std::string kOptimized = "recipes/llm-chat/smollm2-135m/optimized.yaml";

std::string rinfer() { return std::string("'") + RINFER_BINARY + "'"; }
std::string recipe(const std::string& rel) { return "'" + test::source_dir() + "/" + rel + "'"; }

// A recipe for the tiny synthetic model (no tokenizer, so it fails after loading the weights).
std::string tiny_recipe() {
  return test::write_temp_file("tiny.yaml",
                               "model: " + test::test_data_path("llama/tiny_llama.gguf") +
                                   "\nscenario: llm-chat\ncontext_length: 64\n");
}

class RunCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::reference_model("smollm2-135m-instruct-q4_1")) {
      GTEST_SKIP() << test::missing_model_message("smollm2-135m-instruct-q4_1");
    }
  }
};

TEST_F(RunCliTest, AnswersAQuestion) {
  auto r = run_command(rinfer() + " run " + recipe(kOptimized) +
                       " -p 'What is the capital of France?' -n 12");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;  // the timing line
}

TEST_F(RunCliTest, SameSeedSameText) {
  const std::string cmd = rinfer() + " run " + recipe(kOptimized) +
                          " --raw -p 'Once upon a time' -n 6 --temperature 1.0 --seed ";
  auto a = run_command(cmd + "7"), b = run_command(cmd + "7");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(RunCliTest, PromptLongerThanTheContextIsAClearError) {
  auto r = run_command(rinfer() + " run " + recipe(kOptimized) +
                       " --ctx 16 -p 'This prompt, with the chat template around it, is much "
                       "longer than sixteen tokens.'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("but the context holds 16"), std::string::npos) << r.err;
}

TEST_F(RunCliTest, ChatKeepsTheHistoryAndEndsAtExit) {
  const std::string input =
      test::write_temp_file("chat.txt", "My name is Ada.\nWhat is my name?\n/exit\nignored\n");
  const std::string script =
      test::write_temp_file("chat.sh", rinfer() + " run " + recipe(kOptimized) +
                                           " --chat -n 4 --system 'Be brief.' < '" + input + "'\n");
  auto r = run_command("sh '" + script + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Two replies, two timing lines; the second turn reused the first one's KV cache (the whole
  // first exchange is in its prompt). What the model answers is not checked: greedy text
  // depends on the build (see tests/engine/greedy_golden_test.cpp).
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '['), 2) << r.err;
  EXPECT_NE(r.err.find(" cached)"), std::string::npos) << r.err;
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

TEST_F(RunCliTest, CtrlCStopsTheReplyAndPrintsTheTiming) {
  const std::string out = test::write_temp_file("sigint.out", "");
  const std::string err = test::write_temp_file("sigint.err", "");
  // Start a long reply, wait for the first streamed text, then send SIGINT.
  const std::string script = test::write_temp_file(
      "sigint.sh", rinfer() + " run " + recipe(kOptimized) +
                       " --raw -p 'Once upon a time' -n 4000 " + "--temperature 1 >'" + out +
                       "' 2>'" + err + "' & pid=$!\n" + "for i in $(seq 600); do [ -s '" + out +
                       "' ] && break; sleep 0.1; done\n" +
                       "kill -INT $pid; wait $pid; echo rc=$?\n");
  auto r = run_command("sh '" + script + "'");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << r.err;
  auto e = run_command("cat '" + err + "'");
  EXPECT_NE(e.out.find("stop: cancelled"), std::string::npos) << e.out;
}

TEST_F(RunCliTest, PerplexityPrintsOneLine) {
  auto r = run_command(rinfer() + " perplexity " + recipe(kOptimized) +
                       " /usr/share/common-licenses/GPL-3 --ctx 32 --max-windows 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("perplexity ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("over 1 windows of 32 tokens (15 scored)"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);  // no progress display off a terminal
}

// A model instead of a recipe (its cached name, its file) runs with the default recipe: the
// optimized strategies on the CPU, the model's own context and chat template.
TEST_F(RunCliTest, AModelNameOrFileRunsWithTheDefaultRecipe) {
  const std::string file = *test::reference_model("smollm2-135m-instruct-q4_1");
  for (const std::string& m : {std::string("smollm2-135m-instruct-q4_1"), "'" + file + "'"}) {
    auto r = run_command(rinfer() + " run " + m +
                         " -p 'What is the capital of France?' -n 12 --temperature 0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  }
}

// --json prints one object once the reply is done; --stop ends the reply before the string;
// the chain's flags reach the sampler (top-k 1 is greedy whatever the temperature).
TEST_F(RunCliTest, JsonOutputStopStringsAndSamplingFlags) {
  const std::string count = " --raw -p 'The numbers from one to ten are: one, two, three,'";
  auto r = run_command(rinfer() + " run " + recipe(kOptimized) + count +
                       " -n 30 --temperature 0 --stop ' six' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, r.out.substr(0, r.out.find('\n') + 1)) << "one line: " << r.out;
  EXPECT_EQ(r.out.rfind("{\"text\":\" four, five,\",\"tokens\":[", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\"finish_reason\":\"stop string\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"generated_tokens\":5,"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("tok/s"), std::string::npos) << "no timing line with --json: " << r.err;
  // top-k 1 at temperature 1 takes the greedy tokens.
  auto greedy = run_command(rinfer() + " run " + recipe(kOptimized) + count +
                            " -n 8 --temperature 0 --repeat-penalty 1 --json");
  auto top1 = run_command(rinfer() + " run " + recipe(kOptimized) + count +
                          " -n 8 --temperature 1 --top-k 1 --repeat-penalty 1 --seed 3 --json");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  ASSERT_EQ(top1.exit_code, 0) << top1.err;
  const auto text = [](const std::string& out) { return out.substr(0, out.find("\"timings\"")); };
  EXPECT_EQ(text(top1.out), text(greedy.out));
}

TEST(RunCliErrorsTest, SamplingFlagsOutOfRangeBlameTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"--top-p 2", "--top-p 2: top_p 2 must be in (0, 1]"},
      {"--top-k -1", "--top-k -1: expected an integer >= 0"},
      {"--min-p 1.5", "--min-p 1.5: "},
      {"--repeat-penalty 0", "--repeat-penalty 0: repeat_penalty 0 must be in (0, 10]"},
      {"--stop ''", "--stop: an empty stop string would end every reply"},
  };
  for (const auto& [flags, message] : cases) {
    auto r = run_command(rinfer() + " run '" + tiny_recipe() + "' -p hi " + flags);
    EXPECT_EQ(r.exit_code, 1) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
  }
  // A usage error (exit 2): a chat streams, it has no one-object form.
  auto r = run_command(rinfer() + " run '" + tiny_recipe() + "' --chat --json");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--chat excludes --json"), std::string::npos) << r.err;
}

TEST(RunCliErrorsTest, AModelWithoutARecipeAndItsErrors) {
  // The tiny model file (no tokenizer): loaded as a model, not read as a recipe; what stops it is
  // the missing tokenizer.
  auto r = run_command(rinfer() + " run '" + test::test_data_path("llama/tiny_llama.gguf") +
                       "' -p hi -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("1048576-byte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokenizer"), std::string::npos) << r.err;
  // A name neither a path nor in the cache.
  r = run_command(rinfer() + " run no-such-model-here -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the default recipe for no-such-model-here: model: model "
                       "'no-such-model-here' is neither a path nor a model in the cache"),
            std::string::npos)
      << r.err;
  // --device belongs to a model; a recipe names its own.
  r = run_command(rinfer() + " run " + recipe(kOptimized) + " --device cpu -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--device cpu: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is a recipe, which names its device"), std::string::npos) << r.err;
}

// A recipe's bare model name is the cache's model: a file or folder of that name in the working
// directory does not shadow it.
TEST(RunCliErrorsTest, ARecipesModelNameIsTheCachedModelNotAFolderHere) {
  const fs::path root = fs::path(test::write_temp_file("tmp", "")).parent_path() / "shadow";
  fs::remove_all(root);
  fs::create_directories(root / "cache");
  fs::create_directories(root / "work" / "tinytok");  // the same name, a folder here
  fs::rename(test::tiny_model_with_tokenizer((root / "cache").string()),
             root / "cache" / "tinytok.gguf");
  std::ofstream(root / "work" / "tiny.yaml")
      << "model: tinytok\nscenario: llm-chat\ncontext_length: 64\n";
  auto r = run_command("cd '" + (root / "work").string() + "' && RINFER_MODEL_DIR='" +
                       (root / "cache").string() + "' " + rinfer() +
                       " run tiny.yaml --raw -p hi -n 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // As a command-line argument, a path that exists is that path.
  r = run_command("cd '" + (root / "work").string() + "' && RINFER_MODEL_DIR='" +
                  (root / "cache").string() + "' " + rinfer() + " info tinytok");
  EXPECT_EQ(r.exit_code, 1);
}

TEST(RunCliErrorsTest, ErrorsAreOneLineWithExitCode1) {
  auto r = run_command(rinfer() + " run /nonexistent.yaml -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("rinfer: error: recipe '/nonexistent.yaml' not found"), std::string::npos)
      << r.err;

  const std::string bad = test::write_temp_file("bad.yaml",
                                                "model: m\nscenario: llm-chat\n"
                                                "sampling: {top_p: 2}\n");
  r = run_command(rinfer() + " run '" + bad + "' -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("sampling.top_p: expected a number in (0, 1], got 2"), std::string::npos)
      << r.err;

  // A CUDA device this machine lacks is an error naming the recipe's device key (cuda:99
  // exists nowhere, with or without a CUDA build or a GPU).
  const std::string cuda =
      test::write_temp_file("cuda.yaml", "model: " + test::test_data_path("llama/tiny_llama.gguf") +
                                             "\nscenario: llm-chat\ndevice: cuda:99\n");
  r = run_command(rinfer() + " run '" + cuda + "' -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cuda.yaml:3:9: device: cuda:99 is not available: "), std::string::npos)
      << r.err;

  // An incompatible combination names both keys.
  const std::string graphs = test::write_temp_file(
      "graphs.yaml", "model: " + test::test_data_path("llama/tiny_llama.gguf") +
                         "\nscenario: llm-chat\n"
                         "strategies: {cuda_graphs: {enabled: true}}\n");
  r = run_command(rinfer() + " run '" + graphs + "' -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("graphs.yaml:3:37: strategies.cuda_graphs.enabled: true needs a CUDA "
                       "device, but the device is cpu"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(conflicts with device: the default)"), std::string::npos) << r.err;

  r = run_command(rinfer() + " run '" + tiny_recipe() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give a prompt with -p"), std::string::npos) << r.err;

  r = run_command(rinfer() + " run '" + tiny_recipe() + "' -p hi");  // no tokenizer in the file
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tokenizer"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(StrategiesCliTest, ListsTheRegistryAndOneStrategy) {
  auto r = run_command(rinfer() + " strategies");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name :
       {"kv_cache", "kernels", "threads", "fusion", "quantization", "cuda_graphs", "allocator"}) {
    EXPECT_NE(r.out.find(std::string("\n") + name + " "), std::string::npos) << name << r.out;
  }
  // The columns line up: every summary starts where the header's does, the longest strategy
  // name (dynamic_batching) included.
  {
    std::istringstream lines(r.out);
    std::string line;
    std::getline(lines, line);
    const size_t col = line.find("summary");
    ASSERT_NE(col, std::string::npos) << line;
    int rows = 0;
    while (std::getline(lines, line) && !line.empty()) {
      ASSERT_GT(line.size(), col) << line;
      EXPECT_NE(line[col], ' ') << line;
      EXPECT_EQ(line[col - 1], ' ') << line;
      ++rows;
    }
    EXPECT_GE(rows, 20) << r.out;  // a summary line and a baseline line per strategy
  }
  r = run_command(rinfer() + " strategies quantization");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("doc       docs/strategies/quantization.md"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("keep|f16|bf16|q8_0|q4_0|q4_1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("baseline  strategies.quantization: {weights: keep, activations: float}"),
            std::string::npos)
      << r.out;
  r = run_command(rinfer() + " strategies paged_attention");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no strategy named 'paged_attention' (there are: kv_cache, kernels"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace rinfer
