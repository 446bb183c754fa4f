// The CPU runner's taps (models/taps.h): a pass with taps gives the same logits bit for bit, every
// layer's taps arrive with the pass's rows, the logits tap is the logits, block_out is the
// observer's residual stream, and the residual adds up: block_out(l) = block_out(l - 1) +
// attn_out(l) + mlp_out(l).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core_logits.h"
#include "engine/layer_diff.h"
#include "models/llama/llama_model.h"
#include "models/model.h"
#include "test_util.h"

namespace rinfer {
namespace {

TEST(LlamaTaps, SameLogitsEveryLayerAndTheResidualAddsUp) {
  auto m = load_decoder_model(test::test_data_path("llama/tiny_llama.gguf"), LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto* lm = dynamic_cast<llama::LlamaModel*>(m->get());
  ASSERT_NE(lm, nullptr);
  const DecoderHParams& hp = (*m)->hparams();
  const std::vector<int32_t> ids = {5, 17, 42, 8, 9, 23, 11};
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<int32_t> pos(ids.size()), rows(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::iota(rows.begin(), rows.end(), 0);

  std::vector<float> plain(static_cast<size_t>(n * hp.n_vocab)), tapped(plain.size());
  auto a = test::OneSequence::make(**m, 32);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a.forward(ids, pos, rows, plain.data()).ok());

  std::vector<std::vector<float>> observed(static_cast<size_t>(hp.n_layer));
  lm->set_layer_observer([&](int64_t layer, int64_t, const float* x, int64_t nt, int64_t e) {
    if (layer >= 0) observed[static_cast<size_t>(layer)].assign(x, x + nt * e);
  });
  TapRecorder rec;
  auto b = test::OneSequence::make(**m, 32);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b.forward(ids, pos, rows, tapped.data(), nullptr, &rec).ok());
  lm->set_layer_observer({});
  ASSERT_TRUE(rec.status().ok());
  EXPECT_EQ(plain, tapped);  // bit for bit

  ASSERT_EQ(rec.streams().size(), static_cast<size_t>(2 + 5 * hp.n_layer));
  for (const auto& [key, s] : rec.streams()) {
    EXPECT_EQ(s.rows(), n) << tap_label(s.kind, s.layer);
    EXPECT_EQ(s.width, s.kind == TapKind::kLogits ? hp.n_vocab : hp.n_embd);
  }
  const auto* logits = rec.find(TapKind::kLogits, static_cast<int32_t>(hp.n_layer));
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->values, plain);

  const TapRecorder::Stream* before = rec.find(TapKind::kEmbed, -1);
  ASSERT_NE(before, nullptr);
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const auto* attn = rec.find(TapKind::kAttnOut, l);
    const auto* mlp = rec.find(TapKind::kMlpOut, l);
    const auto* out = rec.find(TapKind::kBlockOut, l);
    ASSERT_TRUE(attn && mlp && out && rec.find(TapKind::kAttnNorm, l) &&
                rec.find(TapKind::kMlpNorm, l));
    EXPECT_EQ(out->values, observed[static_cast<size_t>(l)]) << "layer " << l;
    double err = 0, norm = 0;
    for (size_t i = 0; i < out->values.size(); ++i) {
      const double sum = static_cast<double>(before->values[i]) + attn->values[i] + mlp->values[i];
      err = std::max(err, std::fabs(sum - out->values[i]));
      norm = std::max(norm, std::fabs(static_cast<double>(out->values[i])));
    }
    EXPECT_LT(err, 1e-5 * std::max(1.0, norm)) << "layer " << l;
    EXPECT_GT(norm, 0.0);
    before = out;
  }
  // The norm taps are normalized rows: mean square about 1 before the weights. Their scale is the
  // weights'; here it is enough that they are finite and not the block outputs.
  const auto* norm0 = rec.find(TapKind::kAttnNorm, 0);
  for (float v : norm0->values) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(norm0->values, rec.find(TapKind::kAttnOut, 0)->values);
}

}  // namespace
}  // namespace rinfer
