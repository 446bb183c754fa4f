// End-to-end tests of `rinfer parity` on the CPU with a tiny random model: the reference logits
// come from the same weights loaded through the other format (GGUF), as PyTorch's come from the
// HF checkpoint on the GPU machine.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include "../models/tiny_hf_model.h"
#include "core_logits.h"
#include "models/model.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) {
  return test::run_command(std::string("'") + RINFER_BINARY + "' " + args);
}

std::string bytes_of(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

class ParityCli : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.seed = 31;
    const test::TinyWeights w = test::make_tiny_weights(spec_, /*round_to_bf16=*/true);
    hf_ = test::write_hf_model("parity_hf", w, test::tiny_config(spec_), /*bf16=*/true);
    gguf_ = test::write_gguf_model("parity_gguf", spec_, w);
    dir_ = test::fresh_dir("parity_io");
    tokens_ = {5, 250, 3, 77, 12, 199, 0, 42, 8, 101, 64};
    test::write_file(dir_ + "/tokens.i32", bytes_of(tokens_.data(), tokens_.size() * 4));
    ref_ = logits_of(gguf_);
    test::write_file(dir_ + "/ref.f32", bytes_of(ref_.data(), ref_.size() * 4));
  }

  std::vector<float> logits_of(const std::string& path) {
    auto m = load_decoder_model(path, LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    return test::core_logits(**m, tokens_);
  }

  std::string args(const std::string& model, const std::string& ref_file) const {
    return "parity --model '" + model + "' --device cpu --tokens '" + dir_ +
           "/tokens.i32' --ref '" + ref_file + "'";
  }

  test::TinySpec spec_;
  std::string hf_, gguf_, dir_;
  std::vector<int32_t> tokens_;
  std::vector<float> ref_;
};

TEST_F(ParityCli, HfModelMatchesGgufReference) {
  const std::string json = dir_ + "/out.json";
  auto r = rinfer(args(hf_, dir_ + "/ref.f32") + " --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rel L2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("11 tokens x vocabulary 300"), std::string::npos) << r.out;

  std::ifstream f(json);
  const auto j = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["model"], hf_);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["n_tokens"], 11);
  EXPECT_EQ(j["n_vocab"], 300);
  EXPECT_EQ(j["pass"], true);
  EXPECT_EQ(j["metrics"]["rows"], 11);
  EXPECT_LT(j["metrics"]["rel_l2"].get<double>(), 1e-5);
  EXPECT_EQ(j["metrics"]["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(j["metrics"]["mean_kl"].get<double>(), 1e-9);
  EXPECT_LT(j["metrics"]["max_abs"].get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(j["thresholds"]["max_rel_l2"].get<double>(), 2e-2);
  EXPECT_DOUBLE_EQ(j["thresholds"]["min_top1"].get<double>(), 0.99);
}

TEST_F(ParityCli, ThresholdFailureExitsOne) {
  // Reference perturbed by ~10% noise: rel L2 ~0.1 > 2e-2.
  std::vector<float> noisy = ref_;
  const std::vector<float> noise = test::random_floats(noisy.size(), 99, -1.0f, 1.0f);
  double ss = 0;
  for (float v : ref_) ss += static_cast<double>(v) * v;
  const float scale = static_cast<float>(0.17 * std::sqrt(ss / static_cast<double>(ref_.size())));
  for (size_t i = 0; i < noisy.size(); ++i) noisy[i] += scale * noise[i];
  test::write_file(dir_ + "/noisy.f32", bytes_of(noisy.data(), noisy.size() * 4));
  const std::string json = dir_ + "/fail.json";
  auto r = rinfer(args(hf_, dir_ + "/noisy.f32") + " --json '" + json + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  std::ifstream f(json);
  const auto j = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["pass"], false);
  EXPECT_GT(j["metrics"]["rel_l2"].get<double>(), 2e-2);
  EXPECT_GT(j["metrics"]["mean_kl"].get<double>(), 0.0);

  // The same comparison passes with a looser bound.
  r = rinfer(args(hf_, dir_ + "/noisy.f32") + " --max-rel-l2 0.5 --min-top1 0");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST_F(ParityCli, DumpWritesOurLogits) {
  const std::string dump = dir_ + "/ours.f32";
  auto r = rinfer("parity --model '" + hf_ + "' --tokens '" + dir_ + "/tokens.i32' --dump '" +
                  dump + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream f(dump, std::ios::binary);
  std::vector<float> ours(ref_.size() + 1);
  f.read(reinterpret_cast<char*>(ours.data()), static_cast<std::streamsize>(ours.size() * 4));
  ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(ref_.size() * 4));
  ours.pop_back();
  EXPECT_LT(test::rel_l2(ours, ref_), 1e-5);
  EXPECT_GT(*std::max_element(ours.begin(), ours.end()), 0.5f);  // real logits, not zeros

  // The dump is a valid reference for the GGUF model.
  r = rinfer(args(gguf_, dump) + " --max-rel-l2 1e-5 --min-top1 1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;

  r = rinfer("parity --model '" + hf_ + "' --tokens '" + dir_ + "/tokens.i32'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give --ref"), std::string::npos) << r.err;
}

TEST_F(ParityCli, BadInputsAreClearErrors) {
  // Reference with one row missing.
  test::write_file(dir_ + "/short.f32", bytes_of(ref_.data(), (ref_.size() - 300) * 4));
  auto r = rinfer(args(hf_, dir_ + "/short.f32"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has 12000 bytes; 11 tokens x vocabulary 300 x 4 bytes = 13200 expected"),
            std::string::npos)
      << r.err;

  // A token outside the vocabulary.
  std::vector<int32_t> bad = tokens_;
  bad[3] = 300;
  test::write_file(dir_ + "/bad.i32", bytes_of(bad.data(), bad.size() * 4));
  r = rinfer("parity --model '" + hf_ + "' --tokens '" + dir_ + "/bad.i32' --ref '" + dir_ +
             "/ref.f32'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("token 300 at index 3 is outside the vocabulary [0, 300)"),
            std::string::npos)
      << r.err;

  // A tokens file that is not whole int32 values.
  test::write_file(dir_ + "/odd.i32", "12345");
  r = rinfer("parity --model '" + hf_ + "' --tokens '" + dir_ + "/odd.i32' --ref '" + dir_ +
             "/ref.f32'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has 5 bytes, not a multiple of 4"), std::string::npos) << r.err;

  // Missing file, bad device.
  r = rinfer(args(hf_, dir_ + "/nope.f32"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nope.f32"), std::string::npos) << r.err;
  r = rinfer("parity --model '" + hf_ + "' --device tpu --tokens '" + dir_ +
             "/tokens.i32' --ref '" + dir_ + "/ref.f32'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tpu"), std::string::npos) << r.err;

  // KV cache types: the CPU keeps f32 or int8 (f32 itself is accepted and changes nothing), and
  // only auto, bf16 and f32 exist.
  const std::string base = "parity --model '" + hf_ + "' --tokens '" + dir_ +
                           "/tokens.i32' --ref '" + dir_ + "/ref.f32'";
  r = rinfer(base + " --kv bf16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the CPU keeps its KV cache in f32 or int8, not bf16"), std::string::npos)
      << r.err;
  r = rinfer(base + " --kv f32");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = rinfer(base + " --kv f16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--kv"), std::string::npos) << r.err;
}

// Guards "an output replaces whatever the path was" for --json and --dump: a FIFO (opening it
// for writing would wait for a reader forever), a directory, /dev/null or a path in a missing
// directory is refused before the model loads (the model and tokens here do not even exist),
// under `timeout 20`, and left as it was.
TEST(ParityCliOutputs, CheckedBeforeTheModelLoads) {
  const std::string d = test::fresh_dir("parity_outputs");
  const std::string fifo = d + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string base = "timeout 20 " + std::string(RINFER_BINARY) +
                           " parity --model /nonexistent/m.gguf --tokens /nonexistent/t.i32 ";
  struct Case {
    std::string flags;
    std::string message;
  };
  const Case cases[] = {
      {"--ref /nonexistent/r.f32 --json '" + fifo + "'", fifo + ": not a regular file (a FIFO)"},
      {"--dump '" + d + "'", d + ": is a directory"},
      {"--dump /dev/null", "/dev/null: not a regular file (a character device)"},
      {"--ref /nonexistent/r.f32 --json '" + d + "/no/r.json'",
       "the directory '" + d + "/no' does not exist"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    auto r = test::run_command(base + c.flags);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("/nonexistent/"), std::string::npos) << "an input was read: " << r.err;
  }
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

}  // namespace
}  // namespace rinfer
