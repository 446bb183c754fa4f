// End-to-end tests of `rinfer classify` and `rinfer bench` on an image-classification recipe:
// the binary as a user runs it, real photos from the model cache, bad inputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/model_cache.h"
#include "test_util.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) {
  return test::run_command(std::string(RINFER_BINARY) + " " + args);
}

std::string recipe() {
  return test::source_dir() + "/recipes/image-classification/mobilenet-v2/optimized.yaml";
}

std::string photo(const std::string& name) { return model_cache_dir() + "/photos/" + name; }

bool have_model() {
  return test::reference_model("mobilenet-v2") &&
         resolve_cache_file("imagenet-classes", ".json").ok() &&
         std::filesystem::exists(photo("coffee.png"));
}

TEST(ClassifyCli, JsonNamesTheClassesOfEachPhoto) {
  if (!have_model()) GTEST_SKIP() << test::missing_model_message("mobilenet-v2, photos");
  auto r = rinfer("classify " + recipe() + " " + photo("coffee.png") + " " + photo("chelsea.png") +
                  " --top 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["top"].size(), 3u);
  EXPECT_EQ(j["data"][0]["top"][0]["label"], "espresso");
  EXPECT_EQ(j["data"][0]["top"][0]["id"], 967);
  EXPECT_GT(j["data"][0]["top"][0]["probability"].get<double>(), 0.9);
  const std::string cat = j["data"][1]["top"][0]["label"];
  EXPECT_NE(cat.find("cat"), std::string::npos) << cat;
  // The text form, one image per forward pass (batch1.yaml: two batches): a block per image.
  const std::string b1 =
      test::source_dir() + "/recipes/image-classification/mobilenet-v2/batch1.yaml";
  r = rinfer("classify " + b1 + " " + photo("chelsea.png") + " " + photo("coffee.png"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t cat_at = r.out.find("chelsea.png:"), coffee_at = r.out.find("coffee.png:");
  ASSERT_NE(cat_at, std::string::npos) << r.out;
  ASSERT_NE(coffee_at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("espresso", coffee_at), std::string::npos) << r.out;
  EXPECT_NE(r.out.substr(cat_at, coffee_at - cat_at).find("cat"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("2 images, 2 forward passes"), std::string::npos) << r.err;
  r = rinfer("classify " + b1 + " " + photo("coffee.png"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 image, 1 forward pass;"), std::string::npos) << r.err;
}

TEST(ClassifyCli, BadImagesAndRecipesAreOneLineErrors) {
  if (!have_model()) GTEST_SKIP() << test::missing_model_message("mobilenet-v2, photos");
  const std::string text = test::write_temp_file("not-an-image.png", "hello, world");
  auto r = rinfer("classify " + recipe() + " " + text);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not-an-image.png: not a JPEG or PNG image"), std::string::npos) << r.err;
  r = rinfer("classify " + recipe() + " /nonexistent/cat.jpg");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/cat.jpg"), std::string::npos) << r.err;
  // A chat recipe is not an image-classification one.
  r = rinfer("classify " + test::source_dir() +
             "/recipes/embedding/all-minilm-l6-v2/optimized.yaml " + photo("coffee.png"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not image-classification"), std::string::npos) << r.err;
}

TEST(ClassifyCli, BenchWritesItsTableAndJson) {
  if (!have_model()) GTEST_SKIP() << test::missing_model_message("mobilenet-v2, photos");
  const std::string json = test::write_temp_file("classify-bench.json", "");
  auto r = rinfer("bench " + recipe() + " --vs optimized --images 4 --repeat 1 --warmup 0 --json " +
                  json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The batch as it ran: 4 images are one batch of 4, not the recipe's max_batch of 32.
  EXPECT_NE(r.out.find("| optimized | 4 |"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(test::run_command("cat " + json).out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["benchmark"], "rinfer bench (image-classification)");
  EXPECT_EQ(j["variants"][0]["top1_agreement"], 1.0);
  EXPECT_GT(j["variants"][0]["images_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["variants"][0]["batch"], 4);
  EXPECT_EQ(j["variants"][0]["max_batch"], 32);
}

}  // namespace
}  // namespace rinfer
