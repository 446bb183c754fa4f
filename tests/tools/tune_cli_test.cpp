// rinfer tune end to end on a folder of recipes of a tiny random llama on the CPU: the start is
// slow on purpose (no KV cache), a planted hand-written variant is fast but wrong (every weight
// in Q4_0, outside the folder's tight precision gate) and must be rejected; the search finds a
// faster recipe inside the gate and writes it (it loads as a recipe) with its report (Markdown,
// JSON, SVG); a second run takes every trial from the cache and picks the same recipe.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../models/tiny_hf_model.h"
#include "cli_util.h"
#include "recipe/recipe.h"
#include "test_util.h"
#include "tiny_model.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) { return test::rinfer_cli(args); }
using test::slurp;

class TuneCli : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.n_layer = 3;
    spec_.n_embd = 256;
    spec_.n_head = 4;
    spec_.n_head_kv = 2;
    spec_.n_ff = 512;
    spec_.n_vocab = 96;  // the test tokenizer's (tiny_model.h)
    spec_.seed = 5;
    dir_ = test::fresh_dir("tune_io");
    folder_ = dir_ + "/tiny";
    std::filesystem::create_directories(folder_);
    test::with_tiny_tokenizer(
        test::write_gguf_model("tune_model", spec_, test::make_tiny_weights(spec_, true)),
        folder_ + "/model.gguf");
    const std::string common =
        "model: ./model.gguf\ndevice: cpu\nscenario: llm-chat\ncontext_length: 128\n";
    test::write_file(folder_ + "/baseline.yaml",
                     common + "strategies:\n  kernels: {impl: reference}\n  threads: {count: 1}\n");
    // f32 activations: within 1e-5 nats of the reference; int8 activations or 4-bit weights are
    // not.
    test::write_file(
        folder_ + "/optimized.yaml",
        common +
            "strategies:\n  kv_cache: {enabled: false}\n  threads: {count: 1}\n"
            "  quantization: {activations: float}\nprecision: {max_mean_kl: 0.00001}\n");
    test::write_file(folder_ + "/planted.yaml",
                     "base: optimized.yaml\nstrategies:\n  kv_cache: {enabled: true}\n"
                     "  quantization: {weights: q4_0, keep_layers: [], embeddings: true}\n");
  }

  // Runs the tune and returns its report.
  nlohmann::json tune(std::string* out = nullptr) {
    auto r = rinfer("tune '" + folder_ +
                    "' --budget 3 --prompt-tokens 24 --gen-tokens 12 "
                    "--repeat 2 --precision-tokens 40 --cache '" +
                    dir_ +
                    "/cache.json' "
                    "--out-dir '" +
                    dir_ + "/out'");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (out != nullptr) *out = r.out;
    auto j = nlohmann::json::parse(slurp(dir_ + "/out/report.json"), nullptr, false);
    EXPECT_TRUE(j.is_object());
    return j.is_object() ? j : nlohmann::json();
  }

  static const nlohmann::json* trial_of(const nlohmann::json& j, const std::string& base_name) {
    for (const auto& t : j["trials"]) {
      const std::string b = t["base"];
      if (b.size() >= base_name.size() &&
          b.compare(b.size() - base_name.size(), base_name.size(), base_name) == 0 &&
          t["settings"].empty()) {
        return &t;
      }
    }
    return nullptr;
  }

  test::TinySpec spec_;
  std::string dir_, folder_;
};

TEST_F(TuneCli, FindsAFasterRecipeInsideTheGateRejectsThePlantedOneAndCaches) {
  std::string out;
  const nlohmann::json j = tune(&out);
  ASSERT_TRUE(j.is_object());
  const nlohmann::json* start = trial_of(j, "/optimized.yaml");
  const nlohmann::json* planted = trial_of(j, "/planted.yaml");
  ASSERT_NE(start, nullptr) << j.dump(1);
  ASSERT_NE(planted, nullptr) << j.dump(1);
  // The planted variant: measured and outside the gate. (Which trial is faster is a timing on a
  // shared machine, not asserted: the report is checked against itself.)
  EXPECT_EQ((*planted)["verdict"].get<std::string>().rfind("gate failed", 0), 0u)
      << planted->dump();
  EXPECT_FALSE((*planted)["precision"]["passed"].get<bool>());
  EXPECT_GT((*planted)["speed"]["total_ms"].get<double>(), 0.0);
  // The start passes its own gate; the best is inside the gate, never the planted trial, and is
  // the start or an accepted trial.
  EXPECT_TRUE((*start)["precision"]["passed"].get<bool>()) << start->dump();
  const int best = j["best"];
  ASSERT_GE(best, 0);
  const auto& b = j["trials"][static_cast<size_t>(best)];
  EXPECT_NE(best, (*planted)["id"].get<int>());
  EXPECT_TRUE(b["precision"]["passed"].get<bool>()) << b.dump();
  EXPECT_TRUE(best == (*start)["id"].get<int>() || b["accepted"].get<bool>()) << b.dump();
  for (const auto& t : j["trials"]) {
    if (t["accepted"].get<bool>()) EXPECT_TRUE(t["precision"]["passed"].get<bool>()) << t.dump();
    EXPECT_FALSE(t["cached"].get<bool>()) << t.dump();
  }
  EXPECT_NE(out.find("best: #"), std::string::npos) << out;
  // The outputs: the tuned recipe loads (its comment names the figures), the SVG and Markdown.
  const std::string yaml = slurp(dir_ + "/out/tuned.yaml");
  EXPECT_NE(yaml.find("# rinfer tune"), std::string::npos) << yaml;
  auto tuned = load_recipe(dir_ + "/out/tuned.yaml");
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string() << "\n" << yaml;
  EXPECT_EQ(tuned->device.to_string(), "cpu");
  EXPECT_EQ(slurp(dir_ + "/out/report.svg").rfind("<svg", 0), 0u);
  EXPECT_NE(slurp(dir_ + "/out/report.md").find("| # |"), std::string::npos);

  // The second run: every trial from the cache, the same best.
  const nlohmann::json again = tune();
  ASSERT_TRUE(again.is_object());
  EXPECT_EQ(again["trials"].size(), j["trials"].size());
  for (const auto& t : again["trials"]) {
    if (t["speed"].is_object()) EXPECT_TRUE(t["cached"].get<bool>()) << t.dump();
  }
  EXPECT_EQ(again["best"], j["best"]);
  EXPECT_EQ(again["trials"][static_cast<size_t>(best)]["settings"], b["settings"]);
}

// A serving folder: the start runs one request at a time (batching.max_seqs 1) under a load of
// 8 requests, 4 in flight; the search, timing the load's wall time, raises the seats and keeps it.
// Medians of 3 loads: one load's wall time on a busy 2-core machine (ctest runs two tests at
// once) once let the start win.
TEST_F(TuneCli, ServingRecipesAreTimedUnderALoadAndTheSeatsAreSearched) {
  const std::string serve = dir_ + "/serve";
  std::filesystem::create_directories(serve);
  std::filesystem::copy_file(folder_ + "/model.gguf", serve + "/model.gguf");
  const std::string common =
      "model: ./model.gguf\ndevice: cpu\nscenario: llm-serve\ncontext_length: 128\n";
  test::write_file(serve + "/baseline.yaml",
                   common + "strategies:\n  kernels: {impl: reference}\n  threads: {count: 1}\n");
  test::write_file(serve + "/optimized.yaml",
                   common +
                       "strategies:\n  threads: {count: 1}\n  quantization: {activations: "
                       "float}\n  batching: {max_seqs: 1}\nprecision: {max_mean_kl: 0.00001}\n");
  // A hand-written variant that does not load: listed as invalid, and the trials after it (whose
  // ids it leaves a gap in) are keyed by the right fingerprints.
  test::write_file(serve + "/invalid.yaml",
                   "base: optimized.yaml\nstrategies:\n  batching: {max_seqs: 4, "
                   "max_batched_tokens: 1}\n");
  auto r = rinfer("tune '" + serve +
                  "' --budget 2 --prompt-tokens 16 --gen-tokens 16 --requests 8 --concurrency 4 "
                  "--repeat 3 --precision-tokens 40 --cache '" +
                  dir_ + "/serve-cache.json' --out-dir '" + dir_ + "/serve-out'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("the wall time of a load: 8 requests of 16 prompt tokens and 16 "
                       "generated, 4 in flight"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| load ms | output tok/s | total tok/s |"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(slurp(dir_ + "/serve-out/report.json"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  bool seats_tried = false, invalid_listed = false;
  for (const auto& t : j["trials"]) {
    if (t["verdict"].get<std::string>().rfind("invalid: ", 0) == 0 &&
        t["base"].get<std::string>().ends_with("/invalid.yaml")) {
      invalid_listed = true;
    }
    if (t["settings"].contains("batching.max_seqs")) seats_tried = true;
    EXPECT_EQ(t["settings"].contains("batching.priority"), false) << t.dump();
  }
  EXPECT_TRUE(seats_tried) << j.dump(1);
  EXPECT_TRUE(invalid_listed) << j.dump(1);
  // Which trial wins is a matter of timing, for a benchmark to show, not a test (on a busy
  // 2-core machine one load's wall time once let the one-seat start win). The report agrees
  // with itself: the best is the start or an accepted trial, its gate passed, and tuned.yaml holds
  // its seats.
  const int best = j["best"];
  ASSERT_GE(best, 0) << j.dump(1);
  const auto& b = j["trials"][static_cast<size_t>(best)];
  EXPECT_TRUE(best == 0 || b["accepted"].get<bool>()) << b.dump();
  EXPECT_TRUE(b["precision"]["passed"].get<bool>()) << b.dump();
  auto tuned = load_recipe(dir_ + "/serve-out/tuned.yaml");
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  const int64_t seats = b["settings"].contains("batching.max_seqs")
                            ? std::stoll(b["settings"]["batching.max_seqs"].get<std::string>())
                            : int64_t{1};
  EXPECT_EQ(tuned->strategies.batching.max_seqs, seats) << b.dump();
}

TEST_F(TuneCli, ErrorsNameWhatIsWrong) {
  auto r = rinfer("tune '" + dir_ + "/nowhere'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;
  // A folder without an optimized recipe.
  std::filesystem::create_directories(dir_ + "/empty");
  r = rinfer("tune '" + dir_ + "/empty'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("optimized.yaml"), std::string::npos) << r.err;
  // A broken cache file is named, not overwritten.
  test::write_file(dir_ + "/bad.json", "{not json");
  r = rinfer("tune '" + folder_ + "' --cache '" + dir_ + "/bad.json'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bad.json"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(dir_ + "/bad.json"), "{not json");
}

}  // namespace
}  // namespace rinfer
