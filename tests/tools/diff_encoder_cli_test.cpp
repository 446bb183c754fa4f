// `rinfer diff` of two embedding recipes (tiny random BERT checkpoints, tests/models/tiny_bert.h):
// a fault planted in one layer of one variant (layer 2's FFN output matrix) is named, every tap
// before it agrees exactly, the pooled vector is the last row and the JSON says it has no logits;
// on a machine with a GPU the same runs go through the CUDA runner's taps, and the CPU against
// CUDA stays within bf16's error. Mixing an embedding recipe with an LLM one is an error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../models/tiny_bert.h"
#include "cli_util.h"
#include "core/cuda_info.h"
#include "test_util.h"

namespace rinfer {
namespace {

constexpr int kFaultLayer = 2;

class DiffEncoderCli : public ::testing::Test {
 protected:
  void SetUp() override {
    good_ = test::write_tiny_bert("diff_bert_good");
    bad_ = test::write_tiny_bert(
        "diff_bert_bad", "encoder.layer." + std::to_string(kFaultLayer) + ".output.dense.weight");
    dir_ = test::fresh_dir("diff_bert_io");
  }

  std::string recipe(const std::string& name, const std::string& model,
                     const std::string& device) const {
    const std::string path = dir_ + "/" + name + ".yaml";
    test::write_file(path, "model: " + model + "\ndevice: " + device +
                               "\nscenario: embedding\nstrategies:\n  threads: {count: 1}\n");
    return path;
  }

  nlohmann::json diff(const std::string& a, const std::string& b, std::string* out = nullptr) {
    const std::string json = dir_ + "/diff.json", svg = dir_ + "/diff.svg";
    auto r = test::rinfer_cli("diff '" + a + "' '" + b + "' -p 'the quick brown fox' --json '" +
                              json + "' --svg '" + svg + "'");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (out != nullptr) *out = r.out;
    EXPECT_NE(test::slurp(svg).find("<polyline"), std::string::npos);
    auto j = nlohmann::json::parse(test::slurp(json), nullptr, false);
    EXPECT_FALSE(j.is_discarded());
    return j.is_discarded() ? nlohmann::json() : j;
  }

  void expect_fault_found(const nlohmann::json& j, const std::string& what) {
    ASSERT_TRUE(j.is_object()) << what;
    EXPECT_EQ(j["scenario"], "embedding") << what;
    EXPECT_TRUE(j["logits"].is_null()) << what;
    const int64_t rows = j["tokens"].get<int64_t>();
    EXPECT_GE(rows, 10) << what;  // [CLS], about a token a character, [SEP]
    const auto& taps = j["taps"];
    const int n_layer = test::tiny_bert_shape().n_layer;
    ASSERT_EQ(taps.size(), static_cast<size_t>(2 + 4 * n_layer)) << what;
    EXPECT_EQ(taps.back()["op"], "pooled") << what;
    EXPECT_EQ(taps.back()["rows"], 1) << what;
    EXPECT_EQ(j["first_past_threshold"]["layer"], kFaultLayer) << what;
    EXPECT_EQ(j["first_past_threshold"]["op"], "mlp_out") << what;
    EXPECT_EQ(j["first_difference"]["layer"], kFaultLayer) << what;
    EXPECT_EQ(j["first_difference"]["op"], "mlp_out") << what;
    bool before = true;
    for (const auto& t : taps) {
      if (t["op"] != "pooled") EXPECT_EQ(t["rows"], rows) << what;
      if (t["layer"] == kFaultLayer && t["op"] == "mlp_out") before = false;
      if (before) {
        EXPECT_EQ(t["rel_l2"].get<double>(), 0.0) << what << ": " << t.dump();
      } else {
        EXPECT_GT(t["rel_l2"].get<double>(), 0.0) << what << ": " << t.dump();
      }
    }
    EXPECT_FALSE(before) << what;
  }

  std::string good_, bad_, dir_;
};

TEST_F(DiffEncoderCli, NamesThePlantedFaultOnTheCpu) {
  std::string out;
  const auto j = diff(recipe("a", good_, "cpu"), recipe("b", bad_, "cpu"), &out);
  expect_fault_found(j, "cpu");
  EXPECT_NE(out.find("first difference: layer 2 mlp_out"), std::string::npos) << out;
  EXPECT_NE(out.find(", one encoder pass"), std::string::npos) << out;
  EXPECT_NE(out.find("pooled"), std::string::npos) << out;
  EXPECT_EQ(out.find("top-1"), std::string::npos) << "no logits line: " << out;
}

TEST_F(DiffEncoderCli, NamesThePlantedFaultOnCudaAndMatchesTheCpu) {
  if (auto d = cuda_devices(); !d.ok()) GTEST_SKIP() << d.status().message();
  expect_fault_found(diff(recipe("a", good_, "cuda:0"), recipe("b", bad_, "cuda:0")), "cuda");
  std::string out;
  const auto j = diff(recipe("a", good_, "cpu"), recipe("b", good_, "cuda:0"), &out);
  ASSERT_TRUE(j.is_object());
  for (const auto& t : j["taps"]) EXPECT_LT(t["rel_l2"].get<double>(), 2e-2) << t.dump();
  EXPECT_TRUE(j["first_past_threshold"].is_null()) << out;
}

TEST_F(DiffEncoderCli, AnEmbeddingRecipeAgainstAnotherScenarioIsAnError) {
  const std::string llm = dir_ + "/llm.yaml";
  test::write_file(llm, "model: " + good_ + "\ndevice: cpu\nscenario: llm-chat\n");
  auto r = test::rinfer_cli("diff '" + recipe("a", good_, "cpu") + "' '" + llm + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("diff: B"), std::string::npos) << r.err;
  // Token ids outside the vocabulary are named.
  test::write_file(dir_ + "/ids.txt", "[5, 7, 5000]");
  r = test::rinfer_cli("diff '" + recipe("a", good_, "cpu") + "' '" + recipe("b", good_, "cpu") +
                       "' --tokens '" + dir_ + "/ids.txt'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("token id 5000 at position 2 is outside the vocabulary of 1000"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace rinfer
