// Recipes that name a base: mappings merge, scalars and lists replace, relative paths stay each
// file's own, errors name the file and the chain, conflicts name where each key was set
// (fixtures under tests/data/recipes/base).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/strategy_options.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

// ---- base inheritance -----------------------------------------------------------------------

std::string fixture(const std::string& name) {
  return test::test_data_path("recipes/base/" + name);
}

TEST(RecipeBaseTest, MappingsMergeScalarsAndListsReplace) {
  auto r = load_recipe(fixture("child.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->chain, (std::vector<std::string>{fixture("parent.yaml"), fixture("child.yaml")}));
  EXPECT_EQ(r->model, "smollm2-135m-instruct-q4_1");
  EXPECT_EQ(r->context_length, 1024);
  EXPECT_FALSE(r->strategies.kv_cache);                // child
  EXPECT_EQ(r->strategies.kernels, cpu::Impl::kFast);  // parent
  EXPECT_EQ(r->strategies.threads, 2);                 // parent
  EXPECT_EQ(r->sampling.top_k, 10);                    // child
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.2f);      // parent, same mapping
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_TRUE(r->seed_set);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"STOP"}));  // the list replaced, not appended
  EXPECT_EQ(r->bench.prompt_tokens, 256);
  EXPECT_EQ(r->bench.gen_tokens, 64);
  EXPECT_EQ(r->bench.repeat, 3);
  EXPECT_EQ(r->bench.warmup, 1);
  EXPECT_EQ(r->bench.prompts, fixture("prompts.txt"));  // relative to parent.yaml
  EXPECT_DOUBLE_EQ(r->precision.min_top1.value_or(-1), 0.9);
  EXPECT_DOUBLE_EQ(r->precision.max_mean_kl.value_or(-1), 0.05);
  EXPECT_FALSE(r->precision.max_ppl_change.has_value());
  // Origins point into the file that wrote each key.
  EXPECT_EQ(r->origins().where("strategies.kv_cache.enabled"), fixture("child.yaml") + ":4:23");
  EXPECT_EQ(r->origins().where("strategies.threads.count"), fixture("parent.yaml") + ":9:20");
  EXPECT_EQ(r->origins().where("strategies.fusion.qkv"), fixture("child.yaml"));  // a default
}

TEST(RecipeBaseTest, ChainsAcrossFoldersKeepEachFilesRelativePaths) {
  auto r = load_recipe(fixture("sub/grandchild.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->chain.size(), 3u);
  EXPECT_EQ(r->chain[0], fixture("parent.yaml"));
  EXPECT_EQ(r->chain[1], fixture("child.yaml"));
  EXPECT_EQ(r->model_ref, fixture("sub/local.gguf"));
  EXPECT_FALSE(r->strategies.kv_cache);  // from child
  EXPECT_EQ(r->strategies.threads, 1);
  EXPECT_EQ(r->strategies.quantization.activations, ActivationFormat::kFloat);
  EXPECT_EQ(r->sampling.top_k, 10);
  EXPECT_DOUBLE_EQ(r->precision.min_top1.value_or(-1), 0.9);
  EXPECT_DOUBLE_EQ(r->precision.max_ppl_change.value_or(-1), 0.02);
  EXPECT_EQ(r->bench.prompts, fixture("prompts.txt"));
}

struct BaseError {
  const char* file;
  const char* expected;
};

class RecipeBaseErrorTest : public ::testing::TestWithParam<BaseError> {};

TEST_P(RecipeBaseErrorTest, NamesTheFileAndTheChain) {
  auto r = load_recipe(fixture(GetParam().file));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  std::string expected = GetParam().expected;
  const std::string dir = fixture("");
  for (size_t p = expected.find('@'); p != std::string::npos; p = expected.find('@', p)) {
    expected.replace(p, 1, dir);
    p += dir.size();
  }
  EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RecipeBaseErrorTest,
    ::testing::Values(
        BaseError{"cycle_a.yaml",
                  "@cycle_b.yaml:1:7: base: cycle: @cycle_a.yaml -> @cycle_b.yaml -> "
                  "@cycle_a.yaml"},
        BaseError{"self_cycle.yaml",
                  "@self_cycle.yaml:1:7: base: cycle: @self_cycle.yaml -> @self_cycle.yaml"},
        BaseError{"missing_base.yaml",
                  "@missing_base.yaml:1:7: base: @no_such_recipe.yaml not found (a path "
                  "relative to this recipe; chain: @missing_base.yaml -> @no_such_recipe.yaml)"},
        BaseError{"child_of_bad.yaml",
                  "@bad_base.yaml:4:23: strategies.kv_cache.enabled: expected true or false, got "
                  "maybe"},
        BaseError{"no_model_child.yaml",
                  "@no_model_child.yaml: model: missing (required; not set by this recipe or its "
                  "bases)"}));

TEST(RecipeBaseTest, ConflictAcrossFilesNamesWhereEachKeyWasSet) {
  auto r = load_recipe(fixture("cuda_graphs_child.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  LoadOptions load;
  Status st = apply_strategies(*r, load);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), fixture("cuda_graphs_child.yaml") +
                              ":5:26: strategies.cuda_graphs.enabled: true needs the KV cache: a "
                              "graph replays a decode step of one token, but without the cache "
                              "every step recomputes a growing sequence (conflicts with "
                              "strategies.kv_cache.enabled: set at " +
                              fixture("cpu_no_cache.yaml") + ":4:23)");
}

}  // namespace
}  // namespace rinfer
