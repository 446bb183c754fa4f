// FP8 checkpoints through the Hugging Face loader (issue 41): F8_E4M3 layer matrices with their
// weight_scale, as compressed-tensors writes them (tests/models/tiny_fp8_checkpoint.h). On the
// CPU, which has no FP8 kernels, they must load as their dequantized values (code * scale) in
// bf16, or in the recipe's format; bad checkpoints give errors naming the tensor or key.
#include <gtest/gtest.h>

#include "core_logits.h"
#include "models/llama/llama_model.h"
#include "models/model.h"
#include "tiny_fp8_checkpoint.h"

namespace rinfer {
namespace {

using test::TinySpec;

const std::vector<int32_t> kIds = {1, 17, 299, 42, 0, 150, 7, 88};

TinySpec tiny(uint64_t seed) {
  TinySpec s;
  s.seed = seed;
  return s;
}

std::vector<float> logits_of(const std::string& path, std::optional<DType> format = {}) {
  LoadOptions opts;
  opts.weight_format = format;
  auto m = load_decoder_model(path, opts);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  return test::core_logits(**m, kIds);
}

struct Layout {
  const char* name;
  test::Fp8Layout layout;
};

class HfFp8Cpu : public ::testing::TestWithParam<Layout> {};

// The FP8 checkpoint gives the logits of its dequantized weights converted to bf16 (the CPU's
// default for it) or to q8_0 when the recipe asks, bit for bit; and not those of the weights
// before quantization (the codes are what was read).
TEST_P(HfFp8Cpu, LoadsAsItsDequantizedWeights) {
  const TinySpec s = tiny(31);
  const test::TinyWeights w = test::make_tiny_weights(s, false);
  const test::Fp8Checkpoint c =
      test::write_fp8_model(std::string("fp8_") + GetParam().name, s, w, GetParam().layout);
  const std::string ref = test::write_hf_model(std::string("fp8_ref_") + GetParam().name,
                                               c.dequantized, test::tiny_config(s), false);
  const std::string orig = test::write_hf_model(std::string("fp8_orig_") + GetParam().name, w,
                                                test::tiny_config(s), false);

  const std::vector<float> got = logits_of(c.dir);
  ASSERT_EQ(got.size(), kIds.size() * static_cast<size_t>(s.n_vocab));
  EXPECT_EQ(test::rel_l2(got, logits_of(ref, DType::kBF16)), 0.0);
  EXPECT_GT(test::rel_l2(got, logits_of(orig, DType::kBF16)), 1e-4);
  EXPECT_EQ(test::rel_l2(logits_of(c.dir, DType::kQ8_0), logits_of(ref, DType::kQ8_0)), 0.0);
  const auto [lo, hi] = std::minmax_element(got.begin(), got.end());
  EXPECT_GT(*hi - *lo, 1.0f);

  auto m = llama::LlamaModel::load_hf(c.dir, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (const llama::LayerWeights& l : (*m)->layers()) {
    for (const llama::LayerMatrix& lm : llama::kLayerMatrices) {
      EXPECT_EQ((l.*lm.w).dtype(), DType::kBF16) << lm.name;
      EXPECT_FALSE((l.scales.*lm.scale).defined()) << lm.name;
    }
  }
  EXPECT_EQ((*m)->tok_embd().dtype(), DType::kF32);  // not quantized in the checkpoint
}

INSTANTIATE_TEST_SUITE_P(Layouts, HfFp8Cpu,
                         ::testing::Values(Layout{"per_channel", {}},
                                           Layout{"per_tensor",
                                                  {.per_tensor = true, .input_scales = false}},
                                           Layout{"bf16_scales", {.bf16_scales = true}}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- errors -----------------------------------------------------------------------------------

class HfFp8Errors : public ::testing::Test {
 protected:
  std::string load_error() {
    nlohmann::json cfg = test::tiny_config(s_);
    cfg["quantization_config"] = q_;
    const std::string dir = test::write_raw_hf_model("fp8_error", t_, cfg);
    auto m = load_model(dir, LoadOptions{});
    return m.ok() ? std::string("loaded") : m.status().message();
  }

  TinySpec s_ = tiny(32);
  test::TinyWeights deq_;
  std::map<std::string, test::RawTensor> t_ =
      test::fp8_tensors(test::make_tiny_weights(s_, false), {}, &deq_);
  nlohmann::json q_ = test::fp8_quantization_config();
  const std::string up_ = "model.layers.1.mlp.up_proj.weight";
};

TEST_F(HfFp8Errors, TheCheckpointLoadsAsWritten) { EXPECT_EQ(load_error(), "loaded"); }

TEST_F(HfFp8Errors, MissingScaleIsNamed) {
  t_.erase(up_ + "_scale");
  const std::string msg = load_error();
  EXPECT_NE(msg.find("tensor '" + up_ + "' holds F8_E4M3 codes but '" + up_ + "_scale' is missing"),
            std::string::npos)
      << msg;
}

TEST_F(HfFp8Errors, BlockScalesAreRefusedByName) {
  t_[up_ + "_scale_inv"] = t_.at(up_ + "_scale");
  const std::string msg = load_error();
  EXPECT_NE(msg.find("'" + up_ + "_scale_inv'): block-wise FP8"), std::string::npos) << msg;

  t_.erase(up_ + "_scale_inv");
  q_ = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  const std::string cfg_msg = load_error();
  EXPECT_NE(cfg_msg.find("FP8 scaled by blocks (weight_block_size [128,128])"), std::string::npos)
      << cfg_msg;
}

TEST_F(HfFp8Errors, ScaleOfAnotherShapeIsNamed) {
  t_[up_ + "_scale"].shape = {48, 2};
  const std::string msg = load_error();
  EXPECT_NE(msg.find("'" + up_ +
                     "_scale' has shape [48, 2]: a scale per tensor ([] or [1]) or per "
                     "output channel ([96] or [96, 1])"),
            std::string::npos)
      << msg;
}

TEST_F(HfFp8Errors, ZeroOrNonFiniteScaleIsNamedWithItsRow) {
  std::string& b = t_[up_ + "_scale"].bytes;
  const float zero = 0.0f;
  std::memcpy(b.data() + 5 * 4, &zero, 4);
  const std::string msg = load_error();
  EXPECT_NE(msg.find("'" + up_ + "_scale' holds 0 at row 5 (a scale must be positive and finite)"),
            std::string::npos)
      << msg;
  const float nan = std::nanf("");
  std::memcpy(b.data() + 7 * 4, &nan, 4);
  std::memcpy(b.data() + 5 * 4, &b[0], 4);
  const std::string nan_msg = load_error();
  EXPECT_NE(nan_msg.find("holds nan at row 7"), std::string::npos) << nan_msg;
}

TEST_F(HfFp8Errors, NanCodeIsNamedWithItsRow) {
  t_[up_].bytes[3 * 64 + 9] = static_cast<char>(0xff);  // S.1111.111: the E4M3 NaN
  const std::string msg = load_error();
  EXPECT_NE(msg.find("layer 1 up: row 3 holds the f8_e4m3 NaN code 0xff at column 9"),
            std::string::npos)
      << msg;
}

TEST_F(HfFp8Errors, E5M2CodesAreRefused) {
  t_[up_].dtype = "F8_E5M2";
  const std::string msg = load_error();
  EXPECT_NE(msg.find("tensor '" + up_ + "' holds F8_E5M2 codes"), std::string::npos) << msg;
}

TEST_F(HfFp8Errors, ScaleBesideAFloatMatrixIsUnused) {
  const std::string gate = "model.layers.0.mlp.gate_proj.weight";
  t_[gate] = test::RawTensor{"F32", {96, 64}, test::f32_bytes(deq_.at(gate).values)};
  t_.erase("model.layers.0.mlp.gate_proj.input_scale");
  const std::string msg = load_error();
  EXPECT_NE(msg.find("tensor '" + gate + "_scale' [96, 1] is not used"), std::string::npos) << msg;
}

TEST_F(HfFp8Errors, OtherQuantizationMethodsAreNamed) {
  q_ = {{"quant_method", "gptq"}, {"bits", 4}};
  const std::string msg = load_error();
  EXPECT_NE(msg.find("quantization_config.quant_method 'gptq' is not supported"), std::string::npos)
      << msg;
  q_ = test::fp8_quantization_config();
  q_["format"] = "int-quantized";
  const std::string int_msg = load_error();
  EXPECT_NE(int_msg.find("compressed-tensors format 'int-quantized' is not supported"),
            std::string::npos)
      << int_msg;
}

}  // namespace
}  // namespace rinfer
