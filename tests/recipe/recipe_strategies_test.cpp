// The strategy registry and its composition (apply_strategies), incompatible combinations, the
// device check at load, and every committed recipe (base inheritance: recipe_base_test.cpp).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_info.h"
#include "engine/strategy_options.h"
#include "recipe/recipe.h"
#include "strategies/registry.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

#define BASE "model: m\nscenario: llm-chat\n"

struct Applied {
  LoadOptions load;
  EngineCoreOptions core;  // engine_core_options of the recipe's strategies
};

Applied apply_ok(const std::string& text) {
  auto r = parse_recipe(text, "r.yaml");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  Applied a;
  if (!r.ok()) return a;
  Status st = apply_strategies(*r, a.load);
  EXPECT_TRUE(st.ok()) << st.to_string();
  a.core = engine_core_options(r->strategies, 2048);
  return a;
}

// ---- the registry ---------------------------------------------------------------------------

TEST(StrategyRegistryTest, ListsEveryStrategyWithItsDocument) {
  std::vector<std::string> names;
  for (const StrategyInfo& s : strategy_registry()) {
    names.emplace_back(s.name);
    EXPECT_FALSE(s.keys.empty()) << s.name;
    EXPECT_FALSE(s.baseline.empty()) << s.name;
    EXPECT_FALSE(s.hooks.empty()) << s.name;
    EXPECT_EQ(s.doc, "docs/strategies/" + std::string(s.name) + ".md");
    EXPECT_TRUE(fs::is_regular_file(test::source_dir() + "/" + std::string(s.doc))) << s.doc;
    // The baseline setting parses as this strategy's mapping.
    auto r = parse_recipe(std::string(BASE "strategies:\n  ") + std::string(s.name) + ": " +
                              std::string(s.baseline) + "\n",
                          "b.yaml");
    EXPECT_TRUE(r.ok()) << s.name << ": " << r.status().to_string();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"kv_cache", "kernels", "threads", "fusion",
                                             "quantization", "cuda_graphs", "device_sampling",
                                             "allocator", "batching", "dynamic_batching"}));
  ASSERT_NE(find_strategy("fusion"), nullptr);
  EXPECT_EQ(find_strategy("fusion")->keys.size(), 7u);
  EXPECT_EQ(find_strategy("paged_attention"), nullptr);
}

// `rinfer strategies`, docs/recipes.md and the parser agree on every key: each value the
// registry's type names parses, the ends of its ranges parse and one past them does not, and
// the docs' row for the key states the same type.
std::string normalized_type(std::string t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '`') continue;
    if (t[i] == '\\' && i + 1 < t.size() && t[i + 1] == '|') continue;
    out += t[i];
  }
  std::string compact;  // "a | b" -> "a|b"
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == ' ' && ((i + 1 < out.size() && out[i + 1] == '|') ||
                          (!compact.empty() && compact.back() == '|'))) {
      continue;
    }
    compact += out[i];
  }
  return compact;
}

// A key of a nested mapping is written dotted ("prealloc.policy": {prealloc: {policy: v}}).
std::string with_key(const std::string& strategy, const std::string& key, const std::string& value,
                     const std::string& device = "cpu") {
  const size_t dot = key.find('.');
  const std::string entry = dot == std::string::npos ? key + ": " + value
                                                     : key.substr(0, dot) + ": {" +
                                                           key.substr(dot + 1) + ": " + value + "}";
  return std::string(BASE "device: ") + device + "\nstrategies:\n  " + strategy + ": {" + entry +
         "}\n";
}

bool parses(const std::string& strategy, const std::string& key, const std::string& value) {
  return parse_recipe(with_key(strategy, key, value), "k.yaml").ok();
}

// Parses and composes for the CPU or for cuda:0 (no GPU needed to compose).
bool composes(const std::string& strategy, const std::string& key, const std::string& value) {
  for (const char* device : {"cpu", "cuda:0"}) {
    auto r = parse_recipe(with_key(strategy, key, value, device), "k.yaml");
    LoadOptions load;
    if (r.ok() && apply_strategies(*r, load).ok()) return true;
  }
  return false;
}

TEST(StrategyRegistryTest, KeysAgreeWithTheParserAndTheDocs) {
  std::ifstream f(test::source_dir() + "/docs/recipes.md");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string docs = ss.str();
  ASSERT_FALSE(docs.empty());
  for (const StrategyInfo& s : strategy_registry()) {
    for (const StrategyKey& k : s.keys) {
      const std::string name(s.name), key(k.name), type = normalized_type(std::string(k.type));
      SCOPED_TRACE(name + "." + key + ": " + type);
      // The docs' row: "| `name.key` | type |".
      const std::string row = "| `" + name + "." + key + "` | ";
      const size_t at = docs.find(row);
      ASSERT_NE(at, std::string::npos);
      const size_t cell_end = docs.find(" | ", at + row.size());
      const std::string cell =
          normalized_type(docs.substr(at + row.size(), cell_end - at - row.size()));
      EXPECT_EQ(cell.rfind(type, 0), 0u) << "docs say: " << cell;
      int64_t lo = 0, hi = 0;
      if (type == "bool") {
        EXPECT_TRUE(parses(name, key, "true"));
        EXPECT_TRUE(parses(name, key, "false"));
        EXPECT_FALSE(parses(name, key, "maybe"));
      } else if (std::sscanf(type.c_str(), "int in [%ld, %ld]", &lo, &hi) == 2) {
        EXPECT_TRUE(parses(name, key, std::to_string(lo)));
        EXPECT_TRUE(parses(name, key, std::to_string(hi)));
        EXPECT_FALSE(parses(name, key, std::to_string(hi + 1)));
        EXPECT_FALSE(parses(name, key, std::to_string(lo - 1)));
      } else if (double a = 0, b = 0;
                 std::sscanf(type.c_str(), "number in [%lf, %lf]", &a, &b) == 2) {
        EXPECT_TRUE(parses(name, key, fmt::format("{}", a)));
        EXPECT_TRUE(parses(name, key, fmt::format("{}", b)));
        EXPECT_FALSE(parses(name, key, fmt::format("{}", b + 1)));
        EXPECT_FALSE(parses(name, key, fmt::format("{}", a - 1)));
      } else if (std::sscanf(type.c_str(), "list of int in [%ld, %ld]", &lo, &hi) == 2) {
        EXPECT_TRUE(parses(name, key, "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"));
        EXPECT_FALSE(parses(name, key, "[" + std::to_string(hi + 1) + "]"));
        EXPECT_FALSE(parses(name, key, "[" + std::to_string(lo - 1) + "]"));
      } else if (type == "path") {  // a file named relative to the recipe
        EXPECT_TRUE(parses(name, key, "some/file.json"));
        EXPECT_FALSE(parses(name, key, "''"));
        EXPECT_FALSE(parses(name, key, "[1]"));
      } else {
        ASSERT_NE(type.find('|'), std::string::npos) << "an unknown kind of type";
        std::stringstream values(type);
        std::string v;
        while (std::getline(values, v, '|')) EXPECT_TRUE(composes(name, key, v)) << v;
        EXPECT_FALSE(parses(name, key, "no_such_value"));
      }
    }
  }
}

// ---- composition ----------------------------------------------------------------------------

TEST(ApplyStrategiesTest, CpuDefaults) {
  Applied a = apply_ok(BASE);
  EXPECT_TRUE(a.load.device.is_cpu());
  EXPECT_EQ(a.load.cpu.ops.impl, cpu::Impl::kFast);
  EXPECT_TRUE(a.load.cpu.ops.quantize_activations);
  EXPECT_FALSE(a.load.weight_format.has_value());
  EXPECT_TRUE(a.load.keep_precision_layers.empty());
  EXPECT_FALSE(a.load.convert_embeddings);
  EXPECT_FALSE(a.load.cuda.graphs);  // resolved off on the CPU
  EXPECT_FALSE(a.core.scheduler.recompute_each_step);
  EXPECT_FALSE(a.load.kv_dtype.has_value());  // the device's default
}

TEST(ApplyStrategiesTest, KvCacheDtype) {
  Applied a = apply_ok(BASE "device: cuda:0\nstrategies: {kv_cache: {dtype: f32}}\n");
  ASSERT_TRUE(a.load.kv_dtype.has_value());
  EXPECT_EQ(*a.load.kv_dtype, DType::kF32);
  Applied b = apply_ok(BASE "device: cuda:0\nstrategies: {kv_cache: {dtype: bf16}}\n");
  EXPECT_EQ(b.load.kv_dtype, std::optional<DType>(DType::kBF16));
  Applied c = apply_ok(BASE "strategies: {kv_cache: {dtype: f32}}\n");  // the CPU's own type
  EXPECT_EQ(c.load.kv_dtype, std::optional<DType>(DType::kF32));
  Applied d = apply_ok(BASE "device: cuda:0\nstrategies: {kv_cache: {dtype: auto}}\n");
  EXPECT_FALSE(d.load.kv_dtype.has_value());
  auto r = parse_recipe(BASE "device: cuda:0\nstrategies: {kv_cache: {dtype: f32}}\n", "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(describe_strategies(r->strategies, r->device).substr(0, 19), "kv_cache on (f32), ");
  auto bad = parse_recipe(BASE "strategies: {kv_cache: {dtype: f16}}\n", "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("strategies.kv_cache.dtype"), std::string::npos)
      << bad.status().to_string();
}

TEST(ApplyStrategiesTest, CpuBaselineSwitches) {
  Applied a = apply_ok(BASE
                       "strategies:\n  kv_cache: {enabled: false}\n  kernels: {impl: reference}\n"
                       "  threads: {count: 1}\n  quantization: {activations: float}\n"
                       "  cuda_graphs: {enabled: false}\n");
  EXPECT_EQ(a.load.cpu.ops.impl, cpu::Impl::kReference);
  EXPECT_FALSE(a.load.cpu.ops.quantize_activations);
  EXPECT_TRUE(a.core.scheduler.recompute_each_step);
  EXPECT_FALSE(a.load.cuda.graphs);
  auto r = parse_recipe(BASE "strategies:\n  threads: {count: 3}\n", "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->strategies.threads, 3);
  EXPECT_EQ(describe_strategies(r->strategies, r->device),
            "kv_cache on, kernels fast, threads 3, fusion swiglu+qkv, activations int8");
}

TEST(ApplyStrategiesTest, Bf16ActivationsPackTheMatrices) {
  Applied a = apply_ok(BASE "strategies:\n  quantization: {activations: bf16}\n");
  EXPECT_TRUE(a.load.cpu.bf16_matmuls);
  EXPECT_FALSE(a.load.cpu.ops.quantize_activations);
  auto r = parse_recipe(BASE "strategies:\n  quantization: {activations: bf16}\n", "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_NE(describe_strategies(r->strategies, r->device).find("activations bf16"),
            std::string::npos);
  EXPECT_FALSE(apply_ok(BASE).load.cpu.bf16_matmuls);
}

TEST(ApplyStrategiesTest, CudaDefaultsAreTheOptimizedSettings) {
  Applied a = apply_ok(BASE "device: cuda:1\n");
  EXPECT_EQ(a.load.device, Device::cuda(1));
  EXPECT_TRUE(a.load.cuda.graphs);
  EXPECT_EQ(a.load.cuda.allocator, AllocatorKind::kCaching);
  EXPECT_TRUE(a.load.fusion.attention && a.load.fusion.residual_norm && a.load.fusion.swiglu &&
              a.load.fusion.qkv);
  EXPECT_FALSE(a.load.weight_format.has_value());
  EXPECT_FALSE(a.core.scheduler.recompute_each_step);
  auto r = parse_recipe(BASE "device: cuda:1\n", "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->strategies_summary(),
            "kv_cache on, threads all cores, fusion attention+residual_norm+swiglu+qkv, "
            "cuda_graphs on, device_sampling on, allocator caching, context 2048");
}

TEST(ApplyStrategiesTest, CudaBaselineSwitches) {
  const std::string text = BASE
      "device: cuda:0\nstrategies:\n  cuda_graphs: {enabled: false}\n  allocator: {kind: plain}\n"
      "  fusion: {residual_norm: false, swiglu: false, qkv: false}\n";
  Applied a = apply_ok(text);
  EXPECT_FALSE(a.load.cuda.graphs);
  EXPECT_EQ(a.load.cuda.allocator, AllocatorKind::kPlain);
  EXPECT_TRUE(a.load.fusion.attention);
  EXPECT_FALSE(a.load.fusion.residual_norm);
  EXPECT_FALSE(a.load.fusion.swiglu);
  EXPECT_FALSE(a.load.fusion.qkv);
  auto r = parse_recipe(text, "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(describe_strategies(r->strategies, r->device),
            "kv_cache on, threads all cores, fusion attention (unfused residual_norm+swiglu+qkv), "
            "cuda_graphs off, device_sampling on, allocator plain");
}

TEST(ApplyStrategiesTest, CudaWithoutKvCacheTurnsTheDefaultGraphsOff) {
  Applied a = apply_ok(BASE "device: cuda:0\nstrategies: {kv_cache: {enabled: false}}\n");
  EXPECT_TRUE(a.core.scheduler.recompute_each_step);
  EXPECT_FALSE(a.load.cuda.graphs);
  EXPECT_FALSE(a.load.cuda.device_sampling);
}

TEST(ApplyStrategiesTest, DeviceSamplingIsOnForCudaAndOffElsewhere) {
  EXPECT_TRUE(apply_ok(BASE "device: cuda:0\n").load.cuda.device_sampling);
  EXPECT_FALSE(apply_ok(BASE).load.cuda.device_sampling);  // the CPU samples on the host
  Applied a = apply_ok(BASE "device: cuda:0\nstrategies:\n  device_sampling: {enabled: false}\n");
  EXPECT_FALSE(a.load.cuda.device_sampling);
  EXPECT_TRUE(a.load.cuda.graphs);
  auto r = parse_recipe(BASE "device: cuda:0\nstrategies:\n  device_sampling: {enabled: false}\n",
                        "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_NE(describe_strategies(r->strategies, r->device).find("device_sampling off"),
            std::string::npos);
}

// strategies.kernels.cuda: every former environment switch of the CUDA kernels, as a typed knob
// that reaches LoadOptions::cuda.kernels (the CUDA runners apply it at creation).
TEST(ApplyStrategiesTest, CudaKernelSwitchesReachTheLoadOptions) {
  EXPECT_EQ(apply_ok(BASE "device: cuda:0\n").load.cuda.kernels, cuda::KernelConfig{});
  const std::string text = BASE
      "device: cuda:0\nstrategies:\n  kernels:\n    cuda: {matvec_split: 2, matvec_stream: never, "
      "matvec_stream_kb: 64, producer_l2: all, attention_mma: false, pdl: false, "
      "split_norm: false, runner_matvec: false, batch_matvec_rows: 3}\n";
  const cuda::KernelConfig k = apply_ok(text).load.cuda.kernels;
  EXPECT_EQ(k.matvec_split, 2);
  EXPECT_EQ(k.matvec_stream, cuda::MatvecKernel::kNever);
  EXPECT_EQ(k.matvec_stream_kb, 64);
  EXPECT_EQ(k.producer_l2, cuda::ProducerL2::kAll);
  EXPECT_FALSE(k.attention_mma);
  EXPECT_FALSE(k.pdl);
  EXPECT_FALSE(k.split_norm);
  EXPECT_FALSE(k.runner_matvec);
  EXPECT_EQ(k.batch_matvec_rows, 3);
  auto r = parse_recipe(text, "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_NE(describe_strategies(r->strategies, r->device)
                .find("kernels matvec_split 2, matvec_stream never, matvec_stream_kb 64, "
                      "producer_l2 all, attention_mma off, pdl off, split_norm off, runner_matvec off, "
                      "batch_matvec_rows 3"),
            std::string::npos)
      << describe_strategies(r->strategies, r->device);
  EXPECT_EQ(describe_cuda_kernels(k),
            "{matvec_split: 2, matvec_stream: never, matvec_stream_kb: 64, producer_l2: all, "
            "attention_mma: false, pdl: false, split_norm: false, runner_matvec: false, "
            "batch_matvec_rows: 3}");
  // Each value of each enum, and a base recipe's switches kept where a child sets others.
  EXPECT_EQ(apply_ok(BASE "device: cuda:0\nstrategies: {kernels: {cuda: {matvec_split: 4}}}\n")
                .load.cuda.kernels.matvec_split,
            4);
  EXPECT_EQ(apply_ok(BASE "device: cuda:0\nstrategies: {kernels: {cuda: {matvec_split: auto}}}\n")
                .load.cuda.kernels.matvec_split,
            0);
  EXPECT_EQ(apply_ok(BASE "device: cuda:0\nstrategies: {kernels: {cuda: {producer_l2: narrow}}}\n")
                .load.cuda.kernels.producer_l2,
            cuda::ProducerL2::kNarrow);
  EXPECT_EQ(
      apply_ok(BASE "device: cuda:0\nstrategies: {kernels: {cuda: {matvec_stream: always}}}\n")
          .load.cuda.kernels.matvec_stream,
      cuda::MatvecKernel::kAlways);
  // On the CPU the CUDA switches are carried but describe nothing.
  auto cpu = parse_recipe(BASE "strategies: {kernels: {cuda: {pdl: false}}}\n", "r.yaml");
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(describe_strategies(cpu->strategies, cpu->device).find("pdl"), std::string::npos);
}

TEST(ApplyStrategiesTest, BadCudaKernelSwitchesNameTheFileAndLine) {
  struct Case {
    const char* yaml;
    const char* where;
    const char* says;
  };
  const Case cases[] = {
      {"    cuda: {matvec_spilt: 2}\n", "r.yaml:6:", "matvec_spilt"},
      {"    cuda: {matvec_split: 3}\n", "r.yaml:6:", "kernels.cuda.matvec_split"},
      {"    cuda: {matvec_stream_kb: 221}\n", "r.yaml:6:", "[16, 220]"},
      {"    cuda: {matvec_stream_kb: 15}\n", "r.yaml:6:", "[16, 220]"},
      {"    cuda: {batch_matvec_rows: 9}\n", "r.yaml:6:", "[0, 8]"},
      {"    cuda: {producer_l2: sometimes}\n", "r.yaml:6:", "auto"},
      {"    cuda: {pdl: \"false\"}\n", "r.yaml:6:", "kernels.cuda.pdl"},
      {"    cuda: [pdl]\n", "r.yaml:6:", "kernels.cuda"},
      {"    gpu: {pdl: false}\n", "r.yaml:6:", "gpu"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto r = parse_recipe(std::string(BASE "device: cuda:0\nstrategies:\n  kernels:\n") + c.yaml,
                          "r.yaml");
    ASSERT_FALSE(r.ok());
    const std::string msg = r.status().to_string();
    EXPECT_NE(msg.find(c.where), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

// The benchmarks' --kernels flag reads the same mapping with the same rules.
TEST(StrategyRegistryTest, CudaKernelsMappingParsesOnItsOwn) {
  cuda::KernelConfig k;
  auto m = YamlMap::from(YAML::Load("{pdl: false, matvec_split: 1}"), "--kernels", "kernels.cuda");
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(parse_cuda_kernels(*m, k).ok());
  EXPECT_FALSE(k.pdl);
  EXPECT_EQ(k.matvec_split, 1);
  EXPECT_TRUE(k.attention_mma);
  auto bad = YamlMap::from(YAML::Load("{pdl: maybe}"), "--kernels", "kernels.cuda");
  ASSERT_TRUE(bad.ok());
  const Status st = parse_cuda_kernels(*bad, k);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("kernels.cuda.pdl"), std::string::npos) << st.to_string();
}

// src/ reads no environment variable but the documented user settings (docs/design.md lists
// them): every other switch is a recipe knob.
TEST(SettingsTest, SrcReadsOnlyTheDocumentedEnvironment) {
  const std::vector<std::string> allowed = {"RINFER_MODEL_DIR", "XDG_CACHE_HOME", "HOME",
                                            "RINFER_NO_PROGRESS", "RINFER_GIT_SHA"};
  std::ifstream df(test::source_dir() + "/docs/design.md");
  std::stringstream design;
  design << df.rdbuf();
  for (const std::string& v : allowed) {
    EXPECT_NE(design.str().find("`" + v + "`"), std::string::npos) << v << " not in design.md";
  }
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(test::source_dir() + "/src")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".cu" && ext != ".h" && ext != ".cuh")) {
      continue;
    }
    ++files;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    for (size_t at = text.find("getenv("); at != std::string::npos;
         at = text.find("getenv(", at + 1)) {
      const size_t open = at + 7;
      const size_t close = text.find(')', open);
      const std::string arg = text.substr(open, close - open);
      SCOPED_TRACE(e.path().string() + ": getenv(" + arg + ")");
      ASSERT_TRUE(arg.size() > 2 && arg.front() == '"' && arg.back() == '"');
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), arg.substr(1, arg.size() - 2)),
                allowed.end());
    }
    EXPECT_EQ(text.find("setenv("), std::string::npos) << e.path();
  }
  EXPECT_GT(files, 100);
}

TEST(ApplyStrategiesTest, QuantizationKeepsFirstAndLastByDefault) {
  Applied a = apply_ok(BASE "device: cuda:0\nstrategies: {quantization: {weights: q8_0}}\n");
  ASSERT_TRUE(a.load.weight_format.has_value());
  EXPECT_EQ(*a.load.weight_format, DType::kQ8_0);
  EXPECT_EQ(a.load.keep_precision_layers, (std::vector<int64_t>{0, -1}));
  EXPECT_FALSE(a.load.convert_embeddings);

  a = apply_ok(BASE
               "device: cuda:0\nstrategies:\n"
               "  quantization: {weights: bf16, keep_layers: [], embeddings: true}\n");
  EXPECT_EQ(*a.load.weight_format, DType::kBF16);
  EXPECT_TRUE(a.load.keep_precision_layers.empty());
  EXPECT_TRUE(a.load.convert_embeddings);

  a = apply_ok(BASE
               "device: cuda:0\nstrategies:\n  quantization: {weights: q4_0, keep_layers: "
               "[0, 1, -1]}\n");
  EXPECT_EQ(*a.load.weight_format, DType::kQ4_0);
  EXPECT_EQ(a.load.keep_precision_layers, (std::vector<int64_t>{0, 1, -1}));

  a = apply_ok(BASE "device: cuda:0\nstrategies: {quantization: {weights: f16}}\n");
  EXPECT_EQ(*a.load.weight_format, DType::kF16);
  a = apply_ok(BASE "device: cuda:0\nstrategies: {quantization: {weights: keep}}\n");
  EXPECT_FALSE(a.load.weight_format.has_value());
  EXPECT_TRUE(a.load.keep_precision_layers.empty());
}

// ---- incompatible combinations: valid YAML, refused for the device or the other keys ----------

struct Conflict {
  const char* text;
  const char* expected;  // a substring of the message
  const char* other;     // the second key the message must name
};

class ConflictTest : public ::testing::TestWithParam<Conflict> {};

TEST_P(ConflictTest, NamesBothKeys) {
  auto r = parse_recipe(GetParam().text, "c.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  LoadOptions load;
  Status st = apply_strategies(*r, load);
  ASSERT_FALSE(st.ok()) << GetParam().text;
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  const std::string& msg = st.message();
  EXPECT_NE(msg.find(GetParam().expected), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("(conflicts with ") + GetParam().other), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("c.yaml:", 0), 0u) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConflictTest,
    ::testing::Values(
        Conflict{BASE "strategies:\n  cuda_graphs: {enabled: true}\n",
                 "c.yaml:4:26: strategies.cuda_graphs.enabled: true needs a CUDA device, but the "
                 "device is cpu",
                 "device: the default)"},
        Conflict{BASE "device: cpu\nstrategies:\n  allocator: {kind: plain}\n",
                 "c.yaml:5:21: strategies.allocator.kind: chooses the CUDA device allocator",
                 "device: set at c.yaml:3:9)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  kernels: {impl: reference}\n",
                 "c.yaml:5:19: strategies.kernels.impl: reference selects the scalar CPU kernels; "
                 "device cuda:0 runs the CUDA kernels",
                 "device: set at c.yaml:3:9)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  quantization: {activations: int8}\n",
                 "strategies.quantization.activations: is a CPU kernel setting",
                 "device: set at c.yaml:3:9)"},
        Conflict{BASE "strategies:\n  kv_cache: {dtype: bf16}\n",
                 "c.yaml:4:21: strategies.kv_cache.dtype: bf16: the CPU keeps its KV cache in f32 "
                 "or int8",
                 "device: the default)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  kv_cache: {dtype: int8}\n",
                 "c.yaml:5:21: strategies.kv_cache.dtype: int8: the CUDA attention kernels read "
                 "bf16 or f32",
                 "device: set at c.yaml:3:9)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  kv_cache: {enabled: false}\n"
                      "  cuda_graphs: {enabled: true}\n",
                 "c.yaml:6:26: strategies.cuda_graphs.enabled: true needs the KV cache",
                 "strategies.kv_cache.enabled: set at c.yaml:5:23)"},
        Conflict{BASE "strategies:\n  device_sampling: {enabled: true}\n",
                 "c.yaml:4:30: strategies.device_sampling.enabled: true needs a CUDA device",
                 "device: the default)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  kv_cache: {enabled: false}\n"
                      "  device_sampling: {enabled: true}\n",
                 "strategies.device_sampling.enabled: true needs the KV cache",
                 "strategies.kv_cache.enabled: set at c.yaml:5:23)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  fusion: {attention: false}\n",
                 "strategies.fusion.attention: false (scores, softmax and the weighted sum as "
                 "separate kernels) is not implemented on cuda:0",
                 "device: set at c.yaml:3:9)"},
        Conflict{BASE "strategies:\n  fusion: {residual_norm: false}\n",
                 "strategies.fusion.residual_norm: on the CPU only qkv and swiglu",
                 "device: the default)"},
        Conflict{BASE "strategies:\n  quantization: {keep_layers: [0]}\n",
                 "strategies.quantization.keep_layers: lists layers to keep in their stored "
                 "precision, but the weights are not converted",
                 "strategies.quantization.weights: the default)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  quantization: {weights: keep, embeddings: "
                      "true}\n",
                 "strategies.quantization.embeddings: true converts the embeddings along with "
                 "the weights, but the weights are not converted",
                 "strategies.quantization.weights: set at c.yaml:5:27)"},
        Conflict{BASE "strategies:\n  fusion: {attention: false}\n",
                 "strategies.fusion.attention: on the CPU only qkv and swiglu",
                 "device: the default)"},
        Conflict{BASE "device: cuda:0\nstrategies:\n  quantization: {weights: fp8, embeddings: "
                      "true}\n",
                 "strategies.quantization.embeddings: true: the embedding table and the output "
                 "projection have no FP8 kernels",
                 "strategies.quantization.weights: set at c.yaml:5:27)"},
        Conflict{BASE "strategies:\n  quantization: {weights: fp8}\n",
                 "c.yaml:4:27: strategies.quantization.weights: fp8 (E4M3 weights and "
                 "activations on the tensor cores) runs on CUDA devices, not cpu",
                 "device: the default)"}));

TEST(ApplyStrategiesTest, WeightFormatsWithoutAConverterAreRefused) {
  // Refused where the recipe names them (at parse), so that `rinfer strategies`, which lists
  // only the formats a recipe may use, agrees with what the parser accepts.
  for (const char* f : {"q4_k", "f32"}) {
    auto r = parse_recipe(std::string(BASE "strategies:\n  quantization: {weights: ") + f + "}\n",
                          "c.yaml");
    ASSERT_FALSE(r.ok()) << f;
    EXPECT_NE(r.status().message().find(std::string("strategies.quantization.weights: ") + f +
                                        ": there is no converter"),
              std::string::npos)
        << r.status().message();
  }
  // The CPU converts the others at load.
  Applied a = apply_ok(BASE "strategies: {quantization: {weights: q8_0}}\n");
  EXPECT_EQ(*a.load.weight_format, DType::kQ8_0);
  // fp8: the CUDA model quantizes at upload.
  Applied f = apply_ok(BASE "device: cuda:0\nstrategies: {quantization: {weights: fp8}}\n");
  EXPECT_EQ(*f.load.weight_format, DType::kF8E4M3);
}

// ---- the device, checked at load ------------------------------------------------------------

TEST(DeviceCheckTest, AMissingCudaDeviceNamesTheRecipeKey) {
  auto r = parse_recipe(BASE "device: cuda:99\n", "r.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();  // parsing does not look at the machine
  Status st = check_device_available(r->device, r->origins());
  ASSERT_FALSE(st.ok());
  const std::string& msg = st.message();
  EXPECT_EQ(msg.rfind("r.yaml:3:9: device: cuda:99 is not available: ", 0), 0u) << msg;
  if (!cuda_compiled()) {
    EXPECT_NE(msg.find("this rinfer was built without CUDA"), std::string::npos) << msg;
  } else if (!cuda_devices().ok()) {
    EXPECT_NE(msg.find("no usable CUDA device ("), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("this machine has "), std::string::npos) << msg;
  }
  EXPECT_TRUE(check_device_available(Device::cpu(), r->origins()).ok());
}

TEST(DeviceCheckTest, CudaZeroIsAvailableExactlyWhenTheMachineHasIt) {
  auto r = parse_recipe(BASE "device: cuda:0\n", "r.yaml");
  ASSERT_TRUE(r.ok());
  const bool have = cuda_compiled() && cuda_devices().ok() && !cuda_devices()->empty();
  EXPECT_EQ(check_device_available(r->device, r->origins()).ok(), have);
}

// ---- the committed recipes ------------------------------------------------------------------

TEST(CommittedRecipesTest, EveryRecipeParsesAndComposesForItsDevice) {
  int n = 0;
  for (const auto& entry : fs::recursive_directory_iterator(test::source_dir() + "/recipes")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    auto r = load_recipe(entry.path().string());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    LoadOptions load;
    Status st = apply_strategies(*r, load);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(load.device, r->device);
    ++n;
  }
  EXPECT_GE(n, 12);
}

TEST(CommittedRecipesTest, SmolLM2VariantsChangeOneStrategyEach) {
  const std::string dir = test::source_dir() + "/recipes/llm-chat/smollm2-135m/";
  auto opt = load_recipe(dir + "optimized.yaml");
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();

  auto v = load_recipe(dir + "no-kv-cache.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_FALSE(v->strategies.kv_cache);
  EXPECT_EQ(v->strategies.kernels, opt->strategies.kernels);

  v = load_recipe(dir + "threads-1.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->strategies.threads, 1);
  EXPECT_TRUE(v->strategies.kv_cache);

  v = load_recipe(dir + "f32-activations.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->strategies.quantization.activations, ActivationFormat::kFloat);

  v = load_recipe(dir + "cuda.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->device, Device::cuda(0));
  EXPECT_TRUE(v->strategies.cuda_graphs);
  EXPECT_EQ(v->sampling.seed, opt->sampling.seed);

  v = load_recipe(dir + "cuda-baseline.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  LoadOptions load;
  ASSERT_TRUE(apply_strategies(*v, load).ok());
  EXPECT_FALSE(load.cuda.graphs);
  EXPECT_FALSE(load.cuda.device_sampling);
  EXPECT_EQ(load.cuda.allocator, AllocatorKind::kPlain);
  EXPECT_FALSE(load.fusion.residual_norm || load.fusion.swiglu || load.fusion.qkv);
  EXPECT_TRUE(load.fusion.attention);  // the only attention on CUDA

  v = load_recipe(dir + "cuda-bf16.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_TRUE(apply_strategies(*v, load).ok());
  EXPECT_EQ(load.weight_format, DType::kBF16);
  EXPECT_EQ(load.keep_precision_layers, (std::vector<int64_t>{0, -1}));

  v = load_recipe(dir + "cuda-f32-kv.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  LoadOptions load32;
  ASSERT_TRUE(apply_strategies(*v, load32).ok());
  EXPECT_EQ(load32.kv_dtype, std::optional<DType>(DType::kF32));
  EXPECT_TRUE(load32.cuda.graphs);

  v = load_recipe(dir + "cuda-host-sampling.yaml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  LoadOptions loadh;
  ASSERT_TRUE(apply_strategies(*v, loadh).ok());
  EXPECT_FALSE(loadh.cuda.device_sampling);
  EXPECT_TRUE(loadh.cuda.graphs);
}

// ---- the engine core's strategies: kv_cache layout and batching ------------------------------

TEST(EngineCoreStrategiesTest, DefaultsAreContinuousBatchingOverAPagedCache) {
  auto r = parse_recipe(BASE, "r.yaml");
  ASSERT_TRUE(r.ok());
  const EngineCoreOptions o = engine_core_options(r->strategies, 1024);
  EXPECT_EQ(o.n_ctx, 1024);
  EXPECT_EQ(o.layout, kv::Layout::kPaged);
  EXPECT_EQ(o.block_size, 16);
  EXPECT_TRUE(o.prefix_caching);
  EXPECT_EQ(o.scheduler.policy, BatchingPolicy::kContinuous);
  EXPECT_EQ(o.scheduler.max_seqs, 16);
  EXPECT_EQ(o.scheduler.max_batched_tokens, 512);
  EXPECT_EQ(o.swap_blocks, 0);
}

TEST(EngineCoreStrategiesTest, EveryKeyReachesTheOptions) {
  auto r = parse_recipe(BASE
                        "strategies:\n"
                        "  kv_cache: {layout: paged, block_size: 32, prefix_caching: false}\n"
                        "  batching: {policy: static, max_seqs: 8, max_batched_tokens: 256,\n"
                        "             chunked_prefill: false, preemption: swap, watermark: 0.1,\n"
                        "             priority: true}\n",
                        "r.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  LoadOptions load;
  ASSERT_TRUE(apply_strategies(*r, load).ok());
  const EngineCoreOptions o = engine_core_options(r->strategies, 512);
  EXPECT_EQ(o.block_size, 32);
  EXPECT_FALSE(o.prefix_caching);
  EXPECT_EQ(o.scheduler.policy, BatchingPolicy::kStatic);
  EXPECT_EQ(o.scheduler.max_seqs, 8);
  EXPECT_EQ(o.scheduler.max_batched_tokens, 256);
  EXPECT_FALSE(o.scheduler.chunked_prefill);
  EXPECT_EQ(o.scheduler.preemption, PreemptionMode::kSwap);
  EXPECT_EQ(o.swap_blocks, -1);  // swap without swap_blocks: as many as the device pool
  EXPECT_DOUBLE_EQ(o.scheduler.watermark, 0.1);
  EXPECT_EQ(o.scheduler.order, QueueOrder::kPriority);
  EXPECT_NE(describe_strategies(r->strategies, r->device).find("batching static (8 seats"),
            std::string::npos);
  auto c = parse_recipe(BASE "strategies: {kv_cache: {layout: contiguous}}\n", "r.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(engine_core_options(c->strategies, 64).layout, kv::Layout::kContiguous);
  EXPECT_FALSE(engine_core_options(c->strategies, 64).prefix_caching);
}

TEST(EngineCoreStrategiesTest, ConflictsNameBothKeys) {
  auto fails = [](const std::string& text, const std::string& want) {
    auto r = parse_recipe(text, "r.yaml");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    LoadOptions load;
    const Status st = apply_strategies(*r, load);
    ASSERT_FALSE(st.ok()) << text;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  };
  fails(BASE "strategies: {batching: {max_seqs: 600}}\n",
        "strategies.batching.max_seqs: 600 seats need at least 600 tokens per step");
  fails(BASE "strategies: {kv_cache: {layout: contiguous, prefix_caching: true}}\n",
        "strategies.kv_cache.prefix_caching: true needs the paged layout");
  fails(BASE "strategies: {kv_cache: {layout: contiguous, prealloc: {policy: auto}}}\n",
        "strategies.kv_cache.prealloc.policy: auto sizes a pool of blocks");
  {
    auto r = parse_recipe(BASE "strategies: {kv_cache: {prealloc: {policy: auto}}}\n", "r.yaml");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->strategies.kv_prealloc, KvPrealloc::kAuto);
    EXPECT_EQ(engine_core_options(r->strategies, 64).prealloc, KvPrealloc::kAuto);
    auto typo = parse_recipe(BASE "strategies: {kv_cache: {prealloc: {polcy: auto}}}\n", "r.yaml");
    EXPECT_FALSE(typo.ok());
  }
  fails(BASE "strategies:\n  kv_cache: {layout: contiguous}\n  batching: {swap_blocks: 8}\n",
        "(conflicts with strategies.kv_cache.layout");
  auto bad = parse_recipe(BASE "strategies: {batching: {watermark: 0.9}}\n", "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("strategies.batching.watermark"), std::string::npos);
  auto policy = parse_recipe(BASE "strategies: {batching: {policy: dynamic}}\n", "r.yaml");
  ASSERT_FALSE(policy.ok());
  EXPECT_NE(policy.status().message().find("static"), std::string::npos);
}

#undef BASE

}  // namespace
}  // namespace rinfer
