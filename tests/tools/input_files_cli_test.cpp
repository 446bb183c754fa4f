// The real `rinfer` binary given a FIFO (no writer), a directory or a device where it reads a
// file. Guards the class "a reader of a user-named file blocks forever on a FIFO, or reports a
// directory as missing": `rinfer info`, a recipe's `model:`, the recipe itself, perplexity's
// text file, and the files of a Hugging Face model directory (config.json, model.safetensors,
// tokenizer.json) each return at once with "<path>: not a regular file (a FIFO)" or "is a
// directory". Every command runs under `timeout 20`, so a regression fails (exit 124) instead of
// hanging the suite.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/tiny_hf_model.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

constexpr int kTimedOut = 124;  // timeout(1)'s exit code

test::CommandResult rinfer(const std::string& args) {
  return test::run_command("timeout 20 " + std::string(RINFER_BINARY) + " " + args);
}

class InputFilesCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_dir("input_files_cli");
    fifo_ = dir_ + "/fifo";
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0644), 0);
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  // A valid recipe whose model is `model`.
  std::string recipe(const std::string& model) {
    return write("r.yaml", "model: " + model + "\ndevice: cpu\nscenario: llm-chat\n");
  }
  void expect_refused(const test::CommandResult& r, const std::string& message) {
    EXPECT_NE(r.exit_code, kTimedOut) << "blocked on a FIFO";
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  std::string dir_;
  std::string fifo_;
};

TEST_F(InputFilesCli, InfoOnAFifo) {
  expect_refused(rinfer("info '" + fifo_ + "'"), fifo_ + ": not a regular file (a FIFO)");
  expect_refused(rinfer("info /dev/null"), "/dev/null: not a regular file (a character device)");
}

TEST_F(InputFilesCli, RecipeModelIsAFifo) {
  expect_refused(rinfer("run '" + recipe(fifo_) + "' -p hi"),
                 fifo_ + ": not a regular file (a FIFO)");
}

TEST_F(InputFilesCli, RecipeIsAFifoOrADirectory) {
  expect_refused(rinfer("run '" + fifo_ + "' -p hi"), fifo_ + ": not a regular file (a FIFO)");
  // A directory is a model folder (`rinfer run MODEL`), here one without weights; a .yaml name
  // that is a directory is not reported as a missing recipe.
  expect_refused(rinfer("run '" + dir_ + "' -p hi"),
                 dir_ + ": the directory holds no model.safetensors");
  const std::string yaml_dir = dir_ + "/d.yaml";
  ASSERT_TRUE(std::filesystem::create_directory(yaml_dir));
  expect_refused(rinfer("run '" + yaml_dir + "' -p hi"),
                 yaml_dir + ": is a directory, expected a file");
}

TEST_F(InputFilesCli, PerplexityTextIsAFifoOrADirectory) {
  // The text is read before the model loads: the recipe's model need not be fetched.
  const std::string r = recipe("smollm2-135m-instruct-q4_1");
  expect_refused(rinfer("perplexity '" + r + "' '" + fifo_ + "'"),
                 "the text file: " + fifo_ + ": not a regular file (a FIFO)");
  expect_refused(rinfer("perplexity '" + r + "' '" + dir_ + "'"),
                 dir_ + ": is a directory, expected a file");
}

TEST_F(InputFilesCli, HfModelDirectoryFiles) {
  const test::TinySpec spec;
  const test::TinyWeights w = test::make_tiny_weights(spec, false);
  const std::string hf = test::write_hf_model("input_files_hf", w, test::tiny_config(spec), false);
  auto ok = rinfer("info '" + hf + "'");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;  // the directory as written is fine

  // tokenizer.json a FIFO: info shows no tokenizer (it never blocks); run refuses it.
  const std::string tok = hf + "/tokenizer.json";
  ASSERT_EQ(::mkfifo(tok.c_str(), 0644), 0);
  auto info = rinfer("info '" + hf + "'");
  EXPECT_NE(info.exit_code, kTimedOut) << "blocked on tokenizer.json";
  EXPECT_EQ(info.exit_code, 0) << info.err;
  expect_refused(rinfer("run '" + recipe(hf) + "' -p hi"), tok + ": not a regular file (a FIFO)");

  // config.json a FIFO.
  const std::string config = hf + "/config.json";
  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0644), 0);
  expect_refused(rinfer("info '" + hf + "'"), config + ": not a regular file (a FIFO)");

  // model.safetensors a FIFO is named as such, not reported as missing.
  const std::string weights = hf + "/model.safetensors";
  fs::remove(weights);
  ASSERT_EQ(::mkfifo(weights.c_str(), 0644), 0);
  expect_refused(rinfer("info '" + hf + "'"), weights + ": not a regular file (a FIFO)");
}

}  // namespace
}  // namespace rinfer
