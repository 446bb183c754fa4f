// The BERT runners' taps (models/taps.h) on a tiny random checkpoint: a pass with taps gives the
// same vectors bit for bit, every layer's taps arrive with the batch's rows, the last block_out
// is the encoder's output and pooled its vectors, and the post-norms add up: mlp_norm(l) =
// LayerNorm1(attn_out(l) + block_out(l - 1)), block_out(l) = LayerNorm2(mlp_out(l) +
// mlp_norm(l)), recomputed here in double from the checkpoint's gains and biases. On a machine
// with a GPU the CUDA runner's taps match the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cuda_info.h"
#include "engine/layer_diff.h"
#include "models/bert/bert_model.h"
#include "models/encoder.h"
#include "test_util.h"
#include "tiny_bert.h"

namespace rinfer {
namespace {

struct Pass {
  std::vector<float> pooled, hidden;
  TapRecorder taps;
};

// Two sequences packed (7 and 5 rows), then a padded slot of 3 rows holding 2 tokens.
struct Batch {
  std::vector<int32_t> tokens, starts = {0, 7, 12, 15}, lengths = {7, 5, 2};
  Batch() {
    std::mt19937 rng(3);
    for (int i = 0; i < 15; ++i) tokens.push_back(5 + static_cast<int32_t>(rng() % 995));
  }
  EncoderBatch view(TapSink* taps) const { return {tokens, {}, starts, lengths, nullptr, taps}; }
};

void run(const EncoderModel& m, Pass& r, bool tapped) {
  auto runner = m.create_runner({});
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  const Batch b;
  const int64_t e = m.hparams().n_embd;
  r.pooled.resize(static_cast<size_t>(3 * e));
  r.hidden.resize(static_cast<size_t>(15 * e));
  ASSERT_TRUE((*runner)->embed(b.view(tapped ? &r.taps : nullptr), {}, r.pooled.data()).ok());
  ASSERT_TRUE((*runner)->encode(b.view(nullptr), r.hidden.data()).ok());
}

std::unique_ptr<EncoderModel> load(const std::string& dir, Device device) {
  LoadOptions lo;
  lo.device = device;
  auto m = load_encoder_model(dir, lo);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// LayerNorm(a + b) of each row, in double.
std::vector<double> norm_of_sum(const std::vector<float>& a, const std::vector<float>& b,
                                const Tensor& g, const Tensor& beta, int64_t e, double eps) {
  std::vector<double> out(a.size());
  const float* gv = g.data_as<float>();
  const float* bv = beta.data_as<float>();
  for (size_t r = 0; r * static_cast<size_t>(e) < a.size(); ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < e; ++i) mean += double{a[r * e + i]} + b[r * e + i];
    mean /= static_cast<double>(e);
    for (int64_t i = 0; i < e; ++i) {
      const double d = double{a[r * e + i]} + b[r * e + i] - mean;
      var += d * d;
    }
    var /= static_cast<double>(e);
    for (int64_t i = 0; i < e; ++i) {
      const double x = (double{a[r * e + i]} + b[r * e + i] - mean) / std::sqrt(var + eps);
      out[r * e + i] = x * gv[i] + bv[i];
    }
  }
  return out;
}

TEST(BertTaps, SameVectorsEveryLayerAndTheNormsAddUp) {
  const std::string dir = test::write_tiny_bert("bert_taps");
  auto m = load(dir, Device::cpu());
  ASSERT_TRUE(m);
  const EncoderHParams& hp = m->hparams();
  const int64_t e = hp.n_embd;
  Pass plain, tapped;
  run(*m, plain, false);
  run(*m, tapped, true);
  ASSERT_TRUE(tapped.taps.status().ok());
  EXPECT_EQ(plain.pooled, tapped.pooled);  // bit for bit
  EXPECT_TRUE(plain.taps.streams().empty());

  ASSERT_EQ(tapped.taps.streams().size(), static_cast<size_t>(2 + 4 * hp.n_layer));
  for (const auto& [key, s] : tapped.taps.streams()) {
    EXPECT_EQ(s.width, e) << tap_label(s.kind, s.layer);
    EXPECT_EQ(s.rows(), s.kind == TapKind::kPooled ? 3 : 15) << tap_label(s.kind, s.layer);
  }
  const auto* pooled = tapped.taps.find(TapKind::kPooled, static_cast<int32_t>(hp.n_layer));
  ASSERT_NE(pooled, nullptr);
  EXPECT_EQ(pooled->values, plain.pooled);
  const auto* last = tapped.taps.find(TapKind::kBlockOut, static_cast<int32_t>(hp.n_layer - 1));
  ASSERT_NE(last, nullptr);
  // The encoder's output, the padding row (14) aside.
  EXPECT_TRUE(
      std::equal(plain.hidden.begin(), plain.hidden.begin() + 14 * e, last->values.begin()));

  const auto& w = dynamic_cast<const bert::BertModel&>(*m).weights();
  const TapRecorder::Stream* before = tapped.taps.find(TapKind::kEmbed, -1);
  ASSERT_NE(before, nullptr);
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const auto* attn = tapped.taps.find(TapKind::kAttnOut, l);
    const auto* mn = tapped.taps.find(TapKind::kMlpNorm, l);
    const auto* mlp = tapped.taps.find(TapKind::kMlpOut, l);
    const auto* out = tapped.taps.find(TapKind::kBlockOut, l);
    ASSERT_TRUE(attn && mn && mlp && out) << "layer " << l;
    const auto& lw = w.layers[static_cast<size_t>(l)];
    const auto want_mn = norm_of_sum(attn->values, before->values, lw.ln1_g, lw.ln1_b, e, 1e-12);
    const auto want_out = norm_of_sum(mlp->values, mn->values, lw.ln2_g, lw.ln2_b, e, 1e-12);
    double worst = 0;
    for (size_t i = 0; i < 14 * static_cast<size_t>(e); ++i) {
      worst = std::max(worst, std::fabs(want_mn[i] - mn->values[i]));
      worst = std::max(worst, std::fabs(want_out[i] - out->values[i]));
    }
    EXPECT_LT(worst, 1e-4) << "layer " << l;
    before = out;
  }
}

// The CUDA runner taps the same places: every tap within bf16's reach of the CPU's.
TEST(BertTaps, CudaTapsMatchTheCpu) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  const std::string dir = test::write_tiny_bert("bert_taps_cuda");
  auto cpu = load(dir, Device::cpu());
  auto gpu = load(dir, Device::cuda(0));
  ASSERT_TRUE(cpu && gpu);
  Pass a, b;
  run(*cpu, a, true);
  run(*gpu, b, true);
  ASSERT_EQ(b.taps.streams().size(), a.taps.streams().size());
  for (const auto& [key, s] : a.taps.streams()) {
    const TapRecorder::Stream* g = b.taps.find(s.kind, s.layer);
    ASSERT_NE(g, nullptr) << tap_label(s.kind, s.layer);
    ASSERT_EQ(g->values.size(), s.values.size()) << tap_label(s.kind, s.layer);
    // The padding row (14) is unspecified: the 14 token rows of each row tap.
    const size_t n =
        s.kind == TapKind::kPooled ? s.values.size() : 14 * static_cast<size_t>(s.width);
    const std::vector<float> want(s.values.begin(), s.values.begin() + n);
    const std::vector<float> got(g->values.begin(), g->values.begin() + n);
    const double err = test::rel_l2(got, want);
    std::printf("%-20s rel L2 %.3g\n", tap_label(s.kind, s.layer).c_str(), err);
    EXPECT_LT(err, 2e-2) << tap_label(s.kind, s.layer);
  }
}

}  // namespace
}  // namespace rinfer
