// `rinfer bench-serve` on the tiny synthetic llama: the JSON report (both variants, every
// request's tokens), the table, Poisson arrivals, and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tiny_model.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

std::string dir_for(const std::string& name) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / name).string();
  fs::create_directories(dir);
  return dir;
}

std::string write_recipe(const std::string& dir, const std::string& strategies) {
  const std::string model = test::tiny_model_with_tokenizer(dir);
  const std::string path = dir + "/serve.yaml";
  std::ofstream(path) << "model: " << model
                      << "\ndevice: cpu\nscenario: llm-chat\nstrategies:\n  threads: {count: 1}\n"
                      << strategies;
  return path;
}

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(BenchServeCli, FixedConcurrencyAgainstTheBaseline) {
  const std::string dir = dir_for("serve_fixed");
  const std::string recipe =
      write_recipe(dir, "  batching: {max_seqs: 4, max_batched_tokens: 32}\n");
  const std::string json = dir + "/out.json";
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench-serve '" + recipe +
                             "' --requests 10 --input-len 9 --output-len 5 --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| output tok/s |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("baseline (static, contiguous)"), std::string::npos);
  EXPECT_NE(r.out.find("recipe (continuous, paged)"), std::string::npos);
  const nlohmann::json j = read_json(json);
  for (const char* k : {"git_sha", "date", "machine", "device", "settings", "variants"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["settings"]["concurrency"], 4);  // the recipe's seats
  ASSERT_EQ(j["variants"].size(), 2u);
  EXPECT_EQ(j["variants"][0]["policy"], "static");
  EXPECT_EQ(j["variants"][0]["layout"], "contiguous");
  EXPECT_EQ(j["variants"][1]["policy"], "continuous");
  EXPECT_EQ(j["variants"][1]["layout"], "paged");
  for (const auto& v : j["variants"]) {
    EXPECT_GT(v["output_tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(v["total_tokens_per_s"].get<double>(), v["output_tokens_per_s"].get<double>());
    EXPECT_LE(v["ttft_ms_p50"].get<double>(), v["ttft_ms_p99"].get<double>());
    EXPECT_GT(v["kv_used_peak"].get<double>(), 0.0);
    EXPECT_EQ(v["failed"], 0);
    ASSERT_EQ(v["requests"].size(), 10u);
    for (const auto& q : v["requests"]) {
      EXPECT_EQ(q["input"], 9);
      EXPECT_EQ(q["output"], 5);  // end of text ignored: every request runs to its length
      EXPECT_LE(q["submit_s"].get<double>(), q["first_token_s"].get<double>());
      EXPECT_LE(q["first_token_s"].get<double>(), q["finish_s"].get<double>());
    }
  }
}

TEST(BenchServeCli, PoissonArrivalsAndALongTailedMix) {
  const std::string dir = dir_for("serve_rate");
  const std::string recipe = write_recipe(dir, "");
  const std::string json = dir + "/out.json";
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench-serve '" + recipe +
                             "' --requests 8 --input-len 6 --output-len 4 --mix long-tail "
                             "--rate 500 --no-baseline --json '" +
                             json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = read_json(json);
  ASSERT_EQ(j["variants"].size(), 1u);
  EXPECT_EQ(j["settings"]["rate"], 500.0);
  int64_t distinct = 0, last = -1;
  for (const auto& q : j["variants"][0]["requests"]) {
    EXPECT_GE(q["output"].get<int64_t>(), 1);
    if (q["input"].get<int64_t>() != last) ++distinct;
    last = q["input"].get<int64_t>();
  }
  EXPECT_GT(distinct, 1);  // the lengths vary
}

// A system prompt every request shares: the recipe's prefix cache serves its full blocks, the
// baseline recomputes them; the table lands in a README between this machine's markers.
TEST(BenchServeCli, SharedPrefixHitsAndTheReadmeTable) {
  const std::string dir = dir_for("serve_prefix");
  const std::string recipe = write_recipe(dir, "  batching: {max_seqs: 4, max_batched_tokens: 64}\n");
  const std::string json = dir + "/out.json";
  const std::string readme = dir + "/README.md";
  std::ofstream(readme) << "# serve\n";
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench-serve '" + recipe +
                             "' --requests 8 --input-len 40 --output-len 3 --shared-prefix 32 "
                             "--json '" + json + "' --readme '" + readme + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["settings"]["shared_prefix"], 32);
  EXPECT_EQ(j["variants"][0]["prefix_hit_rate"], 0.0);  // contiguous: no sharing
  EXPECT_GT(j["variants"][1]["prefix_hit_rate"].get<double>(), 0.0);
  int64_t cached = 0;
  for (const auto& q : j["variants"][1]["requests"]) cached += q["cached"].get<int64_t>();
  // Each request admitted after the first prompt's blocks are computed reuses the 2 shared
  // blocks (those admitted in the same step as the first compute them too).
  EXPECT_GE(cached, 5 * 32);
  std::ifstream f(readme);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("<!-- bench:begin cpu-"), std::string::npos) << ss.str();
  EXPECT_NE(ss.str().find("| prefix hit rate |"), std::string::npos);
}

TEST(BenchServeCli, BadArgumentsAreClearErrors) {
  const std::string dir = dir_for("serve_bad");
  const std::string recipe = write_recipe(dir, "");
  const std::string bin = std::string(RINFER_BINARY) + " bench-serve '" + recipe + "' ";
  auto both = test::run_command(bin + "--rate 5 --concurrency 2");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("--rate and --concurrency exclude each other"), std::string::npos);
  auto mix = test::run_command(bin + "--mix bimodal");
  EXPECT_EQ(mix.exit_code, 1);
  EXPECT_NE(mix.err.find("--mix bimodal: expected fixed or long-tail"), std::string::npos);
  const std::string off = dir + "/off.yaml";
  std::ofstream(off) << "base: serve.yaml\nstrategies: {kv_cache: {enabled: false}}\n";
  auto no_cache = test::run_command(std::string(RINFER_BINARY) + " bench-serve '" + off + "'");
  EXPECT_EQ(no_cache.exit_code, 1);
  EXPECT_NE(no_cache.err.find("needs the KV cache on"), std::string::npos) << no_cache.err;
  auto json_dir = test::run_command(bin + "--requests 2 --json '" + dir + "'");
  EXPECT_EQ(json_dir.exit_code, 1);  // a directory as the output: refused before the run
}

}  // namespace
}  // namespace rinfer
