// Recipe parsing: the committed recipes load; malformed ones fail with a message naming the
// file, the line, the key path and what was expected.
#include "recipe/recipe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

namespace rinfer {
namespace {

const char* kValid = R"(model: smollm2-135m-instruct-q4_1
device: cpu
scenario: llm-chat
context_length: 1024
strategies:
  kv_cache: {enabled: false}
  kernels: {impl: reference}
  threads: {count: 1}
sampling:
  temperature: 0.3
  top_k: 20
  top_p: 0.9
  min_p: 0.05
  repeat_penalty: 1.1
  repeat_last_n: 32
  presence_penalty: 0.5
  frequency_penalty: -0.25
  seed: 1234
  max_tokens: 99
  stop: ["\n\nUser:", "###"]
chat_template: chatml
serve: {name: smol, aliases: [gpt-4o-mini, org/smol:v1]}
)";

TEST(RecipeTest, ParsesEveryKey) {
  auto r = parse_recipe(kValid, "/recipes/x/a.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "smollm2-135m-instruct-q4_1");
  EXPECT_EQ(r->model_ref, "smollm2-135m-instruct-q4_1");
  EXPECT_TRUE(r->device.is_cpu());
  EXPECT_EQ(r->scenario, "llm-chat");
  EXPECT_EQ(r->context_length, 1024);
  EXPECT_FALSE(r->strategies.kv_cache);
  EXPECT_EQ(r->strategies.kernels, cpu::Impl::kReference);
  EXPECT_EQ(r->strategies.threads, 1);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.3f);
  EXPECT_EQ(r->sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r->sampling.repeat_last_n, 32);
  EXPECT_FLOAT_EQ(r->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.frequency_penalty, -0.25f);
  EXPECT_EQ(r->serve.name, "smol");
  EXPECT_EQ(r->serve.aliases, (std::vector<std::string>{"gpt-4o-mini", "org/smol:v1"}));
  EXPECT_EQ(r->sampling.seed, 1234u);
  EXPECT_TRUE(r->seed_set);
  EXPECT_EQ(r->max_tokens, 99);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n\nUser:", "###"}));
  EXPECT_EQ(r->chat_template, "chatml");
  EXPECT_EQ(r->strategies_summary(),
            "kv_cache off, kernels reference, threads 1, fusion swiglu+qkv, activations int8, "
            "context 1024");
}

TEST(RecipeTest, DefaultsAndRelativeModelPaths) {
  auto r = parse_recipe("model: ./weights/m.gguf\nscenario: llm-chat\n", "/a/b/recipe.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model_ref, "/a/b/weights/m.gguf");
  EXPECT_TRUE(r->strategies.kv_cache);
  EXPECT_EQ(r->strategies.kernels, cpu::Impl::kFast);
  EXPECT_EQ(r->strategies.threads, 0);
  EXPECT_FALSE(r->seed_set);
  EXPECT_FALSE(r->chat_template.has_value());
  r = parse_recipe("model: ../m.gguf\nscenario: llm-chat\n", "/a/b/recipe.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->model_ref, "/a/m.gguf");
  r = parse_recipe("model: /abs/m.gguf\nscenario: llm-chat\ndevice: cuda:1\n", "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->model_ref, "/abs/m.gguf");
  EXPECT_EQ(r->device.to_string(), "cuda:1");  // accepted here; checked against the machine at load
}

TEST(RecipeTest, CommittedRecipesLoad) {
  for (const char* name : {"baseline", "optimized"}) {
    SCOPED_TRACE(name);
    const std::string path =
        test::source_dir() + "/recipes/llm-chat/smollm2-135m/" + name + ".yaml";
    auto r = load_recipe(path);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->model, "smollm2-135m-instruct-q4_1");
    const bool baseline = std::string(name) == "baseline";
    EXPECT_EQ(r->strategies.kv_cache, !baseline);
    EXPECT_EQ(r->strategies.kernels, baseline ? cpu::Impl::kReference : cpu::Impl::kFast);
    if (baseline) EXPECT_EQ(r->strategies.threads, 1);
  }
}

struct Bad {
  const char* text;
  const char* expected;  // a substring of the message
};

class MalformedRecipeTest : public ::testing::TestWithParam<Bad> {};

TEST_P(MalformedRecipeTest, FailsWithAClearMessage) {
  auto r = parse_recipe(GetParam().text, "bad.yaml");
  ASSERT_FALSE(r.ok()) << GetParam().text;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(GetParam().expected), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("bad.yaml", 0), 0u) << msg;  // always starts with the file
}

#define BASE "model: m\nscenario: llm-chat\n"

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedRecipeTest,
    ::testing::Values(
        Bad{"", "the recipe is empty"},
        Bad{"- a\n- b\n", "the recipe: expected a mapping of keys, got a list"},
        Bad{"model: [unclosed\n", "bad.yaml:2:1: invalid YAML"},
        Bad{"scenario: llm-chat\n", "model: missing (required)"},
        Bad{"model: m\n", "scenario: missing (required)"},
        Bad{BASE "modle: x\n",
            "bad.yaml:3:1: modle: unknown key (allowed here: base, model, device"},
        Bad{BASE "model: n\n", "bad.yaml:3:1: model: duplicate key (first set on line 1)"},
        Bad{BASE "sampling:\n  top_p: 1.5\n",
            "bad.yaml:4:10: sampling.top_p: expected a number in (0, 1], got 1.5"},
        Bad{BASE "sampling:\n  top_p: \"0.5\"\n",
            "sampling.top_p: expected a number in (0, 1], got the string \"0.5\""},
        Bad{BASE "sampling:\n  temperature: hot\n",
            "sampling.temperature: expected a number in [0, 100], got hot"},
        Bad{BASE "sampling:\n  top_k: 2.5\n",
            "sampling.top_k: expected an integer in [0, 16777216]"},
        Bad{BASE "sampling:\n  seed: -1\n", "sampling.seed: expected an integer in [0, "},
        Bad{BASE "sampling:\n  stop: END\n", "sampling.stop: expected a list of strings, got END"},
        Bad{BASE "sampling:\n  stop: [a, [b]]\n",
            "sampling.stop: item 1: expected a non-empty string"},
        Bad{BASE "sampling:\n  top_n: 3\n",
            "sampling.top_n: unknown key (allowed here: temperature"},
        Bad{BASE "sampling: 0.7\n", "sampling: expected a mapping of keys, got 0.7"},
        Bad{BASE "strategies:\n  kv_cache: {enabled: yes please}\n",
            "strategies.kv_cache.enabled: expected true or false, got yes please"},
        Bad{BASE "strategies:\n  kv_cache: true\n",
            "strategies.kv_cache: expected a mapping of keys, got true"},
        Bad{BASE "strategies:\n  kernels: {impl: turbo}\n",
            "strategies.kernels.impl: expected reference or fast, got turbo"},
        Bad{BASE "strategies:\n  threads: {count: -2}\n",
            "strategies.threads.count: expected an integer in [0, 1024], got -2"},
        Bad{BASE "strategies:\n  paged_attention: {enabled: true}\n",
            "strategies.paged_attention: unknown key (allowed here: kv_cache, kernels, threads, "
            "fusion, quantization, cuda_graphs, device_sampling, allocator, batching, "
            "dynamic_batching)"},
        // The strategies added with the registry, bench and precision.
        Bad{BASE "strategies:\n  fusion: {attention: yes}\n",
            "bad.yaml:4:23: strategies.fusion.attention: expected true or false, got yes"},
        Bad{BASE "strategies:\n  fusion: {swiglu: true, swiglu: false}\n",
            "strategies.fusion.swiglu: duplicate key (first set on line 4)"},
        Bad{BASE "strategies:\n  kv_cache: {enabled: true}\n  kv_cache: {enabled: false}\n",
            "bad.yaml:5:3: strategies.kv_cache: duplicate key (first set on line 4)"},
        Bad{BASE "strategies:\n  fusion: {rope: true}\n",
            "strategies.fusion.rope: unknown key (allowed here: attention, residual_norm, swiglu, "
            "qkv, batchnorm, conv_epilogue, blocks)"},
        Bad{BASE "strategies:\n  quantization: {weights: q3}\n",
            "bad.yaml:4:27: strategies.quantization.weights: expected one of keep, f16, bf16, "
            "q8_0, q4_0, q4_1, fp8 or int8, got q3"},
        Bad{BASE "strategies:\n  quantization: {weights: q8_0, keep_layers: [0, -70000]}\n",
            "strategies.quantization.keep_layers: item 1: expected an integer in [-65535, 65535], "
            "got -70000"},
        Bad{BASE "strategies:\n  quantization: {weights: q8_0, keep_layers: [1, 1]}\n",
            "strategies.quantization.keep_layers: item 1: layer 1 is listed twice"},
        Bad{BASE "strategies:\n  quantization: {keep_layers: 0}\n",
            "strategies.quantization.keep_layers: expected a list of integers in [-65535, 65535], "
            "got 0"},
        Bad{BASE "strategies:\n  quantization: {activations: int4}\n",
            "strategies.quantization.activations: expected one of int8, float or bf16, got int4"},
        Bad{BASE "strategies:\n  quantization: {embeddings: \"true\"}\n",
            "strategies.quantization.embeddings: expected true or false, got the string \"true\""},
        Bad{BASE "strategies:\n  cuda_graphs: {enable: true}\n",
            "strategies.cuda_graphs.enable: unknown key (allowed here: enabled)"},
        Bad{BASE "strategies:\n  allocator: {kind: arena}\n",
            "strategies.allocator.kind: expected caching or plain, got arena"},
        Bad{BASE "strategies:\n  threads: {count: 2000}\n",
            "strategies.threads.count: expected an integer in [0, 1024], got 2000"},
        Bad{BASE "bench: {repeat: 0}\n", "bench.repeat: expected an integer in [1, 1000], got 0"},
        Bad{BASE "bench: {gen_tokens: \"64\"}\n",
            "bench.gen_tokens: expected an integer in [1, 1048576], got the string \"64\""},
        Bad{BASE "bench: {iterations: 3}\n",
            "bench.iterations: unknown key (allowed here: prompt_tokens, gen_tokens, repeat, "
            "warmup, prompts)"},
        Bad{BASE "bench: {prompts: [a.txt]}\n",
            "bench.prompts: expected a non-empty string, got a list"},
        Bad{BASE "precision: {min_top1: 1.5}\n",
            "bad.yaml:3:23: precision.min_top1: expected a number in [0, 1], got 1.5"},
        Bad{BASE "precision: {max_mean_kl: -0.1}\n",
            "precision.max_mean_kl: expected a number in [0, 100], got -0.1"},
        Bad{BASE "precision: {max_ppl_change: big}\n",
            "precision.max_ppl_change: expected a number in [0, 10], got big"},
        Bad{BASE "precision: 0.95\n", "precision: expected a mapping of keys, got 0.95"},
        Bad{BASE "device: cuda:x\n", "bad.yaml:3:9: device: expected cpu or cuda:N, got cuda:x"},
        Bad{BASE "device: gpu0\n", "device: expected cpu or cuda:N, got gpu0"},
        Bad{BASE "base: [a.yaml]\n", "bad.yaml:3:7: base: expected a non-empty string, got a list"},
        Bad{BASE "base: missing-base.yaml\n",
            "bad.yaml:3:7: base: missing-base.yaml not found (a path relative to this recipe; "
            "chain: bad.yaml -> missing-base.yaml)"},
        Bad{BASE "context_length: 8\n", "context_length: expected 0 (the model's) or at least 16"},
        Bad{BASE "context_length: 1e9\n", "context_length: expected an integer"},
        Bad{"model: m\nscenario: vision\n",
            "scenario: expected llm-chat, llm-serve, embedding or image-classification, got "
            "vision"},
        Bad{"model: m\nscenario: image-classification\n",
            "classifier: missing (an image-classification recipe describes its network"},
        Bad{BASE "classifier: {top_k: 3}\n",
            "classifier: set, but the scenario is llm-chat (classifier settings belong to "
            "scenario: "
            "image-classification)"},
        Bad{"model: m\nscenario: image-classification\nclassifier: {top_k: 3}\n",
            "classifier.network: family and strides are required"},
        Bad{"model: m\nscenario: image-classification\nclassifier:\n  network: {family: vgg}\n",
            "classifier.network.family: expected inverted_residual or resnet, got vgg"},
        Bad{"model: m\nscenario: image-classification\nclassifier:\n  network: {strides: [1, 3]}\n",
            "classifier.network.strides: item 1: expected an integer in [1, 2], got 3"},
        Bad{"model: m\nscenario: image-classification\nclassifier:\n  preprocess: {mean: [0.5]}\n",
            "classifier.preprocess.mean: expected 3 numbers (R, G, B), got 1"},
        Bad{"model: m\nscenario: image-classification\nclassifier:\n  preprocess: {std: [0, 1, "
            "1]}\n",
            "classifier.preprocess.std: item 0: expected a number in"},
        Bad{"model: m\nscenario: image-classification\nclassifier:\n  preprocess: {resize: 100}\n",
            "classifier.preprocess.resize: 100 is smaller than the crop 224"},
        Bad{BASE "device: tpu\n", "device: expected cpu or cuda:N, got tpu"},
        Bad{BASE "chat_template: \n", "chat_template: expected a non-empty string, got nothing"},
        Bad{BASE "sampling: {temperature: 1e-39}\n",
            "bad.yaml:3:25: sampling.temperature: 1e-39 is below the smallest usable temperature "
            "0.0001 (0: greedy)"},
        Bad{"model: m\n---\nmodel: n\n", "holds 2 YAML documents"},
        Bad{"model: m\nscenario: llm-serve\nserve: {name: 'a b'}\n",
            "serve.name: 'a b' is not a model name"},
        Bad{"model: m\nscenario: llm-serve\nserve: {aliases: ['a b']}\n",
            "serve.aliases: 'a b' is not a model name"},
        Bad{"model: m\nscenario: llm-serve\nserve: {port: 80}\n", "port"},
        Bad{"model: m\nscenario: llm-serve\nsampling: {frequency_penalty: 11}\n",
            "sampling.frequency_penalty"}));

#undef BASE

// A huge recipe fails fast and small: before, a 50 MB stop list took 5.9 GB and a 50 MB value
// was echoed whole inside the "one-line" error.
TEST(RecipeTest, HugeRecipesFailFastWithShortMessages) {
  const std::string base = "model: m\nscenario: llm-chat\n";
  auto big = parse_recipe(base + "# " + std::string(2 << 20, 'x') + "\n", "big.yaml");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("a recipe is at most 1048576 bytes"), std::string::npos)
      << big.status().message().substr(0, 300);

  std::string stops = base + "sampling:\n  stop:\n";
  for (int i = 0; i < 65; ++i) stops += "    - s" + std::to_string(i) + "\n";
  auto many = parse_recipe(stops, "stops.yaml");
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("sampling.stop: 65 items, at most 64 allowed"),
            std::string::npos)
      << many.status().message();

  auto long_stop =
      parse_recipe(base + "sampling: {stop: [" + std::string(5000, 'y') + "]}\n", "long_stop.yaml");
  ASSERT_FALSE(long_stop.ok());
  EXPECT_NE(long_stop.status().message().find("item 0: 5000 bytes, at most 4096 allowed"),
            std::string::npos);

  for (const std::string& huge :
       {base + "sampling: {top_p: " + std::string(100000, '9') + "}\n",
        base + "sampling: {top_p: \"" + std::string(100000, 'z') + "\"}\n",
        base + "kv_cache: " + std::string(100000, 'k') + "\n",
        base + std::string(100000, 'k') + ": 1\n",
        "model: " + std::string(100000, 'm') + "\nscenario: llm-chat\n"}) {
    auto r = parse_recipe(huge, "huge.yaml");
    ASSERT_FALSE(r.ok());
    EXPECT_LT(r.status().message().size(), 400u) << r.status().message().substr(0, 500);
    EXPECT_EQ(std::count(r.status().message().begin(), r.status().message().end(), '\n'), 0);
  }
}

TEST(RecipeTest, MissingFile) {
  auto r = load_recipe("/nonexistent/recipe.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/recipe.yaml"), std::string::npos);
}

}  // namespace
}  // namespace rinfer
