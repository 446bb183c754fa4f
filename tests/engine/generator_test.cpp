// The generation loop on the tiny synthetic llama (tests/data/llama/tiny_llama.gguf) with a fake
// detokenizer: KV cache vs recomputation, stop conditions, streaming, cancellation, prefix reuse.
#include "engine/generator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf_copy.h"
#include "models/llama/llama_model.h"
#include "test_util.h"

namespace rinfer {
namespace {

// Token i reads "<i>"; tokens in `eog` end the generation.
class FakeText final : public TokenTextStream {
 public:
  std::set<int32_t> eog;
  int finishes = 0;
  bool is_end_of_generation(int32_t t) const override { return eog.count(t) != 0; }
  std::string push(int32_t t) override { return "<" + std::to_string(t) + ">"; }
  std::string finish() override {
    ++finishes;
    return "";
  }
};

struct Rig {
  std::unique_ptr<DecoderModel> model;
  KvCache cache;
};

Rig make(int64_t n_ctx = 64, int64_t max_batch = 512) {
  LoadOptions o;
  o.cpu.ops.impl = cpu::Impl::kFast;
  o.cpu.ops.quantize_activations = false;  // exact: runs compare bit-for-bit-ish logits
  o.max_batch = max_batch;
  auto m = load_decoder_model(test::test_data_path("llama/tiny_llama.gguf"), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  const DecoderHParams& hp = (*m)->hparams();
  return {std::move(m).value(), KvCache::create(hp.n_layer, n_ctx, hp.kv_dim()).value()};
}

GeneratorOptions greedy(int64_t max_tokens, bool kv_cache = true) {
  GeneratorOptions g;
  g.kv_cache = kv_cache;
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0.0f;
  g.sampling.repeat_penalty = 1.0f;
  return g;
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 88, 23};

TEST(GeneratorTest, KvCacheAndRecomputeGenerateTheSameTokens) {
  std::vector<int32_t> with, without;
  for (bool kv : {true, false}) {
    Rig s = make();
    Generator g(*s.model, s.cache, nullptr, greedy(12, kv));
    auto r = g.generate(kPrompt, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->finish, FinishReason::kMaxTokens);
    EXPECT_EQ(r->stats.generated_tokens, 12);
    EXPECT_EQ(r->stats.prompt_tokens, 6);
    EXPECT_EQ(r->stats.cached_tokens, 0);
    (kv ? with : without) = r->tokens;
  }
  EXPECT_EQ(with, without);
}

TEST(GeneratorTest, ChunkedPrefillGivesTheSameReply) {
  std::vector<int32_t> a, b;
  for (int64_t chunk : {512, 4}) {
    Rig s = make();
    GeneratorOptions o = greedy(8);
    o.prefill_chunk = chunk;
    Generator g(*s.model, s.cache, nullptr, o);
    auto r = g.generate(kPrompt, nullptr);
    ASSERT_TRUE(r.ok());
    (chunk == 4 ? b : a) = r->tokens;
  }
  EXPECT_EQ(a, b);
}

TEST(GeneratorTest, StreamsPiecesAndStopsAtEndOfGeneration) {
  Rig s = make();
  FakeText text;
  Generator probe(*s.model, s.cache, nullptr, greedy(6));
  auto first = probe.generate(kPrompt, nullptr);
  ASSERT_TRUE(first.ok());
  // Make the 4th greedy token an end-of-generation token (if it did not occur earlier).
  const int32_t stop_tok = first->tokens[3];
  text.eog = {stop_tok};
  probe.reset();
  Generator g(*s.model, s.cache, &text, greedy(6));
  std::vector<std::string> pieces;
  auto r = g.generate(kPrompt, [&](std::string_view p) { pieces.emplace_back(p); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kEndOfGeneration);
  EXPECT_EQ(r->tokens.back(), stop_tok);
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, r->text);
  EXPECT_EQ(r->text.find("<" + std::to_string(stop_tok) + ">"), std::string::npos);
  EXPECT_EQ(text.finishes, 1);
}

TEST(GeneratorTest, StopStringIsNeverStreamed) {
  Rig s = make();
  FakeText text;
  Generator probe(*s.model, s.cache, &text, greedy(6));
  auto first = probe.generate(kPrompt, nullptr);
  ASSERT_TRUE(first.ok());
  // Stop at the third token's text, given as a string that spans two pieces: "3>"+"<4".
  const std::string t2 = "<" + std::to_string(first->tokens[2]) + ">";
  const std::string t3 = "<" + std::to_string(first->tokens[3]) + ">";
  const std::string stop = t2.substr(1) + t3.substr(0, 2);
  const size_t at = first->text.find(stop);
  probe.reset();
  GeneratorOptions o = greedy(6);
  o.stop = {stop};
  Generator g(*s.model, s.cache, &text, o);
  std::string streamed;
  auto r = g.generate(kPrompt, [&](std::string_view p) { streamed += p; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStopString);
  EXPECT_EQ(streamed, first->text.substr(0, at));
  EXPECT_EQ(streamed.find(stop), std::string::npos);
}

TEST(GeneratorTest, CancelStopsAfterTheCurrentToken) {
  Rig s = make();
  FakeText text;
  std::atomic<bool> cancel{false};
  Generator g(*s.model, s.cache, &text, greedy(50));
  int pieces = 0;
  auto r = g.generate(
      kPrompt,
      [&](std::string_view) {
        if (++pieces == 3) cancel = true;
      },
      &cancel);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kAborted);
  EXPECT_EQ(r->tokens.size(), 3u);
  // The cache and the history still agree: the next call reuses them.
  EXPECT_EQ(s.cache.size(), static_cast<int64_t>(g.tokens().size()));
  // Cancelled before anything: the prefill stops between chunks (or returns no token).
  cancel = true;
  auto r2 = g.generate(std::vector<int32_t>{3, 4}, nullptr, &cancel);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->finish, FinishReason::kAborted);
}

TEST(GeneratorTest, ContextFullAndPromptTooLong) {
  Rig s = make(16);
  Generator g(*s.model, s.cache, nullptr, greedy(0));
  auto r = g.generate(kPrompt, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kContextFull);
  EXPECT_EQ(s.cache.size(), 16);
  EXPECT_EQ(r->tokens.size(), 11u);  // 16 - 6 fed back, plus the last one sampled

  std::vector<int32_t> long_prompt(16, 3);
  auto bad = g.generate(long_prompt, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.status().message().find("16 tokens but the context holds 16"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(g.generate({}, nullptr).ok());
  auto oov = g.generate(std::vector<int32_t>{1, 96}, nullptr);
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("96"), std::string::npos);
}

TEST(GeneratorTest, ReusesTheCachedPrefixAcrossTurns) {
  Rig s = make();
  Generator g(*s.model, s.cache, nullptr, greedy(5));
  auto r1 = g.generate(kPrompt, nullptr);
  ASSERT_TRUE(r1.ok());
  // Next turn: the history, the reply, then new tokens.
  std::vector<int32_t> turn2 = kPrompt;
  turn2.insert(turn2.end(), r1->tokens.begin(), r1->tokens.end());
  turn2.insert(turn2.end(), {7, 8, 9});
  auto r2 = g.generate(turn2, nullptr);
  ASSERT_TRUE(r2.ok());
  // The last reply token was sampled but never fed, so it is evaluated with the new ones.
  EXPECT_EQ(r2->stats.cached_tokens, static_cast<int64_t>(kPrompt.size() + 4));
  EXPECT_EQ(r2->stats.prompt_tokens - r2->stats.cached_tokens, 4);

  Rig fresh = make();
  Generator f(*fresh.model, fresh.cache, nullptr, greedy(5));
  auto want = f.generate(turn2, nullptr);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(r2->tokens, want->tokens);

  // An edited history: only the common prefix is kept.
  std::vector<int32_t> edited = {1, 17, 50, 50};
  auto r3 = g.generate(edited, nullptr);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->stats.cached_tokens, 2);
}

TEST(GeneratorTest, SeededSamplingIsReproducible) {
  std::vector<std::vector<int32_t>> runs;
  for (uint64_t seed : {5u, 5u, 6u}) {
    Rig s = make();
    GeneratorOptions o = greedy(24);
    o.sampling.temperature = 1.5f;
    o.sampling.top_k = 0;
    o.sampling.top_p = 1.0f;
    o.sampling.min_p = 0.0f;
    o.sampling.seed = seed;
    Generator g(*s.model, s.cache, nullptr, o);
    auto r = g.generate(kPrompt, nullptr);
    ASSERT_TRUE(r.ok());
    runs.push_back(r->tokens);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], runs[2]);
}

// The contract of DecoderModel::decode_on_device, on the host: a CPU model whose "device" loop
// samples with a second Sampler on the uniforms the generator hands it, draws each step's
// uniform when that step is queued (one step ahead of on_token, as the CUDA model does) and
// reports the step queued ahead of a stop as discarded.
class HostLoopModel final : public DecoderModel {
 public:
  explicit HostLoopModel(std::unique_ptr<DecoderModel> m) : m_(std::move(m)) {}
  std::string_view architecture() const override { return m_->architecture(); }
  std::string describe() const override { return m_->describe(); }
  uint64_t weight_bytes_per_token() const override { return m_->weight_bytes_per_token(); }
  const DecoderHParams& hparams() const override { return m_->hparams(); }
  Status infer(const DecoderBatch& b, KvCache& c, float* logits) override {
    return m_->infer(b, c, logits);
  }
  bool can_decode_on_device(const SamplingParams&) const override { return enabled; }
  Result<DeviceDecodeResult> decode_on_device(KvCache& cache, const DeviceDecode& d) override {
    ++calls;
    const SamplingParams& sp = *d.sampling;
    const bool draws = sp.temperature > 0.0f;
    Sampler sampler(sp, hparams().n_vocab);
    std::vector<int32_t> hist(d.history.begin(), d.history.end());
    std::vector<float> logits(static_cast<size_t>(hparams().n_vocab));
    const int64_t p0 = cache.size();
    DeviceDecodeResult r;
    double u = draws ? d.uniform() : 0.0;  // step 0 queued
    for (int64_t k = 0;; ++k) {
      const int32_t pos = static_cast<int32_t>(p0 + k), row = 0;
      DecoderBatch b{std::span<const int32_t>(&hist.back(), 1), std::span<const int32_t>(&pos, 1),
                     std::span<const int32_t>(&row, 1)};
      RINFER_RETURN_IF_ERROR(m_->infer(b, cache, logits.data()));
      ++r.steps;
      RINFER_ASSIGN_OR_RETURN(const int32_t tok, sampler.sample_with_uniform(logits, hist, u));
      const bool ahead = p0 + k + 1 < cache.n_ctx();
      if (ahead && draws) u = d.uniform();  // step k + 1 queued before the host reads tok
      if (!d.on_token(tok)) {
        if (ahead) r.discarded = 1;
        return r;
      }
      if (!ahead) return r;
      hist.push_back(tok);
    }
  }
  bool enabled = true;
  int calls = 0;

 private:
  std::unique_ptr<DecoderModel> m_;
};

// Device decoding (through the contract above) against the host loop: the same tokens, stop
// reasons and cache, greedy with penalties and seeded sampling, over consecutive replies (the
// draw of a dropped step is taken back, so the next reply draws as the host loop's would).
TEST(GeneratorTest, DeviceDecodingMatchesTheHostLoop) {
  for (bool sampled : {false, true}) {
    struct Reply {
      std::vector<int32_t> tokens;
      FinishReason reason;
      int64_t generated, cache;
      bool operator==(const Reply&) const = default;
    };
    std::vector<Reply> runs[2];
    for (int dev = 0; dev < 2; ++dev) {
      Rig s = make(40);
      HostLoopModel m(std::move(s.model));
      m.enabled = dev == 1;
      GeneratorOptions o = greedy(10);
      o.sampling.repeat_penalty = 1.3f;
      o.sampling.presence_penalty = 0.2f;
      o.sampling.repeat_last_n = 8;
      if (sampled) {
        o.sampling.temperature = 1.2f;
        o.sampling.top_k = 20;
        o.sampling.top_p = 0.95f;
        o.sampling.min_p = 0.0f;
        o.sampling.seed = 7;
      }
      Generator g(m, s.cache, nullptr, o);
      std::vector<int32_t> prompt = kPrompt;
      for (int turn = 0; turn < 3; ++turn) {
        if (turn == 2) g.mutable_options().max_tokens = 0;  // until the context is full
        auto r = g.generate(prompt, nullptr);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        runs[dev].push_back({r->tokens, r->finish, r->stats.generated_tokens, s.cache.size()});
        EXPECT_EQ(s.cache.size(), static_cast<int64_t>(g.tokens().size()));
        prompt.insert(prompt.end(), r->tokens.begin(), r->tokens.end());
        prompt.insert(prompt.end(), {7, 8});
      }
      EXPECT_EQ(m.calls, dev == 1 ? 3 : 0);
    }
    ASSERT_EQ(runs[1].size(), 3u);
    EXPECT_EQ(runs[1][0].reason, FinishReason::kMaxTokens);
    EXPECT_EQ(runs[1][0].tokens.size(), 10u);
    EXPECT_EQ(runs[1][0].generated, 10);
    EXPECT_EQ(runs[1][2].reason, FinishReason::kContextFull);
    EXPECT_EQ(runs[1][2].cache, 40);
    for (size_t t = 0; t < runs[0].size(); ++t) {
      EXPECT_TRUE(runs[0][t] == runs[1][t]) << (sampled ? "sampled" : "greedy") << ", reply " << t;
    }
  }
}

TEST(GeneratorTest, TimingsAreFilled) {
  Rig s = make();
  Generator g(*s.model, s.cache, nullptr, greedy(4));
  auto r = g.generate(kPrompt, nullptr);
  ASSERT_TRUE(r.ok());
  const RequestStats& t = r->stats;
  EXPECT_GT(t.ttft_ms, 0);
  EXPECT_GT(t.total_ms, t.ttft_ms);
  EXPECT_GT(prefill_tps(t), 0);
  EXPECT_GT(decode_tps(t), 0);
  EXPECT_NE(stats_text(t).find("prompt 6 tokens"), std::string::npos) << stats_text(t);
  EXPECT_NE(stats_text(t).find("generated 4 tokens"), std::string::npos) << stats_text(t);
}

// A model whose logits turn non-finite from its `clean`-th infer call on (counting from 0; the
// prefill is call 0 when the prompt fits one chunk): `bad` at token `at` of every row asked for.
class NonFiniteAfter final : public DecoderModel {
 public:
  NonFiniteAfter(std::unique_ptr<DecoderModel> m, int clean, float bad, int32_t at)
      : m_(std::move(m)), clean_(clean), bad_(bad), at_(at) {}
  std::string_view architecture() const override { return m_->architecture(); }
  std::string describe() const override { return m_->describe(); }
  uint64_t weight_bytes_per_token() const override { return m_->weight_bytes_per_token(); }
  const DecoderHParams& hparams() const override { return m_->hparams(); }
  Status infer(const DecoderBatch& b, KvCache& c, float* logits) override {
    RINFER_RETURN_IF_ERROR(m_->infer(b, c, logits));
    if (armed && calls_++ >= clean_) {
      for (size_t r = 0; r < b.logit_rows.size(); ++r) {
        logits[static_cast<int64_t>(r) * hparams().n_vocab + at_] = bad_;
      }
    }
    return ok_status();
  }
  bool armed = true;

 private:
  std::unique_ptr<DecoderModel> m_;
  int clean_, calls_ = 0;
  float bad_;
  int32_t at_;
};

// Guards silent nonsense from corrupt weights: a GGUF with one NaN in output_norm.weight used to
// load and give an empty reply (greedy argmax over NaN is id 0). Now every mode (KV cache on and
// off, greedy and sampled) fails at the first step with an error that says the model produced
// non-finite logits, at which step, and that the weights may be corrupt.
TEST(GeneratorTest, NaNWeightsAreAnErrorNamingTheStep) {
  const std::string path = test::poisoned_gguf(test::test_data_path("llama/tiny_llama.gguf"),
                                               "nan_norm.gguf", "output_norm.weight", 3, NAN);
  ASSERT_FALSE(path.empty());
  LoadOptions o;
  o.cpu.ops.impl = cpu::Impl::kFast;
  auto m = load_decoder_model(path, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();  // the file is well-formed: only its numbers
  const DecoderHParams& hp = (*m)->hparams();
  for (bool kv : {true, false}) {
    for (float t : {0.0f, 0.9f}) {
      KvCache cache = KvCache::create(hp.n_layer, 64, hp.kv_dim()).value();
      GeneratorOptions g = greedy(8, kv);
      g.sampling.temperature = t;
      FakeText text;
      Generator gen(**m, cache, &text, g);
      std::string streamed;
      auto r = gen.generate(kPrompt, [&](std::string_view p) { streamed += p; });
      ASSERT_FALSE(r.ok()) << "kv " << kv << " T " << t;
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
      const std::string& msg = r.status().message();
      EXPECT_NE(msg.find("the model produced non-finite logits at generation step 1"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("the weights may be corrupt"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the logits hold NaN at token"), std::string::npos) << msg;
      EXPECT_TRUE(streamed.empty());
      EXPECT_EQ(text.finishes, 1);  // the text stream was reset for the next reply
      if (kv) EXPECT_EQ(cache.size(), static_cast<int64_t>(gen.tokens().size()));
    }
  }
}

// Guards the same mid-reply, on the host loop and on the device-decoding contract (HostLoopModel
// above): logits that turn +inf at step 4 are an error naming step 4; the cache and the history
// still agree, and once the model is sound again the next reply equals a fresh generator's.
TEST(GeneratorTest, NonFiniteLogitsMidReplyAreAnErrorAndLeaveTheCacheConsistent) {
  for (bool device : {false, true}) {
    Rig s = make();
    auto bad = std::make_unique<NonFiniteAfter>(std::move(s.model), 3, INFINITY, 17);
    NonFiniteAfter* bad_ptr = bad.get();
    HostLoopModel m(std::move(bad));
    m.enabled = device;
    Generator g(m, s.cache, nullptr, greedy(10));
    auto r = g.generate(kPrompt, nullptr);
    ASSERT_FALSE(r.ok()) << (device ? "device" : "host");
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("non-finite logits at generation step 4"),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("the logits hold +inf at token 17"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(s.cache.size(), static_cast<int64_t>(g.tokens().size()));
    EXPECT_GE(s.cache.size(), static_cast<int64_t>(kPrompt.size()));

    bad_ptr->armed = false;
    auto again = g.generate(kPrompt, nullptr);
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    Rig fresh = make();
    Generator f(*fresh.model, fresh.cache, nullptr, greedy(10));
    auto want = f.generate(kPrompt, nullptr);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(again->tokens, want->tokens) << (device ? "device" : "host");
  }
}

// Guards Ctrl-C during a long prefill: the baseline recipe's prompt is one uninterruptible
// 512-token forward, and the flag was checked only between chunks. Now it reaches inside the
// forward (the CPU model checks it between layers; here the layer observer raises it after
// layer 0 of the k-th forward): the call returns early with FinishReason::kAborted, having run
// no further layer, the cache and the history agree, and the next generate() gives what a fresh
// generator gives. Prefill (one chunk, or the second of several) and decode steps, KV cache on
// and off.
TEST(GeneratorTest, CancelReachesInsideTheForward) {
  struct Case {
    bool kv;
    int64_t chunk;
    int trip_forward;  // the forward pass (0 = the first) whose layer 0 raises the flag
    size_t tokens;     // reply tokens handed out before the stop
  };
  for (const Case& c : {Case{true, 512, 0, 0}, Case{false, 512, 0, 0}, Case{true, 4, 1, 0},
                        Case{true, 512, 3, 3}, Case{false, 512, 2, 2}}) {
    const std::string what = "kv " + std::to_string(c.kv) + " chunk " + std::to_string(c.chunk) +
                             " forward " + std::to_string(c.trip_forward);
    Rig s = make();
    auto* lm = dynamic_cast<llama::LlamaModel*>(s.model.get());
    ASSERT_NE(lm, nullptr);
    std::atomic<bool> cancel{false};
    int forwards = -1, after_trip = 0;
    bool armed = true;
    lm->set_layer_observer([&](int64_t layer, int64_t, const float*, int64_t, int64_t) {
      if (layer < 0) ++forwards;
      if (cancel) ++after_trip;  // a block (or an embedding) that ran after the flag was raised
      if (armed && layer == 0 && forwards == c.trip_forward) cancel = true;
    });
    GeneratorOptions o = greedy(20, c.kv);
    o.prefill_chunk = c.chunk;
    Generator g(*s.model, s.cache, nullptr, o);
    auto r = g.generate(kPrompt, nullptr, &cancel);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    EXPECT_EQ(r->finish, FinishReason::kAborted) << what;
    EXPECT_EQ(r->tokens.size(), c.tokens) << what;
    EXPECT_EQ(after_trip, 0) << what;  // stopped before layer 1 of that forward
    EXPECT_EQ(forwards, c.trip_forward) << what;
    if (c.kv) EXPECT_EQ(s.cache.size(), static_cast<int64_t>(g.tokens().size())) << what;
    if (c.chunk == 4) EXPECT_EQ(s.cache.size(), 4) << what;  // the first chunk stays

    armed = false;
    cancel = false;
    auto again = g.generate(kPrompt, nullptr, &cancel);
    ASSERT_TRUE(again.ok()) << what;
    Rig fresh = make();
    Generator f(*fresh.model, fresh.cache, nullptr, o);
    auto want = f.generate(kPrompt, nullptr);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(again->finish, FinishReason::kMaxTokens) << what;
    EXPECT_EQ(again->tokens, want->tokens) << what;
  }
  // Raised before the call: not even the first chunk runs.
  Rig s = make();
  auto* lm = dynamic_cast<llama::LlamaModel*>(s.model.get());
  int blocks = 0;
  lm->set_layer_observer([&](int64_t, int64_t, const float*, int64_t, int64_t) { ++blocks; });
  std::atomic<bool> cancel{true};
  Generator g(*s.model, s.cache, nullptr, greedy(5));
  auto r = g.generate(kPrompt, nullptr, &cancel);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kAborted);
  EXPECT_EQ(blocks, 0);
  EXPECT_EQ(s.cache.size(), 0);
}

}  // namespace
}  // namespace rinfer
