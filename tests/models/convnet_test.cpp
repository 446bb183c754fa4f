// The image classifiers against PyTorch (tests/tools/gen_vision_goldens.py: torchvision's
// MobileNetV2 and efficientnet_lite_pytorch's EfficientNet-Lite0 on the same checkpoints, in
// float64): logits on a synthetic input (the network alone) and on real photos (decoding and
// preprocessing too), the same top-5 labels, a cat and an espresso; the unfused baseline and the
// reference kernels agree with the optimized path; the recipes differ only in their model
// sections; bad networks and checkpoints give clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/classifier.h"
#include "formats/model_cache.h"
#include "formats/torch_checkpoint.h"
#include "models/convnet/convnet_graph.h"
#include "models/convnet/random_state_dict.h"
#include "models/vision_fixtures.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

const char* const kNets[] = {"mobilenet-v2", "efficientnet-lite0"};

// Under the sanitizers (the debug preset: unoptimized SIMD, some 50x slower) the checks cover
// fewer photos and variants; every one is checked in the optimized builds.
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
constexpr bool kSlow = true;
#else
constexpr bool kSlow = false;
#endif

std::string recipe_path(const std::string& net, const std::string& variant = "optimized") {
  return test::source_dir() + "/recipes/image-classification/" + net + "/" + variant + ".yaml";
}

std::unique_ptr<Classifier> make(const std::string& path, const std::string& extra = "",
                                 const std::string& model = "") {
  auto r = load_recipe(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return nullptr;
  RecipeConfig rc = *r;
  if (extra == "reference") rc.strategies.kernels = cpu::Impl::kReference;
  if (extra == "no-labels") rc.classifier.labels.clear();  // no fetched file needed
  if (!model.empty()) rc.model = rc.model_ref = model;
  auto c = Classifier::create(rc);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::string photo_dir() { return model_cache_dir() + "/photos/"; }

bool have_models() {
  for (const char* n : kNets)
    if (!test::reference_model(n)) return false;
  return std::filesystem::exists(photo_dir() + "coffee.png");
}

#define SKIP_WITHOUT_MODELS()                  \
  if (!have_models())                          \
  GTEST_SKIP() << test::missing_model_message( \
      "mobilenet-v2, "                         \
      "efficientnet-lite0, photos")

TEST(ConvNet, SyntheticInputMatchesPyTorch) {
  SKIP_WITHOUT_MODELS();
  const std::vector<float> x = test::synthetic_image();
  for (const char* net : kNets) {
    for (const char* variant : {"optimized", "baseline"}) {
      if (kSlow && std::string(variant) == "baseline") continue;
      auto c = make(recipe_path(net, variant));
      ASSERT_NE(c, nullptr);
      std::vector<float> logits(1000);
      ASSERT_TRUE(c->logits(x, 1, logits.data()).ok());
      const std::vector<float> ref =
          test::floats(test::vision_goldens()["networks"][net]["synthetic"]);
      EXPECT_LE(test::rel_l2(logits, ref), 1e-5) << net << " " << variant;
    }
  }
}

TEST(ConvNet, PhotosGiveTheTopFiveOfPyTorch) {
  SKIP_WITHOUT_MODELS();
  const std::string photos = photo_dir();
  std::vector<std::string> names, paths;
  for (const auto& p : test::vision_goldens()["photos"]) {
    if (kSlow && names.size() == 2) break;  // chelsea and coffee
    names.push_back(p.get<std::string>());
    paths.push_back(photos + names.back());
  }
  for (const char* net : kNets) {
    auto c = make(recipe_path(net));
    ASSERT_NE(c, nullptr);
    ClassifyStats st;
    auto logits = c->classify_files(paths, &st);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    EXPECT_EQ(st.images, static_cast<int64_t>(paths.size()));
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& g = test::vision_goldens()["networks"][net]["photos"][names[i]];
      const float* row = logits->data() + i * 1000;
      const std::vector<float> got(row, row + 1000);
      EXPECT_LE(test::rel_l2(got, test::floats(g["logits"])), 1e-4) << net << " " << names[i];
      std::vector<int64_t> top;
      for (const ClassLabel& l : c->top_k(row, 5)) top.push_back(l.id);
      EXPECT_EQ(top, g["top5"].get<std::vector<int64_t>>()) << net << " " << names[i];
      if (names[i] == "chelsea.png") {  // a cat: tabby, tiger, Persian, Siamese, Egyptian
        EXPECT_GE(top[0], 281);
        EXPECT_LE(top[0], 285);
        EXPECT_NE(c->label(top[0]).find("cat"), std::string::npos) << c->label(top[0]);
      }
      if (names[i] == "coffee.png") {
        EXPECT_EQ(top[0], 967);
        EXPECT_EQ(c->label(top[0]), "espresso");
      }
    }
  }
}

// ResNet-50 with seeded random weights (tests/tools/gen_vision_goldens.py --resnet writes them
// into the model cache; skipped without them): bottlenecks, downsamples, the max pool.
TEST(ConvNet, ResNet50MatchesTorchvision) {
  if (!test::reference_model("resnet-50-random")) {
    GTEST_SKIP() << "resnet-50-random.pth not in " << model_cache_dir()
                 << " (python tests/tools/gen_vision_goldens.py MODEL_DIR --resnet)";
  }
  const std::vector<float> ref =
      test::floats(test::vision_goldens()["networks"]["resnet-50-random"]["synthetic"]);
  for (const char* variant : {"optimized", "baseline"}) {
    if (kSlow && std::string(variant) == "baseline") continue;
    // The recipe with torch's seeded weights instead of its own random:resnet-50.
    auto c = make(recipe_path("resnet-50", variant), "", "resnet-50-random");
    ASSERT_NE(c, nullptr);
    std::vector<float> logits(1000);
    ASSERT_TRUE(c->logits(test::synthetic_image(), 1, logits.data()).ok());
    EXPECT_LE(test::rel_l2(logits, ref), 1e-5) << variant;
  }
}

// random:resnet-50: torchvision's resnet50 state dict made in memory (no file, no Python): its
// tensors and shapes (53 convolutions with their batch norms, the 1000-class head, 25,557,032
// parameters as torchvision counts them), the same weights every time, and logits that are
// finite and not all alike. Where torch's own file is cached, the names and shapes are its.
TEST(ConvNet, RandomResNet50HasTorchvisionsStateDict) {
  auto a = convnet::random_state_dict("resnet-50", "random:resnet-50");
  ASSERT_TRUE(a.ok()) << a.status().message();
  uint64_t params = 0;
  int convs = 0;
  for (const TorchTensor& t : a->tensors()) {
    params += t.numel;
    convs += t.shape.size() == 4 ? 1 : 0;
  }
  const uint64_t bn_stats = 2 * (64 + 2 * (64 * 3 + 128 * 4 + 256 * 6 + 512 * 3) +
                                 4 * (64 * 3 + 128 * 4 + 256 * 6 + 512 * 3) + 4 * (64 + 128 + 256 + 512));
  EXPECT_EQ(params - bn_stats, 25557032u);
  EXPECT_EQ(convs, 53);
  const TorchTensor* fc = a->find("fc.weight");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->shape, (std::vector<int64_t>{1000, 2048}));
  auto b = convnet::random_state_dict("resnet-50", "random:resnet-50");
  ASSERT_TRUE(b.ok());
  const TorchTensor* w = b->find("layer3.2.conv2.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::memcmp(w->data, a->find("layer3.2.conv2.weight")->data, w->nbytes), 0);
  EXPECT_FALSE(convnet::random_state_dict("resnet-51", "random:resnet-51").ok());

  if (auto torch_file = test::reference_model("resnet-50-random")) {
    auto t = TorchCheckpoint::open(*torch_file);
    ASSERT_TRUE(t.ok());
    size_t matched = 0;
    for (const TorchTensor& x : t->tensors()) {
      if (x.name.ends_with("num_batches_tracked")) continue;
      const TorchTensor* y = a->find(x.name);
      ASSERT_NE(y, nullptr) << x.name;
      EXPECT_EQ(y->shape, x.shape) << x.name;
      ++matched;
    }
    EXPECT_EQ(matched, a->tensors().size());
  }

  if (kSlow) return;  // a ResNet-50 forward pass under the sanitizers takes minutes
  // Logits only: the class names' file is not needed (nothing fetched, as on the GPU machine).
  auto c = make(recipe_path("resnet-50", "optimized"), "no-labels");
  ASSERT_NE(c, nullptr);
  std::vector<float> logits(1000);
  ASSERT_TRUE(c->logits(test::synthetic_image(), 1, logits.data()).ok());
  float lo = logits[0], hi = logits[0];
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 1e-3f);
}

TEST(ConvNet, ReferenceKernelsAgreeWithTheFastOnes) {
  SKIP_WITHOUT_MODELS();
  const std::vector<float> x = test::synthetic_image();
  for (const char* net : kNets) {
    if (kSlow && std::string(net) != "mobilenet-v2") continue;
    auto fast = make(recipe_path(net));
    auto ref = make(recipe_path(net), "reference");
    ASSERT_NE(fast, nullptr);
    ASSERT_NE(ref, nullptr);
    std::vector<float> a(1000), b(1000);
    ASSERT_TRUE(fast->logits(x, 1, a.data()).ok());
    ASSERT_TRUE(ref->logits(x, 1, b.data()).ok());
    EXPECT_LE(test::rel_l2(a, b), 1e-5) << net;
    EXPECT_LE(test::rel_l2(b, test::floats(test::vision_goldens()["networks"][net]["synthetic"])),
              1e-6)
        << net;
  }
}

// fusion.blocks runs the same arithmetic band by band: the logits are bit-identical.
TEST(ConvNet, FusedBlocksGiveTheUnfusedBlocksLogitsExactly) {
  SKIP_WITHOUT_MODELS();
  std::vector<float> batch;
  const std::vector<float> one = test::synthetic_image();
  for (int i = 0; i < 3; ++i)
    for (float v : one) batch.push_back(v * (1.0f + 0.2f * static_cast<float>(i)));
  for (const char* net : kNets) {
    auto r = load_recipe(recipe_path(net));
    ASSERT_TRUE(r.ok());
    std::vector<float> logits[2];
    for (bool blocks : {false, true}) {
      RecipeConfig rc = *r;
      rc.strategies.fusion.blocks = blocks;
      auto c = Classifier::create(rc);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      EXPECT_EQ((*c)->model().describe().find("blocks fused") != std::string::npos, blocks);
      logits[blocks].resize(3 * 1000);
      ASSERT_TRUE((*c)->logits(batch, 3, logits[blocks].data()).ok());
    }
    EXPECT_EQ(logits[0], logits[1]) << net;
  }
}

TEST(ConvNet, BatchesGiveEachImageItsOwnLogits) {
  SKIP_WITHOUT_MODELS();
  auto c = make(recipe_path("mobilenet-v2"));
  ASSERT_NE(c, nullptr);
  const std::vector<float> one = test::synthetic_image();
  // Five different images in one call (batch 32 recipe): each row equals the image alone.
  std::vector<float> batch;
  for (int i = 0; i < 5; ++i)
    for (float v : one) batch.push_back(v * (1.0f - 0.1f * static_cast<float>(i)));
  std::vector<float> all(5 * 1000);
  ASSERT_TRUE(c->logits(batch, 5, all.data()).ok());
  for (int i = 0; i < 5; ++i) {
    std::vector<float> alone(1000);
    std::vector<float> img(batch.begin() + i * one.size(), batch.begin() + (i + 1) * one.size());
    ASSERT_TRUE(c->logits(img, 1, alone.data()).ok());
    EXPECT_LE(test::rel_l2(std::vector<float>(all.begin() + i * 1000, all.begin() + (i + 1) * 1000),
                           alone),
              1e-6)
        << i;
  }
}

// The recipes of the networks differ in their model sections only: the checkpoint, the
// network description and the normalization that the training used.
TEST(ConvNet, RecipesDifferOnlyInTheirModelSections) {
  auto a = load_recipe(recipe_path("mobilenet-v2"));
  auto b = load_recipe(recipe_path("efficientnet-lite0"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->model, b->model);
  EXPECT_NE(a->classifier.network.strides, b->classifier.network.strides);
  RecipeConfig x = *b;
  x.path = a->path;
  x.model = a->model;
  x.model_ref = a->model_ref;
  x.classifier.network = a->classifier.network;
  x.classifier.preprocess.mean = a->classifier.preprocess.mean;
  x.classifier.preprocess.std = a->classifier.preprocess.std;
  x.chain = a->chain;
  x.strategies.origins = a->strategies.origins;
  EXPECT_EQ(x.strategies_summary(), a->strategies_summary());
  EXPECT_EQ(x.classifier.labels, a->classifier.labels);
  EXPECT_EQ(x.classifier.preprocess.resize, a->classifier.preprocess.resize);
  EXPECT_EQ(x.classifier.preprocess.crop, a->classifier.preprocess.crop);
  EXPECT_EQ(x.classifier.max_batch, a->classifier.max_batch);
  EXPECT_EQ(x.scenario, a->scenario);
  if (!have_models()) return;
  // The swapped recipe is the MobileNetV2 one: its logits.
  auto c = Classifier::create(x);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<float> logits(1000);
  ASSERT_TRUE((*c)->logits(test::synthetic_image(), 1, logits.data()).ok());
  EXPECT_LE(
      test::rel_l2(logits,
                   test::floats(test::vision_goldens()["networks"]["mobilenet-v2"]["synthetic"])),
      1e-5);
}

TEST(ConvNet, WrongNetworkDescriptionsAreClearErrors) {
  SKIP_WITHOUT_MODELS();
  auto r = load_recipe(recipe_path("mobilenet-v2"));
  ASSERT_TRUE(r.ok());
  auto expect_error = [&](RecipeConfig rc, const std::string& want) {
    auto c = Classifier::create(rc);
    ASSERT_FALSE(c.ok()) << want;
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().message();
  };
  RecipeConfig rc = *r;
  rc.classifier.network.strides.pop_back();
  expect_error(rc, "17 blocks but the recipe's network gives 16 strides");
  rc = *r;
  rc.classifier.network.family = "resnet";
  expect_error(rc, "mobilenet-v2");
  rc = *r;
  rc.model = rc.model_ref = *test::reference_model("efficientnet-lite0");
  expect_error(rc, "16 blocks but the recipe's network gives 17 strides");
  rc = *r;
  rc.model = rc.model_ref = test::test_data_path("torch/sd_zip.pt");
  auto c = Classifier::create(rc);
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace rinfer
