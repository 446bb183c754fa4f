// The image classifiers' taps (ImageBatch::taps, models/taps.h): on random ResNet-50 weights (no
// checkpoint needed; 64 x 64 images to keep it quick) a pass with taps gives the same logits bit
// for bit, every node's output arrives with one row per image, the logits tap is the logits and
// the pooled tap the pixel mean of the node before it; MobileNetV2's fused blocks tap the same
// outputs, bit for bit, as its unfused ones; on a machine with a GPU the cuDNN runner's taps
// match the CPU's within bf16's error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/cuda_info.h"
#include "engine/classifier.h"
#include "engine/layer_diff.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

std::string recipe_path(const std::string& net, const std::string& variant) {
  return test::source_dir() + "/recipes/image-classification/" + net + "/" + variant + ".yaml";
}

std::unique_ptr<Classifier> make(const std::string& net, const std::string& variant, int64_t crop,
                                 bool blocks = true) {
  auto r = load_recipe(recipe_path(net, variant));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return nullptr;
  RecipeConfig rc = *r;
  rc.classifier.preprocess.resize = crop;
  rc.classifier.preprocess.crop = crop;
  rc.classifier.labels.clear();
  rc.strategies.fusion.blocks = blocks;
  auto c = Classifier::create(rc);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Two images of `crop` x `crop`, normalized-looking values.
std::vector<float> two_images(int64_t crop) {
  std::vector<float> x(static_cast<size_t>(2 * crop * crop * 3));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * double(i)) * 1.5);
  return x;
}

TEST(ConvNetTaps, SameLogitsEveryNodeAndThePoolIsTheMean) {
  constexpr int64_t kCrop = 64;
  auto c = make("resnet-50", "optimized", kCrop);
  ASSERT_TRUE(c);
  const std::vector<float> x = two_images(kCrop);
  std::vector<float> plain(2 * 1000), tapped(2 * 1000);
  ASSERT_TRUE(c->logits(x, 2, plain.data()).ok());
  TapRecorder rec;
  ASSERT_TRUE(c->logits(x, 2, tapped.data(), nullptr, &rec).ok());
  ASSERT_TRUE(rec.status().ok());
  EXPECT_EQ(plain, tapped);  // bit for bit

  // ResNet-50: the stem, the max pool, 16 blocks of 3 or 4 convolutions, the pool and the head.
  EXPECT_GE(rec.streams().size(), 50u);
  const TapRecorder::Stream* logits = nullptr;
  const TapRecorder::Stream* pooled = nullptr;
  for (const auto& [key, s] : rec.streams()) {
    EXPECT_EQ(s.rows(), 2) << tap_label(s.kind, s.layer);
    if (s.kind == TapKind::kLogits) logits = &s;
    if (s.kind == TapKind::kPooled) pooled = &s;
  }
  ASSERT_TRUE(logits && pooled);
  EXPECT_EQ(logits->values, plain);
  EXPECT_EQ(pooled->layer + 1, logits->layer);
  ASSERT_EQ(pooled->width, 2048);
  const TapRecorder::Stream* last = rec.find(TapKind::kBlockOut, pooled->layer - 1);
  ASSERT_NE(last, nullptr);
  const int64_t pixels = last->width / pooled->width;  // 2 x 2 at 64 x 64
  EXPECT_EQ(pixels, 4);
  double worst = 0;
  for (int64_t img = 0; img < 2; ++img) {
    for (int64_t ch = 0; ch < 2048; ++ch) {
      double sum = 0;
      for (int64_t p = 0; p < pixels; ++p) sum += last->values[(img * pixels + p) * 2048 + ch];
      const double want = sum / static_cast<double>(pixels);
      worst = std::max(worst, std::fabs(want - pooled->values[img * 2048 + ch]) /
                                  std::max(1.0, std::fabs(want)));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

// Fused inverted-residual blocks write only a block's output; the unfused path taps the same
// outputs (not the expansion or the depthwise one), with the same values.
TEST(ConvNetTaps, FusedBlocksTapTheUnfusedBlocksOutputs) {
  if (!test::reference_model("mobilenet-v2")) {
    GTEST_SKIP() << test::missing_model_message("mobilenet-v2");
  }
  constexpr int64_t kCrop = 96;
  const std::vector<float> x = two_images(kCrop);
  TapRecorder taps[2];
  for (bool blocks : {false, true}) {
    auto c = make("mobilenet-v2", "optimized", kCrop, blocks);
    ASSERT_TRUE(c);
    std::vector<float> logits(2 * 1000);
    ASSERT_TRUE(c->logits(x, 2, logits.data(), nullptr, &taps[blocks]).ok());
  }
  ASSERT_EQ(taps[0].streams().size(), taps[1].streams().size());
  EXPECT_GE(taps[0].streams().size(), 19u);  // the stem, 17 blocks, the last 1x1, pool, head
  for (const auto& [key, s] : taps[0].streams()) {
    const TapRecorder::Stream* f = taps[1].find(s.kind, s.layer);
    ASSERT_NE(f, nullptr) << tap_label(s.kind, s.layer);
    EXPECT_EQ(f->values, s.values) << tap_label(s.kind, s.layer);
  }
}

TEST(ConvNetTaps, CudaTapsMatchTheCpu) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  constexpr int64_t kCrop = 64;
  auto cpu = make("resnet-50", "optimized", kCrop);
  auto gpu = make("resnet-50", "cuda", kCrop);
  ASSERT_TRUE(cpu && gpu);
  const std::vector<float> x = two_images(kCrop);
  TapRecorder a, b;
  std::vector<float> la(2 * 1000), lb(2 * 1000);
  ASSERT_TRUE(cpu->logits(x, 2, la.data(), nullptr, &a).ok());
  ASSERT_TRUE(gpu->logits(x, 2, lb.data(), nullptr, &b).ok());
  ASSERT_EQ(a.streams().size(), b.streams().size());
  double worst = 0;
  for (const auto& [key, s] : a.streams()) {
    const TapRecorder::Stream* g = b.find(s.kind, s.layer);
    ASSERT_NE(g, nullptr) << tap_label(s.kind, s.layer);
    ASSERT_EQ(g->values.size(), s.values.size()) << tap_label(s.kind, s.layer);
    const double err = test::rel_l2(g->values, s.values);
    worst = std::max(worst, err);
    EXPECT_LT(err, 5e-2) << tap_label(s.kind, s.layer);
  }
  std::printf("resnet-50 (random) %lld taps, CUDA bf16 against the CPU: worst rel L2 %.3g\n",
              static_cast<long long>(a.streams().size()), worst);
  EXPECT_EQ(b.find(TapKind::kLogits, a.streams().rbegin()->second.layer)->values, lb);
}

}  // namespace
}  // namespace rinfer
