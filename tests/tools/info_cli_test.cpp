// End-to-end tests of `rinfer info`: the binary as a user runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) {
  return test::run_command(std::string(RINFER_BINARY) + " " + args);
}

nlohmann::json info_json(const std::string& model) {
  auto r = rinfer("info --json " + model);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

TEST(InfoCli, SmolLm2) {
  const std::string name = "smollm2-135m-instruct-q4_1";
  if (!test::reference_model(name)) GTEST_SKIP() << test::missing_model_message(name);
  auto j = info_json(name);  // found by name through the model cache
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["format_version"], 3);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["file_bytes"], 98362432);
  const auto& h = j["hparams"];
  EXPECT_EQ(h["n_layers"], 30);
  EXPECT_EQ(h["n_embd"], 576);
  EXPECT_EQ(h["n_ff"], 1536);
  EXPECT_EQ(h["n_head"], 9);
  EXPECT_EQ(h["n_head_kv"], 3);
  EXPECT_EQ(h["head_dim"], 64);
  EXPECT_EQ(h["context_length"], 8192);
  EXPECT_EQ(h["vocab_size"], 49152);
  EXPECT_DOUBLE_EQ(h["rope_freq_base"].get<double>(), 100000.0);
  EXPECT_EQ(j["tensors"]["count"], 272);
  EXPECT_EQ(j["dtypes"]["q4_1"]["tensors"], 210);
  EXPECT_EQ(j["dtypes"]["q8_0"]["tensors"], 1);
  EXPECT_EQ(j["dtypes"]["f32"]["tensors"], 61);
  EXPECT_EQ(j["tokenizer"]["kind"], "gpt2 (byte-level BPE, pre smollm)");
  EXPECT_EQ(j["tokenizer"]["tokens"], 49152);
  EXPECT_EQ(j["chat_template"], true);

  auto text = rinfer("info " + *test::reference_model(name));  // and by path, as text
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("layers             30\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("kv heads           3\n"), std::string::npos) << text.out;
}

TEST(InfoCli, Gemma3) {
  const std::string name = "gemma3-270m-q4_k_m";
  if (!test::reference_model(name)) GTEST_SKIP() << test::missing_model_message(name);
  auto j = info_json(name);
  EXPECT_EQ(j["architecture"], "gemma3");
  const auto& h = j["hparams"];
  EXPECT_EQ(h["n_layers"], 18);
  EXPECT_EQ(h["n_embd"], 640);
  EXPECT_EQ(h["n_ff"], 2048);
  EXPECT_EQ(h["n_head"], 4);
  EXPECT_EQ(h["n_head_kv"], 1);
  EXPECT_EQ(h["head_dim"], 256);
  EXPECT_EQ(h["context_length"], 32768);
  EXPECT_EQ(h["sliding_window"], 512);
  EXPECT_EQ(h["vocab_size"], 262144);
  EXPECT_DOUBLE_EQ(h["rope_freq_base"].get<double>(), 1000000.0);
  EXPECT_EQ(j["tensors"]["count"], 236);
  for (const char* dt : {"f32", "q5_0", "q8_0", "q4_k", "q6_k"}) {
    EXPECT_TRUE(j["dtypes"].contains(dt)) << dt;
  }
  EXPECT_EQ(j["tokenizer"]["kind"], "llama (SentencePiece, pre default)");
  EXPECT_EQ(j["chat_template"], false);
}

TEST(InfoCli, MiniLmSafetensorsDirectory) {
  const std::string name = "all-minilm-l6-v2";
  if (!test::reference_model(name)) GTEST_SKIP() << test::missing_model_message(name);
  auto j = info_json(name);
  EXPECT_EQ(j["format"], "safetensors");
  EXPECT_EQ(j["architecture"], "bert");
  EXPECT_EQ(j["hparams"]["n_layers"], 6);
  EXPECT_EQ(j["hparams"]["n_embd"], 384);
  EXPECT_EQ(j["hparams"]["n_head"], 12);
  EXPECT_EQ(j["hparams"]["vocab_size"], 30522);
  EXPECT_TRUE(j["hparams"]["rope_freq_base"].is_null());  // learned absolute positions
  EXPECT_EQ(j["tensors"]["count"], 104);
  EXPECT_EQ(j["dtypes"]["i64"]["tensors"], 1);
  EXPECT_EQ(j["tokenizer"]["kind"], "tokenizer.json (WordPiece)");
}

// A PyTorch state dict names no architecture: info shows the family that runs it and the
// network's shape (convolutions, input channels, classes), not a transformer's empty rows.
TEST(InfoCli, ImageClassifierCheckpoint) {
  const std::string name = "mobilenet-v2";
  if (!test::reference_model(name)) GTEST_SKIP() << test::missing_model_message(name);
  auto j = info_json(name);
  EXPECT_EQ(j["format"], "pytorch (legacy)");
  EXPECT_EQ(j["architecture"], "convnet");
  EXPECT_EQ(j["task"], "classification");
  EXPECT_EQ(j["hparams"]["n_convolutions"], 52);
  EXPECT_EQ(j["hparams"]["input_channels"], 3);
  EXPECT_EQ(j["hparams"]["n_classes"], 1000);
  EXPECT_TRUE(j["hparams"]["n_layers"].is_null());
  auto r = rinfer("info " + name);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture       convnet\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("classes            1000\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("task               classification\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rope base"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("chat template"), std::string::npos) << r.out;
}

TEST(InfoCli, ErrorsAreOneLineWithNonZeroExit) {
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::string bad_gguf =
      test::write_temp_file("bad.gguf", std::string("GGUF\x01\x00\x00\x00", 8));
  const std::string truncated =
      test::write_temp_file("trunc.gguf", std::string("GGUF\x03\x00\x00", 7));
  const std::string text = test::write_temp_file("notes.txt", "hello, not a model\n");
  const std::string bad_st =
      test::write_temp_file("bad.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
  const std::vector<Case> cases = {
      {"info /nonexistent/x.gguf", "/nonexistent/x.gguf: no such file"},
      {"info no-such-model-name", "model 'no-such-model-name' is neither a path nor a model"},
      {"info " + bad_gguf, "bad.gguf"},
      {"info " + truncated, "trunc.gguf"},
      {"info " + text, "not a GGUF file"},
      {"info " + bad_st, "bad.safetensors"},
  };
  for (const auto& c : cases) {
    auto r = rinfer(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
    EXPECT_EQ(r.err.rfind("rinfer: error: ", 0), 0u) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
  }
  auto usage = rinfer("info");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("model is required"), std::string::npos) << usage.err;
  auto help = rinfer("info --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--json"), std::string::npos);
}

}  // namespace
}  // namespace rinfer
