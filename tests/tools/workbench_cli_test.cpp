// The workbench end to end on tiny random llamas. `rinfer diff`: a fault planted in one layer of
// one variant (its MLP down projection) is named, every tap before it agrees exactly, and the
// outputs (table, JSON rows, SVG) and the errors; on a machine with a GPU the same runs go
// through the CUDA runner's taps too. `rinfer eval`: the same model passes its gate (exit 0),
// the planted fault fails it (exit 1).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../models/tiny_hf_model.h"
#include "cli_util.h"
#include "core/cuda_info.h"
#include "test_util.h"
#include "tiny_model.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) { return test::rinfer_cli(args); }
using test::slurp;

class WorkbenchCli : public ::testing::Test {
 protected:
  static constexpr int kFaultLayer = 3;

  void SetUp() override {
    spec_.n_layer = 6;
    spec_.n_embd = 128;  // head_dim 64, which the CUDA attention takes
    spec_.n_head = 2;
    spec_.n_head_kv = 1;
    spec_.n_ff = 192;
    spec_.n_vocab = 96;  // the test tokenizer's (tiny_model.h)
    spec_.seed = 7;
    const test::TinyWeights w = test::make_tiny_weights(spec_, /*round_to_bf16=*/true);
    test::TinyWeights faulty = w;
    // The planted fault: layer 3's down projection with a third of its entries flipped.
    auto& down = faulty.at(fmt::format("model.layers.{}.mlp.down_proj.weight", kFaultLayer));
    for (size_t i = 0; i < down.values.size(); i += 3) down.values[i] = -down.values[i];
    dir_ = test::fresh_dir("diff_io");
    good_ = test::with_tiny_tokenizer(test::write_gguf_model("diff_good", spec_, w),
                                      dir_ + "/good.gguf");
    bad_ = test::with_tiny_tokenizer(test::write_gguf_model("diff_bad", spec_, faulty),
                                     dir_ + "/bad.gguf");
    test::write_file(dir_ + "/tokens.txt", "[5, 95, 3, 77, 12, 19,\n 0, 42, 8, 11, 64 33 17]\n");
  }

  std::string recipe(const std::string& name, const std::string& model, const std::string& device,
                     const std::string& more = "") const {
    const std::string path = dir_ + "/" + name + ".yaml";
    test::write_file(path, "model: " + model + "\ndevice: " + device +
                               "\nscenario: llm-chat\ncontext_length: 64\nstrategies:\n  threads: "
                               "{count: 1}\n" +
                               more);
    return path;
  }

  // Runs the diff and returns its JSON (empty on failure, with the failure recorded).
  nlohmann::json diff(const std::string& a, const std::string& b, std::string* out = nullptr) {
    const std::string json = dir_ + "/out/diff.json", svg = dir_ + "/out/diff.svg";
    auto r = rinfer("diff '" + a + "' '" + b + "' --tokens '" + dir_ + "/tokens.txt' --json '" +
                    json + "' --svg '" + svg + "'");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (out != nullptr) *out = r.out;
    const std::string s = slurp(svg);
    EXPECT_EQ(s.rfind("<svg", 0), 0u) << s.substr(0, 80);
    EXPECT_NE(s.find("<polyline"), std::string::npos);
    auto j = nlohmann::json::parse(slurp(json), nullptr, false);
    EXPECT_FALSE(j.is_discarded());
    return j.is_discarded() ? nlohmann::json() : j;
  }

  // The planted fault named, every tap before it exact, and the error carried onwards.
  void expect_fault_found(const nlohmann::json& j, const std::string& what) {
    ASSERT_TRUE(j.is_object()) << what;
    EXPECT_EQ(j["tokens"], 13) << what;
    const auto& taps = j["taps"];
    ASSERT_EQ(taps.size(), static_cast<size_t>(2 + 5 * spec_.n_layer)) << what;
    ASSERT_TRUE(j["first_past_threshold"].is_object()) << what;
    EXPECT_EQ(j["first_past_threshold"]["layer"], kFaultLayer) << what;
    EXPECT_EQ(j["first_past_threshold"]["op"], "mlp_out") << what;
    EXPECT_EQ(j["first_difference"]["layer"], kFaultLayer) << what;
    EXPECT_EQ(j["first_difference"]["op"], "mlp_out") << what;
    bool before = true;
    for (const auto& t : taps) {
      EXPECT_EQ(t["rows"], 13) << what;
      if (t["layer"] == kFaultLayer && t["op"] == "mlp_out") before = false;
      if (before) {
        EXPECT_EQ(t["rel_l2"].get<double>(), 0.0) << what << ": " << t.dump();
      } else {
        EXPECT_GT(t["rel_l2"].get<double>(), 0.05) << what << ": " << t.dump();
      }
    }
    EXPECT_FALSE(before) << what;
    EXPECT_LT(j["logits"]["top1_agreement"].get<double>(), 1.0) << what;
    EXPECT_GT(j["logits"]["mean_kl"].get<double>(), 0.0) << what;
  }

  test::TinySpec spec_;
  std::string good_, bad_, dir_;
};

TEST_F(WorkbenchCli, DiffNamesThePlantedFaultOnTheCpu) {
  std::string out;
  const auto j = diff(recipe("a", good_, "cpu"), recipe("b", bad_, "cpu"), &out);
  expect_fault_found(j, "cpu");
  EXPECT_NE(out.find("first past rel L2 0.05: layer 3 mlp_out"), std::string::npos) << out;
  EXPECT_NE(out.find("first difference: layer 3 mlp_out"), std::string::npos) << out;
  EXPECT_NE(out.find("13 tokens, teacher-forced"), std::string::npos) << out;
  EXPECT_EQ(j["a"]["device"], "cpu");
  EXPECT_EQ(j["b"]["n_layer"], spec_.n_layer);
}

TEST_F(WorkbenchCli, DiffOfIdenticalRecipesAgreesEverywhere) {
  // A prompt, tokenized by the model's tokenizer (BOS + one token a character).
  auto r = rinfer("diff '" + recipe("a", good_, "cpu") + "' '" + recipe("b", good_, "cpu") +
                  "' -p 'abc def'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("9 tokens, teacher-forced"), std::string::npos) << r.out;
  std::string out;
  const auto j = diff(recipe("a", good_, "cpu"), recipe("b", good_, "cpu"), &out);
  ASSERT_TRUE(j.is_object());
  for (const auto& t : j["taps"]) EXPECT_EQ(t["rel_l2"].get<double>(), 0.0) << t.dump();
  EXPECT_TRUE(j["first_past_threshold"].is_null());
  EXPECT_TRUE(j["first_difference"].is_null());
  EXPECT_EQ(j["logits"]["top1_agreement"].get<double>(), 1.0);
  EXPECT_NE(out.find("no difference: every tap is identical"), std::string::npos) << out;
  EXPECT_NE(out.find("none past rel L2 0.05"), std::string::npos) << out;
}

TEST_F(WorkbenchCli, DiffNamesThePlantedFaultOnCuda) {
  if (auto d = cuda_devices(); !d.ok()) GTEST_SKIP() << d.status().message();
  // One device for both: the runs agree exactly up to the fault.
  expect_fault_found(diff(recipe("a", good_, "cuda:0"), recipe("b", bad_, "cuda:0")), "cuda");
  // The CPU against CUDA on the same weights: every tap within bf16 activations' error.
  std::string out;
  const auto j = diff(recipe("a", good_, "cpu"), recipe("b", good_, "cuda:0"), &out);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["taps"].size(), static_cast<size_t>(2 + 5 * spec_.n_layer));
  for (const auto& t : j["taps"]) EXPECT_LT(t["rel_l2"].get<double>(), 2e-2) << t.dump();
  EXPECT_TRUE(j["first_past_threshold"].is_null()) << out;
  EXPECT_GE(j["logits"]["top1_agreement"].get<double>(), 0.9);
}

TEST_F(WorkbenchCli, DiffErrorsNameWhatIsWrong) {
  const std::string a = recipe("a", good_, "cpu");
  // Another model (fewer layers).
  test::TinySpec other = spec_;
  other.n_layer = 2;
  const std::string small = test::with_tiny_tokenizer(
      test::write_gguf_model("diff_small", other, test::make_tiny_weights(other, true)),
      dir_ + "/small.gguf");
  auto r = rinfer("diff '" + a + "' '" + recipe("s", small, "cpu") + "' --tokens '" + dir_ +
                  "/tokens.txt'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the recipes run different models (A: 6 layers of 128, vocabulary 96; B: 2"),
            std::string::npos)
      << r.err;

  test::write_file(dir_ + "/bad_tokens.txt", "1 2 x3 4");
  r = rinfer("diff '" + a + "' '" + a + "' --tokens '" + dir_ + "/bad_tokens.txt'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad_tokens.txt: 'x3' (token 2) is not a token id"), std::string::npos)
      << r.err;

  test::write_file(dir_ + "/far_tokens.txt", "1 2 300");
  r = rinfer("diff '" + a + "' '" + a + "' --tokens '" + dir_ + "/far_tokens.txt'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("token 300 (at 2) is out of the vocabulary [0, 96)"), std::string::npos)
      << r.err;

  r = rinfer("diff '" + a + "' '" + a + "' -p 'hello' --tokens '" + dir_ + "/tokens.txt'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give -p or --tokens, not both"), std::string::npos) << r.err;

  r = rinfer("diff '" + a + "' '" + dir_ + "/missing.yaml' --tokens '" + dir_ + "/tokens.txt'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.yaml"), std::string::npos) << r.err;
}

TEST_F(WorkbenchCli, EvalPassesTheSameModelAndFailsThePlantedFault) {
  test::write_file(dir_ + "/text.txt", "the cat sat on the mat; a dog ran by. ");
  const std::string text = " --text '" + dir_ + "/text.txt' --tokens 100 --window 40";
  const std::string good = recipe("a", good_, "cpu"), json = dir_ + "/out/eval.json";
  auto r = rinfer("eval '" + good + "' --vs '" + good + "'" + text + " --json '" + json + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("100 tokens of " + dir_ + "/text.txt, 3 windows of 40"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("gate: top-1 >= 0.95, mean KL <= 0.05, ppl change <= +2% (the defaults)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nPASS\n"), std::string::npos) << r.out;
  // The decode steps too: the first window's 40 positions (39 steps after a prompt of one).
  EXPECT_NE(r.out.find("decode steps (the first window's last 40 positions, at 1 and 3 seats; "
                       "the worst seat):"),
            std::string::npos)
      << r.out;
  auto j = nlohmann::json::parse(slurp(json), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["passed"], true);
  EXPECT_EQ(j["tokens"], 100);
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["metrics"]["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(j["metrics"]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(j["metrics"]["ppl_change"].get<double>(), 0.0);
  EXPECT_GT(j["metrics"]["ppl"].get<double>(), 1.0);
  EXPECT_EQ(j["decode"]["passed"], true);
  EXPECT_EQ(j["decode"]["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(j["decode"]["mean_kl"].get<double>(), 1e-9);

  // The planted fault: past the default gate, exit 1 with the failures named.
  const std::string bad = recipe("b", bad_, "cpu");
  r = rinfer("eval '" + bad + "' --vs '" + good + "'" + text + " --json '" + json + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL: top-1"), std::string::npos) << r.out;
  j = nlohmann::json::parse(slurp(json), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["passed"], false);
  EXPECT_LT(j["metrics"]["top1_agreement"].get<double>(), 0.95);
  EXPECT_GT(j["metrics"]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(j["decode"]["passed"], false);
  EXPECT_NE(j["failures"].get<std::string>().find("; decode at 1 seat: top-1"), std::string::npos)
      << j["failures"];

  // Its recipe's own gate, loosened to the bounds' limits, lets it pass.
  const std::string loose = recipe(
      "loose", bad_, "cpu", "precision: {min_top1: 0, max_mean_kl: 100, max_ppl_change: 10}\n");
  r = rinfer("eval '" + loose + "' --vs '" + good + "'" + text);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(the recipe's and defaults)"), std::string::npos) << r.out;

  // Another model: an error, exit 1.
  r = rinfer("eval '" + recipe("t", test::tiny_model_with_tokenizer(dir_), "cpu") + "' --vs '" +
             good + "'" + text);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not the same model"), std::string::npos) << r.err;
}

// `rinfer eval --per-layer`: every matrix of layer 3 planted with an outlier in each block of
// 32 (sixteen times the largest other value), which q4_0's 16 levels cannot hold beside the rest;
// the sweep must rank that layer first, and keeping it must be the first step of the search.
TEST_F(WorkbenchCli, PerLayerSweepRanksThePlantedLayerFirstAndKeepsIt) {
  constexpr int kLoud = 3;
  test::TinyWeights w = test::make_tiny_weights(spec_, /*round_to_bf16=*/true);
  for (auto& [name, t] : w) {
    if (name.find(fmt::format("layers.{}.", kLoud)) == std::string::npos || t.shape.size() != 2) {
      continue;
    }
    const float m = *std::max_element(t.values.begin(), t.values.end());
    for (size_t i = 0; i < t.values.size(); i += 32) t.values[i] = 16.0f * m;
  }
  const std::string model =
      test::with_tiny_tokenizer(test::write_gguf_model("sweep", spec_, w), dir_ + "/sweep.gguf");
  test::write_file(dir_ + "/text.txt", "the cat sat on the mat; a dog ran by. ");
  const std::string ref = recipe("ref", model, "cpu");
  const std::string q4 = recipe("q4", model, "cpu", "  quantization: {weights: q4_0}\n");
  const std::string json = dir_ + "/out/layers.json";
  auto r = rinfer("eval '" + q4 + "' --vs '" + ref + "' --per-layer --text '" + dir_ +
                  "/text.txt' --tokens 80 --window 40 --json '" + json + "'");
  auto j = nlohmann::json::parse(slurp(json), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  EXPECT_EQ(j["weights"], "q4_0");
  ASSERT_EQ(j["layers"].size(), static_cast<size_t>(spec_.n_layer)) << r.out;
  for (int il = 0; il < spec_.n_layer; ++il) {
    const auto& l = j["layers"][static_cast<size_t>(il)];
    EXPECT_EQ(l["layer"], il);
    EXPECT_EQ(l["keep"].size(), static_cast<size_t>(spec_.n_layer - 1));
    EXPECT_GT(l["mean_kl"].get<double>(), 0.0) << il;  // each layer's own error, not none
  }
  ASSERT_EQ(j["ranking"].size(), static_cast<size_t>(spec_.n_layer));
  EXPECT_EQ(j["ranking"][0], kLoud) << r.out;
  const double loud = j["layers"][kLoud]["gate_distance"].get<double>();
  EXPECT_GT(loud, 1.0);  // alone, past the default gate
  for (int il = 0; il < spec_.n_layer; ++il) {
    const auto& l = j["layers"][static_cast<size_t>(il)];
    if (il != kLoud) EXPECT_LT(l["gate_distance"].get<double>(), loud) << il;
  }
  // The search starts from every layer quantized, then keeps the worst first: the planted layer,
  // which alone lifts top-1 most of the way, and never the quiet last layers.
  const auto& search = j["keep_search"];
  ASSERT_GE(search.size(), 2u) << r.out;
  EXPECT_TRUE(search[0]["keep"].empty());
  EXPECT_FALSE(search[0]["passed"].get<bool>());
  EXPECT_EQ(search[1]["keep"], nlohmann::json::array({kLoud}));
  EXPECT_GT(search[1]["top1_agreement"].get<double>(),
            search[0]["top1_agreement"].get<double>() + 0.3);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto& keep = j["suggested_keep_layers"];
  EXPECT_EQ(keep, search.back()["keep"]);
  EXPECT_TRUE(search.back()["passed"].get<bool>());
  EXPECT_NE(std::find(keep.begin(), keep.end(), kLoud), keep.end());
  EXPECT_EQ(std::find(keep.begin(), keep.end(), spec_.n_layer - 1), keep.end());
  EXPECT_NE(r.out.find("keep_layers: " + keep.dump().substr(0, 2)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| layer | top-1 | mean KL | ppl change | to the gate | rank |"),
            std::string::npos)
      << r.out;

  // A recipe that converts no weights has nothing to sweep.
  r = rinfer("eval '" + ref + "' --vs '" + ref + "' --per-layer");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("converts no weights (strategies.quantization.weights)"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace rinfer
