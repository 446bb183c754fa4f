// `rinfer diff` of two image-classification recipes: MobileNetV2's checkpoint against a copy
// with a fault planted in one block (block 5's projection, every third weight negated). The diff
// names that node's output as the first difference and the first past the threshold, every tap
// before it agrees exactly, and the logits differ; on a machine with a GPU the same through the
// cuDNN runner's taps. A prompt given to a classifier recipe is an error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../models/tiny_hf_model.h"
#include "cli_util.h"
#include "core/cuda_info.h"
#include "engine/classifier.h"
#include "formats/torch_checkpoint.h"
#include "models/convnet/convnet_graph.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

constexpr const char* kFaulty = "features.5.conv.2";  // block 5's projection (a 1x1 convolution)

class DiffClassifierCli : public ::testing::Test {
 protected:
  void SetUp() override {
    auto good = test::reference_model("mobilenet-v2");
    if (!good) GTEST_SKIP() << test::missing_model_message("mobilenet-v2");
    dir_ = test::fresh_dir("diff_convnet_io");
    good_ = *good;
    bad_ = dir_ + "/bad.pth";
    std::filesystem::copy_file(good_, bad_);
    auto ckpt = TorchCheckpoint::open(good_);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    const TorchTensor* w = ckpt->find(std::string(kFaulty) + ".weight");
    ASSERT_NE(w, nullptr);
    ASSERT_FALSE(w->copied);
    std::vector<float> v(w->numel);
    std::memcpy(v.data(), w->data, w->nbytes);
    for (size_t i = 0; i < v.size(); i += 3) v[i] = -v[i];
    std::fstream f(bad_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(w->data - ckpt->file()->data()));
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(w->nbytes));
    ASSERT_TRUE(f.good());
    // The node whose output the fault changes first.
    auto recipe = load_recipe(test::source_dir() +
                              "/recipes/image-classification/mobilenet-v2/optimized.yaml");
    ASSERT_TRUE(recipe.ok()) << recipe.status().to_string();
    auto g = convnet::build_graph(*ckpt, conv_net_spec(recipe->classifier.network));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      if (g->nodes[i].name == kFaulty) node_ = static_cast<int>(i);
    }
    ASSERT_GE(node_, 0);
  }

  // The folder's recipe `variant` with its model replaced (a variant over optimized.yaml gets
  // its base replaced by optimized.yaml with that model).
  std::string recipe(const std::string& name, const std::string& variant,
                     const std::string& model) const {
    std::ifstream in(test::source_dir() + "/recipes/image-classification/mobilenet-v2/" + variant +
                     ".yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const std::string key = "model: mobilenet-v2\n", base = "base: optimized.yaml\n";
    if (const size_t at = text.find(key); at != std::string::npos) {
      text.replace(at, key.size(), "model: " + model + "\n");
    } else {
      const size_t b = text.find(base);
      EXPECT_NE(b, std::string::npos) << variant;
      if (b == std::string::npos) return "";
      text.replace(b, base.size(), "base: " + recipe(name + "_base", "optimized", model) + "\n");
    }
    const std::string path = dir_ + "/" + name + ".yaml";
    test::write_file(path, text);
    return path;
  }

  // `exact`: the taps before the fault are bit-identical (the CPU). cuDNN picks its algorithms
  // per process, so two CUDA runs of the same weights differ by rounding (rel L2 ~1e-6 to 2e-4
  // measured on the H100) long before the fault, which only the threshold then names.
  void expect_fault_found(const std::string& a, const std::string& b, const std::string& what,
                          bool exact = true) {
    const std::string json = dir_ + "/diff.json";
    auto r = test::rinfer_cli("diff '" + a + "' '" + b + "' --json '" + json + "'");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("the built-in image"), std::string::npos) << r.out;
    auto j = nlohmann::json::parse(test::slurp(json), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["scenario"], "image-classification");
    EXPECT_EQ(j["images"], 1);
    if (exact) {
      EXPECT_EQ(j["first_difference"]["layer"], node_) << what;
      EXPECT_EQ(j["first_difference"]["op"], "block_out") << what;
    } else {
      EXPECT_LE(j["first_difference"]["layer"].get<int>(), node_) << what;
    }
    EXPECT_EQ(j["first_past_threshold"]["layer"], node_) << what;
    bool before = true;
    for (const auto& t : j["taps"]) {
      EXPECT_EQ(t["rows"], 1) << what;
      if (t["layer"] == node_) before = false;
      if (before) {
        if (exact) {
          EXPECT_EQ(t["rel_l2"].get<double>(), 0.0) << what << ": " << t.dump();
        } else {
          EXPECT_LT(t["rel_l2"].get<double>(), 1e-3) << what << ": " << t.dump();
        }
      }
    }
    EXPECT_FALSE(before) << what;
    EXPECT_EQ(j["taps"].back()["op"], "logits") << what;
    EXPECT_GT(j["logits"]["mean_kl"].get<double>(), 0.0) << what;
  }

  std::string dir_, good_, bad_;
  int node_ = -1;
};

TEST_F(DiffClassifierCli, NamesThePlantedFaultOnTheCpu) {
  expect_fault_found(recipe("a", "optimized", good_), recipe("b", "optimized", bad_), "cpu");
  // The unfused baseline against the fused blocks, on the same weights: identical taps.
  const std::string json = dir_ + "/same.json";
  auto r = test::rinfer_cli("diff '" + recipe("base", "baseline", good_) + "' '" +
                            recipe("opt", "optimized", good_) + "' --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(test::slurp(json), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_TRUE(j["first_past_threshold"].is_null()) << r.out;
  EXPECT_EQ(j["logits"]["top1_agreement"].get<double>(), 1.0);

  r = test::rinfer_cli("diff '" + recipe("a", "optimized", good_) + "' '" +
                       recipe("b", "optimized", bad_) + "' -p 'a cat'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is an image-classification recipe: give --image, not -p or --tokens"),
            std::string::npos)
      << r.err;
}

TEST_F(DiffClassifierCli, NamesThePlantedFaultOnCuda) {
  if (auto d = cuda_devices(); !d.ok()) GTEST_SKIP() << d.status().message();
  expect_fault_found(recipe("a", "cuda", good_), recipe("b", "cuda", bad_), "cuda",
                     /*exact=*/false);
}

}  // namespace
}  // namespace rinfer
