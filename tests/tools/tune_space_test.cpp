// rinfer tune's search space (tools/tune_space.h): the domains read from the registry's key
// types, the knobs each device gets, the trial recipes they make, and the fingerprint that
// tells two trials apart.
#include "tools/tune_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace rinfer {
namespace {

using Values = std::vector<std::string>;

const TuneKnob* knob(const std::vector<TuneKnob>& ks, const std::string& path) {
  for (const TuneKnob& k : ks) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

TEST(TuneSpace, DomainsFollowTheDeclaredTypes) {
  EXPECT_EQ(domain_values("bool"), (Values{"true", "false"}));
  EXPECT_EQ(domain_values("reference|fast"), (Values{"reference", "fast"}));
  EXPECT_EQ(domain_values("auto | bf16 | f32"), (Values{"auto", "bf16", "f32"}));
  EXPECT_EQ(domain_values("int in [0, 8]"), (Values{"0", "1", "2", "4", "8"}));
  EXPECT_EQ(domain_values("int in [16, 220]"), (Values{"16", "32", "64", "128", "220"}));
  EXPECT_EQ(domain_values("int in [0, 1024]", 3), (Values{"0", "1", "2", "3"}));
  // At most max_int_points, the ends kept.
  const Values wide = domain_values("int in [1, 65536]", 0, 4);
  ASSERT_EQ(wide.size(), 4u);
  EXPECT_EQ(wide.front(), "1");
  EXPECT_EQ(wide.back(), "65536");
  EXPECT_TRUE(domain_values("list of int in [-65535, 65535]").empty());
  EXPECT_TRUE(domain_values("number in [0, 0.5]").empty());
}

TEST(TuneSpace, EachDeviceGetsItsKnobs) {
  const auto cpu = tune_space(Device::cpu(), "llm-chat", 4);
  EXPECT_NE(knob(cpu, "kv_cache.enabled"), nullptr);
  EXPECT_NE(knob(cpu, "fusion.qkv"), nullptr);
  EXPECT_NE(knob(cpu, "quantization.activations"), nullptr);
  ASSERT_NE(knob(cpu, "threads.count"), nullptr);
  for (const std::string& v : knob(cpu, "threads.count")->values) EXPECT_LE(std::stoi(v), 4);
  for (const TuneKnob& k : cpu) {
    EXPECT_EQ(k.path.find("cuda"), std::string::npos) << k.path;  // no CUDA switch on the CPU
    EXPECT_NE(k.path.rfind("batching.", 0), 0u) << k.path;        // no serving knob
    EXPECT_NE(k.path, "fusion.batchnorm");                        // image classifiers only
    EXPECT_NE(k.path, "fusion.attention");                        // CUDA only
    EXPECT_GE(k.values.size(), 2u) << k.path;
  }
  const auto gpu = tune_space(Device::cuda(0), "llm-chat", 4);
  for (const char* p : {"kv_cache.enabled", "kernels.cuda.pdl", "kernels.cuda.matvec_split",
                        "fusion.attention", "fusion.residual_norm", "quantization.weights",
                        "cuda_graphs.enabled", "device_sampling.enabled", "allocator.kind"}) {
    EXPECT_NE(knob(gpu, p), nullptr) << p;
  }
  EXPECT_EQ(knob(gpu, "threads.count"), nullptr);

  // A serving recipe adds the batching limits: seats up to the cap, a bounded token budget; not
  // the queue's order or the swap space.
  const auto serve = tune_space(Device::cpu(), "llm-serve", 4, 32);
  for (const char* p : {"batching.policy", "batching.max_seqs", "batching.max_batched_tokens",
                        "batching.chunked_prefill", "batching.preemption", "kv_cache.block_size"}) {
    EXPECT_NE(knob(serve, p), nullptr) << p;
  }
  for (const std::string& v : knob(serve, "batching.max_seqs")->values) EXPECT_LE(std::stoi(v), 32);
  for (const std::string& v : knob(serve, "batching.max_batched_tokens")->values) {
    EXPECT_LE(std::stoi(v), 16384);
  }
  EXPECT_EQ(knob(serve, "batching.priority"), nullptr);
  EXPECT_EQ(knob(serve, "batching.swap_blocks"), nullptr);
  EXPECT_EQ(knob(serve, "dynamic_batching.policy"), nullptr);
}

TEST(TuneSpace, TrialRecipesNestTheirKnobsOverTheBase) {
  const TuneSettings s = {{"fusion.qkv", "false"},
                          {"kernels.cuda.pdl", "false"},
                          {"kernels.cuda.matvec_split", "2"},
                          {"kv_cache.block_size", "32"}};
  const std::string y = tune_recipe_yaml("optimized.yaml", s, {"made by a test", ""});
  EXPECT_EQ(y,
            "# made by a test\n#\nbase: optimized.yaml\nstrategies:\n  fusion:\n    qkv: false\n"
            "  kernels:\n    cuda:\n      matvec_split: 2\n      pdl: false\n  kv_cache:\n"
            "    block_size: 32\n");
  EXPECT_EQ(describe_settings(s),
            "fusion.qkv=false, kernels.cuda.matvec_split=2, kernels.cuda.pdl=false, "
            "kv_cache.block_size=32");
  EXPECT_EQ(tune_recipe_yaml("a.yaml", {}), "base: a.yaml\n");
}

TEST(TuneSpace, TheFingerprintSeesWhatRunsDifferently) {
  const std::string base = "model: m.gguf\ndevice: cpu\nscenario: llm-chat\nstrategies:\n";
  const std::string kv = "  kv_cache: {enabled: true}\n";
  auto a = parse_recipe(base + kv, "/tmp/a.yaml");
  auto b = parse_recipe(base + kv + "  fusion: {attention: false}\n", "/tmp/b.yaml");  // CUDA only
  auto c = parse_recipe(base + kv + "  fusion: {qkv: false}\n", "/tmp/c.yaml");
  auto d = parse_recipe(base + "  kv_cache: {enabled: true, dtype: f32}\n", "/tmp/d.yaml");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok()) << a.status().to_string();
  EXPECT_EQ(recipe_fingerprint(*a), recipe_fingerprint(*b));
  EXPECT_NE(recipe_fingerprint(*a), recipe_fingerprint(*c));
  EXPECT_EQ(recipe_fingerprint(*a), recipe_fingerprint(*d));  // auto is f32 on the CPU
  EXPECT_EQ(fnv1a_hex(""), "cbf29ce484222325");
  EXPECT_EQ(fnv1a_hex("a"), "af63dc4c8601ec8c");
}

}  // namespace
}  // namespace rinfer
