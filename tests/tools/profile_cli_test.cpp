// rinfer profile end to end on a tiny random llama: prefill, decode and batched decode are
// profiled, every layer and every op kind gets time, the ops cover the passes' wall time without
// exceeding it, the trace follows the trace event format and the JSON carries the tables; the
// errors name what is wrong. On a machine with a GPU the same runs go through CUDA events.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "../models/tiny_hf_model.h"
#include "cli_util.h"
#include "core/cuda_info.h"
#include "test_util.h"
#include "tiny_model.h"
#include "trace_format.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) { return test::rinfer_cli(args); }
using test::slurp;

nlohmann::json read_json(const std::string& p) {
  return nlohmann::json::parse(slurp(p), nullptr, false);
}

class ProfileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.n_layer = 5;
    spec_.n_embd = 128;  // head_dim 64, which the CUDA attention takes
    spec_.n_head = 2;
    spec_.n_head_kv = 1;
    spec_.n_ff = 192;
    spec_.n_vocab = 96;  // the test tokenizer's (tiny_model.h)
    spec_.seed = 11;
    dir_ = test::fresh_dir("profile_io");
    model_ = test::with_tiny_tokenizer(
        test::write_gguf_model("profile_model", spec_, test::make_tiny_weights(spec_, true)),
        dir_ + "/model.gguf");
  }

  std::string recipe(const std::string& device) const {
    const std::string path = dir_ + "/" + (device == "cpu" ? "cpu" : "cuda") + ".yaml";
    test::write_file(path, "model: " + model_ + "\ndevice: " + device +
                               "\nscenario: llm-chat\ncontext_length: 96\nstrategies:\n  threads: "
                               "{count: 1}\n");
    return path;
  }

  // Profiles `recipe` with `batch` sequences and checks what every profile must hold.
  nlohmann::json profile(const std::string& recipe, int batch, const std::set<std::string>& ops) {
    const std::string json = dir_ + "/out/profile.json", trace = dir_ + "/out/trace.json";
    auto r = rinfer("profile '" + recipe + "' -p 'hello there, profiler' -n 6 --batch " +
                    std::to_string(batch) + " --trace '" + trace + "' --json '" + json + "'");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("ops add up to"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ms per layer"), std::string::npos) << r.out;
    const nlohmann::json t = read_json(trace);
    EXPECT_FALSE(t.is_discarded());
    if (!t.is_discarded()) test::expect_valid_trace(t);
    const nlohmann::json j = read_json(json);
    EXPECT_TRUE(j.is_object());
    if (!j.is_object()) return {};
    EXPECT_GT(j["ceilings"]["bandwidth_gbs"].get<double>(), 0.0);
    EXPECT_GT(j["ceilings"]["peak_tflops"].get<double>(), 0.0);
    EXPECT_GT(j["unprofiled"]["prefill_ms"].get<double>(), 0.0);
    for (const auto& p : j["phases"]) {
      const std::string what = p["phase"];
      // The ops are timed inside the pass: they cover most of it and never more than all of it.
      EXPECT_LE(p["coverage"].get<double>(), 1.0 + 1e-6) << what;
      EXPECT_GT(p["coverage"].get<double>(), 0.3) << what;
      EXPECT_LE(p["ops_ms"].get<double>(), p["pass_ms"].get<double>() * 1.05 + 1e-3) << what;
      EXPECT_EQ(p["layer_ms"].size(), static_cast<size_t>(spec_.n_layer)) << what;
      for (const auto& l : p["layer_ms"]) EXPECT_GT(l.get<double>(), 0.0) << what;
      std::set<std::string> seen;
      for (const auto& o : p["by_op"]) {
        seen.insert(o["op"].get<std::string>());
        EXPECT_GT(o["bytes"].get<double>(), 0.0) << what << o.dump();
        EXPECT_GE(o["ms"].get<double>(), 0.0) << what << o.dump();
        const std::string b = o["bound"];
        EXPECT_TRUE(b == "memory" || b == "compute" || b == "cache") << o.dump();
      }
      for (const std::string& op : ops) EXPECT_TRUE(seen.count(op)) << what << ": no " << op;
      // The matrix products run in every layer.
      for (const auto& o : p["by_op"]) {
        if (o["op"] == "qkv" || o["op"] == "down") {
          EXPECT_EQ(o["count"].get<int64_t>() % spec_.n_layer, 0) << o.dump();
        }
      }
    }
    return j;
  }

  static std::set<std::string> phases_of(const nlohmann::json& j) {
    std::set<std::string> s;
    for (const auto& p : j["phases"]) s.insert(p["phase"].get<std::string>());
    return s;
  }

  test::TinySpec spec_;
  std::string model_, dir_;
};

const std::set<std::string> kCommonOps = {"embed",   "norm", "qkv",  "attention", "wo",
                                          "gate_up", "act",  "down", "logits"};

TEST_F(ProfileCli, ProfilesPrefillDecodeAndBatchesOnTheCpu) {
  const auto one = profile(recipe("cpu"), 1, kCommonOps);
  EXPECT_EQ(phases_of(one), (std::set<std::string>{"prefill", "decode"}));
  for (const auto& p : one["phases"]) {
    if (p["phase"] == "decode") EXPECT_EQ(p["passes"], 5);  // 6 tokens: 1 from the prefill
    if (p["phase"] == "prefill") EXPECT_GT(p["rows"].get<int64_t>(), 10);
  }
  const auto three = profile(recipe("cpu"), 3, kCommonOps);
  EXPECT_TRUE(phases_of(three).count("batch decode")) << three.dump();
  // Token ids instead of text (models without a tokenizer): the prefill has exactly that many.
  const std::string json = dir_ + "/out/ids.json";
  auto r = rinfer("profile '" + recipe("cpu") + "' --prompt-tokens 41 -n 2 --json '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = read_json(json);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["prompt_tokens"], 41);
  EXPECT_EQ(j["phases"][0]["rows"], 41);
}

TEST_F(ProfileCli, ProfilesThroughCudaEvents) {
  if (auto d = cuda_devices(); !d.ok()) GTEST_SKIP() << d.status().message();
  std::set<std::string> ops = kCommonOps;
  ops.insert("sample");
  const auto one = profile(recipe("cuda:0"), 1, ops);
  EXPECT_EQ(phases_of(one), (std::set<std::string>{"prefill", "decode"}));
  const auto four = profile(recipe("cuda:0"), 4, ops);
  EXPECT_TRUE(phases_of(four).count("batch decode")) << four.dump();
}

TEST_F(ProfileCli, ErrorsNameWhatIsWrong) {
  auto r = rinfer("profile '" + dir_ + "/missing.yaml'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("missing.yaml"), std::string::npos) << r.err;
  r = rinfer("profile '" + recipe("cpu") + "' -n 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tokens"), std::string::npos) << r.err;
  r = rinfer("profile '" + recipe("cpu") + "' -p ''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
  r = rinfer("profile '" + recipe("cpu") + "' -p abc --prompt-tokens 5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;
  r = rinfer("profile '" + recipe("cpu") + "' --prompt-tokens 500");  // past the context
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
  // A trace that cannot be written.
  r = rinfer("profile '" + recipe("cpu") + "' -p abc -n 2 --trace /proc/no/such/trace.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("trace.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rinfer
