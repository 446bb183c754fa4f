// The BERT sample on the GPU against sentence-transformers (PyTorch, f32): all 1,030 reference
// inputs through the embedding engine on cuda:0 with each batching policy, cos >= 0.999 (bf16
// GEMMs and attention); the CUDA runner's hidden states against the CPU runner's; its errors.
#include <gtest/gtest.h>

#include <vector>

#include "core/cuda_info.h"
#include "engine/embedder.h"
#include "models/encoder.h"
#include "models/minilm_reference.h"
#include "test_util.h"

namespace rinfer {
namespace {

constexpr const char* kModel = "all-minilm-l6-v2";

#define REQUIRE_GPU_AND_MODEL()                                      \
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device"; \
  if (!test::reference_model(kModel)) GTEST_SKIP() << test::missing_model_message(kModel)

TEST(BertCuda, PackedBatchesMatchAllThousandInputs) {
  REQUIRE_GPU_AND_MODEL();
  test::expect_minilm_matches("cuda:0", "{dynamic_batching: {policy: packed, max_seqs: 256}}",
                              100000, 0.999);
}

TEST(BertCuda, PaddedBatchesMatch) {
  REQUIRE_GPU_AND_MODEL();
  test::expect_minilm_matches("cuda:0", "{dynamic_batching: {policy: padded, max_seqs: 64}}",
                              100000, 0.999);
}

TEST(BertCuda, OneAtATimeMatches) {
  REQUIRE_GPU_AND_MODEL();
  test::expect_minilm_matches("cuda:0", "{dynamic_batching: {policy: single}}", 300, 0.999);
}

TEST(BertCuda, Int8WeightsStayClose) {
  REQUIRE_GPU_AND_MODEL();
  test::expect_minilm_matches(
      "cuda:0", "{quantization: {weights: q8_0}, dynamic_batching: {policy: packed}}", 300, 0.99);
}

// The last layer's hidden states of every row against the CPU runner (f32), and the policies
// against each other on the device.
TEST(BertCuda, HiddenStatesMatchTheCpuRunner) {
  REQUIRE_GPU_AND_MODEL();
  const std::string path = *test::reference_model(kModel);
  LoadOptions cpu_opts;
  LoadOptions gpu_opts;
  gpu_opts.device = Device::cuda(0);
  auto cpu_model = load_encoder_model(path, cpu_opts);
  auto gpu_model = load_encoder_model(path, gpu_opts);
  ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
  auto cpu_runner = (*cpu_model)->create_runner({2048});
  auto gpu_runner = (*gpu_model)->create_runner({2048});
  ASSERT_TRUE(cpu_runner.ok()) << cpu_runner.status().to_string();
  ASSERT_TRUE(gpu_runner.ok()) << gpu_runner.status().to_string();
  // Three sequences packed (lengths 9, 70, 130), token types on the second.
  std::vector<int32_t> tokens, types, starts{0}, lengths{9, 70, 130};
  for (int32_t len : lengths) {
    for (int32_t t = 0; t < len; ++t) {
      tokens.push_back(t == 0 ? 101 : t == len - 1 ? 102 : 1000 + (t * 97 + len) % 20000);
      types.push_back(len == 70 && t > 30 ? 1 : 0);
    }
    starts.push_back(static_cast<int32_t>(tokens.size()));
  }
  const EncoderBatch b{tokens, types, starts, lengths};
  std::vector<float> ref(tokens.size() * 384), got(ref.size());
  ASSERT_TRUE((*cpu_runner)->encode(b, ref.data()).ok());
  const Status s = (*gpu_runner)->encode(b, got.data());
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_LT(test::rel_l2(got, ref), 2e-2);
  for (size_t r = 0; r < tokens.size(); ++r) {
    EXPECT_GE(test::cosine(got.data() + r * 384, ref.data() + r * 384, 384), 0.999) << "row " << r;
  }
  // Pooled on the device = pooled on the host from the same runner's rows.
  std::vector<float> pooled(3 * 384), host_pooled(3 * 384);
  ASSERT_TRUE((*gpu_runner)->embed(b, PoolingOptions{}, pooled.data()).ok());
  cpu::pool_rows(cpu::PoolKind::kMean, true, got.data(), 384,
                 std::span<const int32_t>(starts).first(3), lengths, host_pooled.data());
  EXPECT_LT(test::rel_l2(pooled, host_pooled), 1e-6);
}

TEST(BertCuda, BadBatchesAreRefused) {
  REQUIRE_GPU_AND_MODEL();
  LoadOptions opts;
  opts.device = Device::cuda(0);
  auto m = load_encoder_model(*test::reference_model(kModel), opts);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto runner = (*m)->create_runner({600});
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  std::vector<float> out(384 * 2);
  const PoolingOptions pool;
  const std::vector<int32_t> toks{101, 7592, 102}, starts{0, 3}, lens{3};
  EXPECT_TRUE((*runner)->embed({toks, {}, starts, lens}, pool, out.data()).ok());
  const std::vector<int32_t> bad_tok{101, 40000, 102};
  EXPECT_NE(
      (*runner)->embed({bad_tok, {}, starts, lens}, pool, out.data()).message().find("vocabulary"),
      std::string::npos);
  std::vector<int32_t> too_many(601, 1000);
  const std::vector<int32_t> s601{0, 601}, l601{601};
  EXPECT_NE(
      (*runner)->embed({too_many, {}, s601, l601}, pool, out.data()).message().find("max_rows"),
      std::string::npos);
  // The runner still works after the refusals.
  EXPECT_TRUE((*runner)->embed({toks, {}, starts, lens}, pool, out.data()).ok());
}

}  // namespace
}  // namespace rinfer
