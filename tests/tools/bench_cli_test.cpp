// `rinfer bench` on the tiny synthetic llama given a small SentencePiece vocabulary (so the
// engine can tokenize): the JSON fields, the table's shape, the README block, the SVG, the
// baseline choice and the errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "ops/cpu/matmul_bf16.h"
#include "test_util.h"
#include "tiny_model.h"
#include "tools/bench_report.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string recipe(const std::string& model, const std::string& strategies) {
  return "model: " + model +
         "\ndevice: cpu\nscenario: llm-chat\ncontext_length: 128\nstrategies:\n" + strategies;
}

TEST(BenchCli, TinyModelJsonTableReadme) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench").string();
  fs::create_directories(dir);
  const std::string model = test::tiny_model_with_tokenizer(dir);
  std::ofstream(dir + "/baseline.yaml")
      << recipe(model, "  kv_cache: {enabled: false}\n  threads: {count: 1}\n");
  std::ofstream(dir + "/kv.yaml") << recipe(model,
                                            "  kv_cache: {enabled: true}\n  threads: {count: 1}\n");
  // One table per machine: the markers carry the machine name bench uses on a CPU.
  const std::string machine = bench::machine_short_name(false, "");
  const std::string readme_in =
      "# tiny\n\n<!-- bench:begin " + machine + " -->\nold\n<!-- bench:end " + machine +
      " -->\nafter\n<!-- bench:begin h200 -->\nother\n<!-- " + "bench:end h200 -->\n";
  std::ofstream(dir + "/README.md") << readme_in;
  const std::string json = dir + "/out/tiny.json";
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir +
                             "' --repeat 2 --warmup 1 --prompt-tokens 12 --gen-tokens 6 "
                             "--precision-tokens 24 --readme --json '" +
                             json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);  // no progress line off a terminal

  const auto j = nlohmann::ordered_json::parse(read(json));
  for (const char* k : {"git_sha", "date", "machine", "device", "settings", "variants", "best"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["device"]["kind"], "cpu");
  EXPECT_EQ(j["settings"]["repeat"], 2);
  EXPECT_EQ(j["settings"]["gen_tokens"], 6);
  EXPECT_EQ(j["baseline"], "baseline");
  ASSERT_EQ(j["variants"].size(), 2u);
  const auto& b = j["variants"][0];
  const auto& v = j["variants"][1];
  EXPECT_EQ(b["name"], "baseline");
  EXPECT_TRUE(b["baseline"].get<bool>());
  EXPECT_EQ(v["name"], "kv");
  EXPECT_EQ(v["change"], "kv_cache on");
  for (const auto* x : {&b, &v}) {
    ASSERT_EQ((*x)["samples"]["decode_tps"].size(), 2u);
    EXPECT_GT((*x)["median"]["decode_tps"].get<double>(), 0.0);
    EXPECT_GT((*x)["median"]["prefill_tps"].get<double>(), 0.0);
    EXPECT_GT((*x)["median"]["ttft_ms"].get<double>(), 0.0);
    EXPECT_LE((*x)["min"]["token_ms"].get<double>(), (*x)["max"]["token_ms"].get<double>());
    EXPECT_GT((*x)["host_peak_bytes"].get<uint64_t>(), 0u);
  }
  // The same weights and kernels with and without the cache: the same logits.
  EXPECT_DOUBLE_EQ(v["precision"]["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(v["precision"]["mean_kl"].get<double>(), 1e-9);
  EXPECT_TRUE(v["gate_passed"].get<bool>());
  EXPECT_EQ(j["best"], "kv");
  EXPECT_TRUE(v["relative"].contains("throughput_gain"));

  // The table: header, separator, one row per variant, baseline first, best marked.
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    if (line.rfind("|", 0) == 0) rows.push_back(line);
  }
  ASSERT_EQ(rows.size(), 4u) << r.out;
  EXPECT_NE(rows[0].find("| variant | strategy change | TTFT ms | decode tok/s"),
            std::string::npos);
  EXPECT_NE(rows[2].find("`baseline`"), std::string::npos);
  EXPECT_NE(rows[3].find("**`kv`** (best)"), std::string::npos);
  EXPECT_NE(rows[3].find("1.000 / "), std::string::npos);
  EXPECT_NE(rows[3].find("pass, **best**"), std::string::npos);
  for (const auto& row : rows) EXPECT_EQ(std::count(row.begin(), row.end(), '|'), 11) << row;

  // The README block is the table made from the JSON, and nothing else changed.
  const std::string readme = read(dir + "/README.md");
  EXPECT_EQ(j["machine"]["name"], machine);
  EXPECT_EQ(readme, bench::replace_between_markers(readme_in, bench::markdown_table(j), machine));
  EXPECT_EQ(readme.find("old"), std::string::npos);
  EXPECT_NE(readme.find("after\n"), std::string::npos);
  EXPECT_NE(readme.find("other\n"), std::string::npos);  // another machine's table stays
  const std::string svg = read(dir + "/out/tiny.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find(">kv<"), std::string::npos);
}

TEST(BenchCli, GateFailureIsNeverBest) {
  nlohmann::ordered_json j = {
      {"baseline", "base"},
      {"best", nullptr},
      {"settings", {{"repeat", 1}}},
      {"machine", {{"name", "m"}}},
      {"device", {{"name", "d"}}},
      {"variants",
       {{{"name", "base"},
         {"baseline", true},
         {"strategies", "s"},
         {"median", {{"decode_tps", 10.0}}},
         {"min", {{"decode_tps", 10.0}}},
         {"max", {{"decode_tps", 10.0}}}},
        {{"name", "fast"},
         {"change", "weights q4_0"},
         {"median", {{"decode_tps", 30.0}}},
         {"min", {{"decode_tps", 30.0}}},
         {"max", {{"decode_tps", 30.0}}},
         {"relative", {{"throughput_gain", 3.0}}},
         {"precision", {{"top1_agreement", 0.5}, {"mean_kl", 0.2}, {"ppl_change", 0.3}}},
         {"gate_passed", false},
         {"gate_failures", "top-1 0.5000 < 0.95"}}}}};
  const std::string t = bench::markdown_table(j);
  EXPECT_NE(t.find("**fail** (top-1 0.5000 < 0.95): rolled back"), std::string::npos) << t;
  EXPECT_EQ(t.find("best"), std::string::npos) << t;
  EXPECT_NE(t.find("| 3.00x |"), std::string::npos) << t;
  EXPECT_EQ(bench::machine_short_name(true, "NVIDIA H200"), "h200");
  EXPECT_EQ(bench::machine_short_name(true, "NVIDIA GeForce RTX 4090"), "rtx-4090");
}

// Two CPUs of one core count get different results folders: the label names the model and
// its widest SIMD feature.
TEST(BenchCli, CpuLabelsNameTheModelAndItsFeature) {
  EXPECT_EQ(bench::cpu_short_name("AMD EPYC", "avx512", 2), "cpu-amd-epyc-avx512-2core");
  EXPECT_EQ(bench::cpu_short_name("Intel(R) Xeon(R) Processor", "amx", 2),
            "cpu-intel-xeon-amx-2core");
  EXPECT_EQ(bench::cpu_short_name("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "amx", 8),
            "cpu-intel-xeon-platinum-8481c-amx-8core");
  EXPECT_EQ(bench::cpu_short_name("unknown", "", 4), "cpu-4core");
  const std::string here = bench::machine_short_name(false, "");
  EXPECT_EQ(here.rfind("cpu-", 0), 0u) << here;
  EXPECT_NE(here.find(bench::cpu_feature()), std::string::npos) << here;
  if (bench::cpu_model() != "unknown") {
    EXPECT_NE(here, "cpu-" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + "core") << here;
  }
}

// A variant slower than the baseline is never the best, even when it passes its gate; the
// footer states each variant's gate as applied (a recipe's bound replaces that bound alone).
TEST(BenchCli, SlowerVariantIsNotBestAndTheFooterStatesEachGate) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_slower").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = test::tiny_model_with_tokenizer(dir);
  std::ofstream(dir + "/baseline.yaml")
      << recipe(model, "  kv_cache: {enabled: true}\n  threads: {count: 1}\n");
  // Recomputing every step on the scalar kernels: slower than the baseline by a margin that a
  // busy machine's noise does not close (without the kernels it once measured 1.11x faster).
  std::ofstream(dir + "/no-kv.yaml")
      << "base: baseline.yaml\nstrategies:\n  kv_cache: {enabled: false}\n"
         "  kernels: {impl: reference}\nprecision: {min_top1: 0.5}\n";
  std::ofstream(dir + "/same.yaml") << "base: baseline.yaml\n";
  const std::string json = dir + "/slower.json";
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir +
                             "' --repeat 1 --warmup 0 --prompt-tokens 12 --gen-tokens 48 "
                             "--precision-tokens 24 --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::ordered_json::parse(read(json));
  ASSERT_EQ(j["variants"].size(), 3u);
  const auto& no_kv = j["variants"][1];
  ASSERT_EQ(no_kv["name"], "no-kv");
  EXPECT_TRUE(no_kv["gate_passed"].get<bool>());
  EXPECT_DOUBLE_EQ(no_kv["gate"]["min_top1"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(no_kv["gate"]["max_mean_kl"].get<double>(), 0.05);  // the default stays
  ASSERT_LT(no_kv["relative"]["throughput_gain"].get<double>(), 1.0);
  if (j["best"].is_string()) EXPECT_NE(j["best"], "no-kv");
  EXPECT_NE(r.out.find("gates: `no-kv` top-1 >= 0.5, mean KL <= 0.05, ppl change <= +2%; "
                       "`same` top-1 >= 0.95, mean KL <= 0.05, ppl change <= +2%."),
            std::string::npos)
      << r.out;

  auto quiet = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir +
                                 "/baseline.yaml' '" + dir + "/same.yaml' --repeat 1 --warmup 0 "
                                 "--prompt-tokens 12 --gen-tokens 4 --no-precision --json '" +
                                 json + "'");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_NE(quiet.out.find("Precision: not measured (--no-precision)."), std::string::npos)
      << quiet.out;
  EXPECT_EQ(quiet.out.find("gate top-1"), std::string::npos) << quiet.out;
}

// A variant whose load answers kUnsupported (here bf16 activations, which the decoder sample does
// not implement on any CPU) is skipped with a note under the table and in the JSON, as a
// variant for another device is; the rest of the folder runs. The baseline itself must run.
TEST(BenchCli, AVariantThisMachineCannotRunIsSkippedWithANote) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_skip").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = test::tiny_model_with_tokenizer(dir);
  std::ofstream(dir + "/baseline.yaml") << recipe(model, "  threads: {count: 1}\n");
  std::ofstream(dir + "/amx.yaml")
      << recipe(model, "  threads: {count: 1}\n  quantization: {activations: bf16}\n");
  const std::string json = dir + "/out/skip.json";
  const std::string cmd = std::string(RINFER_BINARY) + " bench '" + dir +
                          "' --repeat 1 --warmup 0 --prompt-tokens 8 --gen-tokens 4 "
                          "--precision-tokens 16 --json '" + json + "'";
  auto r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("bench: skipping amx (this machine cannot run it: "), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("Not run on this machine: amx (strategies.quantization.activations: bf16"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("A single run after 0 warm-up"), std::string::npos) << r.out;  // not "1 runs"
  const auto j = nlohmann::json::parse(read(json));
  ASSERT_EQ(j["variants"].size(), 1u);
  EXPECT_EQ(j["variants"][0]["name"], "baseline");
  ASSERT_EQ(j["skipped"].size(), 1u);
  EXPECT_EQ(j["skipped"][0]["name"], "amx");
  EXPECT_EQ(j["skipped"][0]["recipe"], dir + "/amx.yaml");

  // As the baseline it fails the run, naming the recipe.
  r = test::run_command(cmd + " --vs amx");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(dir + "/amx.yaml: strategies.quantization.activations: bf16"),
            std::string::npos)
      << r.err;
}

// The embedding bench of a folder with a bf16 (AMX) variant runs to the end on any CPU: without
// AMX-BF16 tiles that variant is skipped with the loader's reason, with them it is measured.
TEST(BenchCli, EmbeddingFolderRunsToTheEndWithOrWithoutAmx) {
  const char* kModel = "all-minilm-l6-v2";
  if (!test::reference_model(kModel)) GTEST_SKIP() << test::missing_model_message(kModel);
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_embed_amx").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/texts.txt") << "A man is eating food.\nThe sky is blue today.\n";
  std::ofstream(dir + "/baseline.yaml")
      << "model: all-minilm-l6-v2\ndevice: cpu\nscenario: embedding\nstrategies:\n"
         "  threads: {count: 1}\nbench: {prompts: " + dir + "/texts.txt}\n";
  std::ofstream(dir + "/bf16.yaml")
      << "base: baseline.yaml\nstrategies:\n  quantization: {activations: bf16}\n";
  const std::string json = dir + "/new/embed.json";  // a missing folder is made, as for LLMs
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir +
                             "' --repeat 1 --warmup 0 --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read(json));
  if (cpu::amx_bf16_available()) {
    ASSERT_EQ(j["variants"].size(), 2u);
    EXPECT_EQ(j["variants"][1]["name"], "bf16");
    EXPECT_FALSE(j.contains("skipped"));
  } else {
    ASSERT_EQ(j["variants"].size(), 1u);
    ASSERT_EQ(j["skipped"].size(), 1u);
    EXPECT_EQ(j["skipped"][0]["name"], "bf16");
    EXPECT_NE(r.out.find("Not run on this machine: bf16 (strategies.quantization.activations: "
                         "bf16 needs a CPU with AMX-BF16 tiles"),
              std::string::npos)
        << r.out;
  }
}

// Memory is each variant's own: two identical variants report the same peak, whichever ran
// before them (the caching host allocator's free blocks from the last variant used to count
// for the one before and not for the next: +213.6 MiB then +101.8 MiB for one recipe).
TEST(BenchCli, IdenticalVariantsReportTheSameMemory) {
  if (RINFER_TEST_SLOW_BUILD) GTEST_SKIP() << "resident memory under ASan is its quarantine's";
  const char* kModel = "smollm2-135m-instruct-q4_1";
  if (!test::reference_model(kModel)) GTEST_SKIP() << test::missing_model_message(kModel);
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_memory").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/baseline.yaml")
      << recipe(kModel, "  kv_cache: {enabled: true}\n  threads: {count: 1}\n");
  for (const char* name : {"q8-a", "q8-b"}) {
    std::ofstream(dir + "/" + name + ".yaml")
        << "base: baseline.yaml\nstrategies:\n  quantization: {weights: q8_0, keep_layers: []}\n";
  }
  const std::string json = dir + "/memory.json";
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir +
                             "' --repeat 1 --warmup 0 --prompt-tokens 8 --gen-tokens 4 "
                             "--no-precision --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read(json));
  ASSERT_EQ(j["variants"].size(), 3u);
  const double a = j["variants"][1]["host_peak_bytes"].get<double>();
  const double b = j["variants"][2]["host_peak_bytes"].get<double>();
  ASSERT_GT(a, 50e6);  // the Q8_0 weights at least
  EXPECT_LT(std::abs(a - b) / a, 0.02) << a << " vs " << b;
}

TEST(BenchCli, Errors) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_err").string();
  fs::create_directories(dir);
  std::ofstream(dir + "/a.yaml") << recipe("nowhere.gguf", "  threads: {count: 1}\n");
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no baseline variant 'baseline' among the recipes (a)"), std::string::npos)
      << r.err;
  r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir + "/missing'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no such recipe file or folder"), std::string::npos) << r.err;
}

// Guards "a missing benchmark text silently becomes a built-in sentence": --text or
// bench.prompts naming a file that is missing, empty or not UTF-8 is an error before any model
// loads (the recipe's model does not exist, so a run would fail on it instead).
TEST(BenchCli, ANamedTextThatCannotBeReadIsAnError) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_text").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/baseline.yaml") << recipe("nowhere.gguf", "  threads: {count: 1}\n");
  std::ofstream(dir + "/empty.txt").flush();
  std::ofstream(dir + "/bad.txt") << "ok \xff";
  const std::string base = std::string(RINFER_BINARY) + " bench '" + dir + "' --json '" + dir +
                           "/r.json' --text '" + dir;
  const std::pair<std::string, std::string> cases[] = {
      {"/missing.txt'", "--text: " + dir + "/missing.txt"},
      {"/empty.txt'", "--text " + dir + "/empty.txt: the file is empty"},
      {"/bad.txt'", "is not valid UTF-8 (byte 3)"},
  };
  for (const auto& [arg, message] : cases) {
    auto r = test::run_command(base + arg);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("nowhere.gguf"), std::string::npos) << "the benchmark ran: " << r.err;
  }
  // bench.prompts in the baseline recipe, named as such.
  std::ofstream(dir + "/baseline.yaml")
      << recipe("nowhere.gguf", "  threads: {count: 1}\nbench: {prompts: gone.txt}\n");
  auto r = test::run_command(std::string(RINFER_BINARY) + " bench '" + dir + "' --json '" + dir +
                             "/r.json'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("baseline.yaml: bench.prompts: " + dir + "/gone.txt"), std::string::npos)
      << r.err;
}

// Guards "an output replaces whatever the path was" for --json, --svg and --readme: each bad
// output (the JSON's folder alone is made, as before) is refused before the benchmark runs (the
// recipes' model does not even exist, so any run would fail on it instead), under `timeout 20`, and
// left as it was.
TEST(BenchCli, OutputsCheckedBeforeTheRun) {
  const std::string dir =
      (fs::path(test::write_temp_file("tmp", "")).parent_path() / "bench_outputs").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/baseline.yaml") << recipe("nowhere.gguf", "  threads: {count: 1}\n");
  const std::string fifo = dir + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string base =
      "timeout 20 " + std::string(RINFER_BINARY) + " bench '" + dir + "' --json '" + dir;
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {base + "/fifo.json'", fifo + ": not a regular file (a FIFO)"},
      {base + "/r.json' --svg '" + dir + "/no/such/r.svg'",
       "the directory '" + dir + "/no/such' does not exist"},
      {base + "/r.json' --svg /dev/null", "/dev/null: not a regular file (a character device)"},
      {base + "/r.json' --svg '" + dir + "'", dir + ": is a directory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    auto r = test::run_command(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("nowhere.gguf"), std::string::npos) << "the benchmark ran: " << r.err;
  }
  // --readme: the folder's README.md is a directory.
  fs::create_directories(dir + "/README.md");
  auto r = test::run_command(base + "/r.json' --readme");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(dir + "/README.md: is a directory"), std::string::npos) << r.err;
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_FALSE(fs::exists(dir + "/r.json"));
}

}  // namespace
}  // namespace rinfer
