// Precision against a baseline (engine/precision.h): teacher-forced logits equal those of the
// same prefix run alone, perplexity and the gate by hand, and the tiny synthetic model against
// itself (exact) and against its own q8_0-activation run (close, not equal).
#include "engine/precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "logits_hook.h"
#include "models/model.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer {
namespace {

struct Loaded {
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<EngineCore> core;  // one seat, 64 positions
};

Loaded load_tiny(ThreadPool& pool, bool quantize_activations, int64_t max_batch = 512,
                 int64_t seats = 1) {
  LoadOptions opts;
  opts.cpu.ops.impl = cpu::Impl::kFast;
  opts.cpu.ops.pool = &pool;
  opts.cpu.ops.quantize_activations = quantize_activations;
  opts.max_batch = max_batch;
  auto m = load_decoder_model(test::test_data_path("llama/tiny_llama.gguf"), opts);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  Loaded l{std::move(m).value(), nullptr};
  EngineCoreOptions o;
  o.n_ctx = 64;
  o.scheduler.max_seqs = seats;
  o.scheduler.max_batched_tokens = max_batch;
  auto c = EngineCore::create(*l.model, o, nullptr);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c.ok()) l.core = std::move(c).value();
  return l;
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 5) % 96);
  return t;
}

TEST(Precision, TeacherForcedRowsMatchPrefixRuns) {
  ThreadPool pool(2);
  Loaded l = load_tiny(pool, false, /*max_batch=*/7);  // passes of 7 rows at most
  ASSERT_TRUE(l.core);
  const auto toks = some_tokens(20);
  const int64_t n_vocab = l.model->hparams().n_vocab;
  auto all = teacher_forced_logits(*l.core, toks, 5);
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->size(), static_cast<size_t>(20 * n_vocab));
  EXPECT_EQ(l.core->stats().steps, 4);  // passes of 5
  EXPECT_EQ(l.core->stats().kv.used_blocks, 0) << "the sequence's blocks go back";
  for (int k : {0, 6, 13, 19}) {
    // The prefix tokens[0..k] alone, last row only.
    const std::vector<int32_t> prefix(toks.begin(), toks.begin() + k + 1);
    auto one = teacher_forced_logits(*l.core, prefix);
    ASSERT_TRUE(one.ok());
    const std::vector<float> want(one->end() - n_vocab, one->end());
    const std::vector<float> got(all->begin() + k * n_vocab, all->begin() + (k + 1) * n_vocab);
    EXPECT_LT(test::rel_l2(got, want), 1e-5) << "row " << k;
  }
}

TEST(Precision, PerplexityAndGateByHand) {
  // Two positions, vocabulary 2. Row 0: logits (0, 0), next token 1: p = 1/2. Row 1 is not
  // scored (no next token). ppl = exp(log 2) = 2.
  const std::vector<int32_t> toks = {0, 1};
  const std::vector<float> base = {0.0f, 0.0f, 1.0f, 0.0f};
  EXPECT_NEAR(perplexity_of_logits(base, toks, 2), 2.0, 1e-12);
  // Variant row 0: (0, ln 3): p(1) = 3/4, ppl = 4/3, change = 4/3 / 2 - 1 = -1/3; its argmax
  // is 1 (the baseline's tie goes to the lowest id, 0). Row 1 flips the argmax too: top-1
  // agreement 0.
  const std::vector<float> var = {0.0f, std::log(3.0f), 0.0f, 1.0f};
  PrecisionThresholds gate;  // defaults: 0.95, 0.05, 0.02
  PrecisionReport r = compare_precision(base, var, toks, 2, gate);
  EXPECT_EQ(r.positions, 2);
  EXPECT_NEAR(r.ppl_baseline, 2.0, 1e-9);
  EXPECT_NEAR(r.ppl_variant, 4.0 / 3.0, 1e-6);
  EXPECT_NEAR(r.ppl_change, -1.0 / 3.0, 1e-6);
  EXPECT_DOUBLE_EQ(r.logits.top1_agreement, 0.0);
  // KL row 0: p = (1/2, 1/2), q = (1/4, 3/4): 1/2 ln 2 + 1/2 ln(2/3).
  const double kl0 = 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0);
  const double a = 1.0 / (1.0 + std::exp(-1.0));  // softmax(1, 0)[0]
  const double kl1 = a * std::log(a / (1 - a)) + (1 - a) * std::log((1 - a) / a);
  EXPECT_NEAR(r.logits.mean_kl, 0.5 * (kl0 + kl1), 1e-6);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.failures.find("top-1 0.0000 < 0.95"), std::string::npos) << r.failures;
  EXPECT_NE(r.failures.find("mean KL"), std::string::npos) << r.failures;
  // The perplexity bound is one-sided: this variant's drop of a third passes it.
  EXPECT_EQ(r.failures.find("ppl change"), std::string::npos) << r.failures;
  // The other way round (the baseline as the variant) it is a rise of half: it fails.
  PrecisionReport up = compare_precision(var, base, toks, 2, gate);
  EXPECT_NEAR(up.ppl_change, 0.5, 1e-6);
  EXPECT_NE(up.failures.find("ppl change +50.00% above +2%"), std::string::npos) << up.failures;

  // Only the checks a recipe sets are applied.
  PrecisionThresholds loose;
  loose.min_top1 = 0.0;
  loose.max_mean_kl.reset();
  loose.max_ppl_change = 0.5;
  apply_gate(r, loose);
  EXPECT_TRUE(r.passed) << r.failures;
  EXPECT_EQ(loose.to_string(), "top-1 >= 0, ppl change <= +50%");
  EXPECT_EQ(PrecisionThresholds{}.to_string(),
            "top-1 >= 0.95, mean KL <= 0.05, ppl change <= +2%");

  // NaN fails every check.
  PrecisionReport nan;
  nan.logits.top1_agreement = std::nan("");
  nan.logits.mean_kl = std::nan("");
  nan.ppl_change = std::nan("");
  apply_gate(nan, gate);
  EXPECT_FALSE(nan.passed);
}

// docs/recipes.md's rule, case by case: no section keeps the three defaults; a bound a recipe
// sets replaces that bound alone; a variant inherits its base's bounds and overrides them key
// by key; every bound set replaces every default.
TEST(Precision, RecipeGateRuleCaseByCase) {
  const std::string head = "model: m.gguf\ndevice: cpu\nscenario: llm-chat\n";
  auto gate = [&](const std::string& text) {
    auto r = parse_recipe(head + text, "gate.yaml");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? gate_of_recipe(r->precision) : PrecisionThresholds{};
  };
  const PrecisionThresholds none = gate("");
  EXPECT_EQ(none.to_string(), "top-1 >= 0.95, mean KL <= 0.05, ppl change <= +2%");
  EXPECT_EQ(gate("precision: {min_top1: 0.5}\n").to_string(),
            "top-1 >= 0.5, mean KL <= 0.05, ppl change <= +2%");
  EXPECT_EQ(gate("precision: {max_ppl_change: 0.1}\n").to_string(),
            "top-1 >= 0.95, mean KL <= 0.05, ppl change <= +10%");
  EXPECT_EQ(gate("precision: {min_top1: 0.9, max_mean_kl: 0.01, max_ppl_change: 0.005}\n")
                .to_string(),
            "top-1 >= 0.9, mean KL <= 0.01, ppl change <= +0.5%");
  const std::string base = test::write_temp_file(
      "gate_base.yaml", head + "precision: {min_top1: 0.8, max_mean_kl: 0.2}\n");
  auto variant = parse_recipe(
      "base: " + base + "\nprecision: {max_mean_kl: 0.3}\n",
      (std::filesystem::path(base).parent_path() / "variant.yaml").string());
  ASSERT_TRUE(variant.ok()) << variant.status().message();
  EXPECT_EQ(gate_of_recipe(variant->precision).to_string(),
            "top-1 >= 0.8, mean KL <= 0.3, ppl change <= +2%");
  // A bound's loosest value lets every variant pass it.
  PrecisionReport r;
  r.logits.top1_agreement = 0.0;
  r.logits.mean_kl = 0.01;
  r.ppl_change = 0.01;
  apply_gate(r, gate("precision: {min_top1: 0}\n"));
  EXPECT_TRUE(r.passed) << r.failures;
  apply_gate(r, none);
  EXPECT_FALSE(r.passed);
}

TEST(Precision, TinyModelAgainstItselfAndInt8Activations) {
  ThreadPool pool(2);
  Loaded exact = load_tiny(pool, false);
  Loaded q8 = load_tiny(pool, true);
  ASSERT_TRUE(exact.core && q8.core);
  const auto toks = some_tokens(48);
  const int64_t n_vocab = exact.model->hparams().n_vocab;
  auto a = teacher_forced_logits(*exact.core, toks);
  auto b = teacher_forced_logits(*exact.core, toks);
  auto c = teacher_forced_logits(*q8.core, toks);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const PrecisionReport same = compare_precision(*a, *b, toks, n_vocab, {});
  EXPECT_TRUE(same.passed) << same.failures;
  EXPECT_DOUBLE_EQ(same.logits.top1_agreement, 1.0);
  EXPECT_NEAR(same.logits.mean_kl, 0.0, 1e-12);
  EXPECT_NEAR(same.ppl_change, 0.0, 1e-12);
  EXPECT_GT(same.ppl_baseline, 1.0);
  const PrecisionReport close = compare_precision(*a, *c, toks, n_vocab, {});
  EXPECT_GT(close.logits.mean_kl, 0.0);  // int8 activations change the logits a little
  EXPECT_LT(close.logits.mean_kl, 0.05);
  EXPECT_GT(close.logits.rel_l2, 0.0);
  EXPECT_LT(std::fabs(close.ppl_change), 0.05);
}

TEST(Precision, Errors) {
  ThreadPool pool(1);
  Loaded l = load_tiny(pool, false);
  ASSERT_TRUE(l.core);
  auto empty = teacher_forced_logits(*l.core, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  const auto long_seq = some_tokens(65);  // the context holds 64
  auto too_long = teacher_forced_logits(*l.core, long_seq);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("65 tokens"), std::string::npos)
      << too_long.status().message();
  std::vector<int32_t> bad = some_tokens(10);
  bad[7] = 100000;
  auto outside = teacher_forced_logits(*l.core, bad);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("token 100000 (at 7)"), std::string::npos)
      << outside.status().message();
}

// A model whose decode steps of at least `min_seqs` sequences (every sequence one new token) add
// `bias` to token `at` of each logits row: a fault that only the decode path has, as a broken
// decode kernel or graph would be. Prefill and teacher-forced passes are untouched.
class DecodeFault final : public test::LogitsHook {
 public:
  DecodeFault(const DecoderModel& m, int64_t min_seqs, float bias, int32_t at)
      : LogitsHook(m), min_seqs_(min_seqs), bias_(bias), at_(at) {}
  mutable int64_t faulty_passes = 0;

 private:
  void after_forward(const ForwardBatch& b, float* logits) const override {
    if (b.n_seq() < min_seqs_ || b.n_tokens() != b.n_seq()) return;
    ++faulty_passes;
    for (size_t r = 0; r < b.logit_rows.size(); ++r) {
      logits[static_cast<int64_t>(r) * hparams().n_vocab + at_] += bias_;
    }
  }
  int64_t min_seqs_;
  float bias_;
  int32_t at_;
};

std::unique_ptr<EngineCore> core_of(const DecoderModel& m, int64_t seats) {
  EngineCoreOptions o;
  o.n_ctx = 64;
  o.block_size = 4;
  o.scheduler.max_seqs = seats;
  auto c = EngineCore::create(m, o, nullptr);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

// The decode steps' logits (1 and 3 seats, every seat) equal the teacher-forced rows of the same
// positions, and the decode gate passes the model against itself with its numbers.
TEST(Precision, DecodeStepsMatchTeacherForcing) {
  ThreadPool pool(2);
  Loaded l = load_tiny(pool, false, 512, /*seats=*/3);
  ASSERT_TRUE(l.core);
  const auto toks = some_tokens(29);
  const int64_t n_vocab = l.model->hparams().n_vocab;
  auto ref = teacher_forced_logits(*l.core, toks);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  const int64_t prefill = 17, rows = 29 - prefill + 1;
  for (int64_t seats : {1, 3}) {
    auto d = decode_forced_logits(*l.core, toks, prefill, seats);
    ASSERT_TRUE(d.ok()) << d.status().message();
    ASSERT_EQ(d->size(), static_cast<size_t>(seats * rows * n_vocab));
    for (int64_t s = 0; s < seats; ++s) {
      for (int64_t k = 0; k < rows; ++k) {
        const auto* got = d->data() + (s * rows + k) * n_vocab;
        const auto* want = ref->data() + (prefill - 1 + k) * n_vocab;
        EXPECT_LT(test::rel_l2(std::vector<float>(got, got + n_vocab),
                               std::vector<float>(want, want + n_vocab)),
                  1e-4)
            << seats << " seats, seat " << s << ", position " << prefill - 1 + k;
      }
    }
    EXPECT_EQ(l.core->stats().kv.used_blocks, 0) << "the requests' blocks go back";
    EXPECT_FALSE(l.core->has_work());
  }
  auto p = decode_precision(*l.core, *ref, toks, 12, kDecodeGateSeats, {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->passed) << p->failures;
  EXPECT_EQ(p->positions, 13);  // positions 16 .. 28
  EXPECT_DOUBLE_EQ(p->logits.top1_agreement, 1.0);
  EXPECT_LT(p->logits.mean_kl, 1e-8);
  EXPECT_GT(p->ppl_baseline, 1.0);
}

// A fault in the decode steps alone: teacher forcing sees nothing, the decode gate fails and
// names the seats where it happens (only batches of 3, then every decode step).
TEST(Precision, DecodeGateCatchesAFaultOnlyTheDecodeStepsHave) {
  ThreadPool pool(2);
  Loaded l = load_tiny(pool, false);
  ASSERT_TRUE(l.core);
  const auto toks = some_tokens(40);
  const int64_t n_vocab = l.model->hparams().n_vocab;
  auto ref = teacher_forced_logits(*l.core, toks);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  for (const int64_t min_seqs : {3, 1}) {
    DecodeFault faulty(*l.model, min_seqs, 25.0f, 7);
    auto core = core_of(faulty, 3);
    ASSERT_TRUE(core);
    auto tf = teacher_forced_logits(*core, toks);
    ASSERT_TRUE(tf.ok()) << tf.status().message();
    const PrecisionReport forced = compare_precision(*ref, *tf, toks, n_vocab, {});
    EXPECT_TRUE(forced.passed) << "teacher forcing runs no decode step: " << forced.failures;
    EXPECT_EQ(faulty.faulty_passes, 0);
    auto p = decode_precision(*core, *ref, toks, kDecodeGateSteps, kDecodeGateSeats, {});
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_GT(faulty.faulty_passes, 0);
    EXPECT_FALSE(p->passed);
    const std::string where = min_seqs == 3 ? "decode at 3 seats: " : "decode at 1 seat: ";
    EXPECT_EQ(p->failures.rfind(where, 0), 0u) << p->failures;
    EXPECT_LT(p->logits.top1_agreement, 0.5);
    // The worse of the two reports carries the failure.
    const PrecisionReport both = worse_of(forced, *p);
    EXPECT_FALSE(both.passed);
    EXPECT_EQ(both.failures, p->failures);
    EXPECT_DOUBLE_EQ(both.logits.top1_agreement, p->logits.top1_agreement);
    EXPECT_DOUBLE_EQ(both.logits.mean_kl, p->logits.mean_kl);
    // A core of one seat runs the one-seat check alone: the batch fault stays out of its reach.
    if (min_seqs == 3) {
      auto one = core_of(faulty, 1);
      ASSERT_TRUE(one);
      auto q = decode_precision(*one, *ref, toks, kDecodeGateSteps, kDecodeGateSeats, {});
      ASSERT_TRUE(q.ok()) << q.status().message();
      EXPECT_TRUE(q->passed) << q->failures;
    }
  }
}

TEST(Precision, DecodeLogitsErrors) {
  ThreadPool pool(1);
  Loaded l = load_tiny(pool, false);
  ASSERT_TRUE(l.core);
  const auto toks = some_tokens(20);
  const auto message = [&](std::span<const int32_t> t, int64_t prefill, int64_t seats) {
    auto r = decode_forced_logits(*l.core, t, prefill, seats);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(message(toks, 0, 1).find("a prompt of 0 of 20 tokens (it takes 1 to 19)"),
            std::string::npos);
  EXPECT_NE(message(toks, 20, 1).find("a prompt of 20 of 20"), std::string::npos);
  EXPECT_NE(message(toks, 5, 2).find("2 seats, where the engine core runs 1 to 1"),
            std::string::npos);
  const auto full = some_tokens(64);  // the context holds 64: no room for the last step
  EXPECT_NE(message(full, 5, 1).find("do not fit the context of 64"), std::string::npos);
  // decode_precision cuts the tokens to the context less one instead.
  auto ref = teacher_forced_logits(*l.core, full);
  ASSERT_TRUE(ref.ok());
  auto p = decode_precision(*l.core, *ref, full, 8, kDecodeGateSeats, {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->positions, 9);
  EXPECT_TRUE(p->passed) << p->failures;
  auto wrong = decode_precision(*l.core, std::span<const float>(*ref).first(10), full, 8,
                                kDecodeGateSeats, {});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("reference logits"), std::string::npos);
  EXPECT_EQ(l.core->stats().kv.used_blocks, 0);
}

}  // namespace
}  // namespace rinfer
