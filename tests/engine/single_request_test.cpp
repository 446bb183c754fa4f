// One client's requests through the engine core (run_request, as `rinfer run` and `rinfer bench`
// drive it) on the tiny synthetic llama (tests/data/llama/tiny_llama.gguf) with a fake
// detokenizer: chunked prefill, stop conditions, streaming, cancellation (between steps and
// inside a forward pass), the context's limits, prefix reuse across turns, seeded sampling,
// timings and non-finite logits.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "gguf_copy.h"
#include "logits_hook.h"
#include "models/llama/llama_model.h"
#include "test_util.h"

namespace rinfer {
namespace {

// Token i reads "<i>"; tokens in `eog` end the generation. `finishes` counts every stream's
// finish() calls.
class FakeText final : public TokenTextStream {
 public:
  FakeText(std::set<int32_t> eog, int* finishes) : eog_(std::move(eog)), finishes_(finishes) {}
  bool is_end_of_generation(int32_t t) const override { return eog_.count(t) != 0; }
  std::string push(int32_t t) override { return "<" + std::to_string(t) + ">"; }
  std::string finish() override {
    ++*finishes_;
    return "";
  }

 private:
  std::set<int32_t> eog_;
  int* finishes_;
};

std::unique_ptr<DecoderModel> load(const std::string& path = {}) {
  LoadOptions o;
  o.cpu.ops.impl = cpu::Impl::kFast;
  o.cpu.ops.quantize_activations = false;  // exact: runs compare token for token
  auto m = load_decoder_model(path.empty() ? test::test_data_path("llama/tiny_llama.gguf") : path,
                              o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

struct Rig {
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<EngineCore> core;
  std::set<int32_t> eog;
  int finishes = 0;
};

// One seat (a single client); `text` false: no detokenizer.
std::unique_ptr<Rig> make(int64_t n_ctx = 64, bool text = true, int64_t step_tokens = 512,
                          bool kv_cache = true, const std::string& path = {}) {
  auto s = std::make_unique<Rig>();
  s->model = load(path);
  if (!s->model) return nullptr;
  EngineCoreOptions o;
  o.n_ctx = n_ctx;
  o.block_size = 2;
  o.scheduler.max_seqs = 1;
  o.scheduler.max_batched_tokens = step_tokens;
  o.scheduler.recompute_each_step = !kv_cache;
  o.prefix_caching = kv_cache;
  TextStreamFactory f;
  if (text) {
    Rig* r = s.get();
    f = [r] { return std::make_unique<FakeText>(r->eog, &r->finishes); };
  }
  auto core = EngineCore::create(*s->model, o, f);
  EXPECT_TRUE(core.ok()) << core.status().to_string();
  if (!core.ok()) return nullptr;
  s->core = std::move(core).value();
  return s;
}

RequestParams greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0.0f;
  p.sampling.repeat_penalty = 1.0f;
  return p;
}

struct Reply {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  RequestStats stats;
};

Result<Reply> run(EngineCore& core, RequestParams p, const std::atomic<bool>* cancel = nullptr,
                  const std::function<void(std::string_view)>& on_piece = {}) {
  auto reply = std::make_shared<Reply>();
  p.on_event = [reply, on_piece](const RequestEvent& ev) {
    reply->tokens.insert(reply->tokens.end(), ev.tokens.begin(), ev.tokens.end());
    reply->text += ev.text;
    if (on_piece && !ev.text.empty()) on_piece(ev.text);
  };
  RINFER_ASSIGN_OR_RETURN(const RequestOutcome out, run_request(core, std::move(p), cancel));
  reply->finish = out.finish;
  reply->stats = out.stats;
  return *reply;
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 88, 23};

TEST(SingleRequestTest, ChunkedPrefillAndRecomputingGiveTheSameReply) {
  std::vector<std::vector<int32_t>> replies;
  for (auto [chunk, kv] : {std::pair{512, true}, {4, true}, {3, true}, {512, false}}) {
    auto s = make(64, false, chunk, kv);
    ASSERT_TRUE(s);
    auto r = run(*s->core, greedy(kPrompt, 12));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->finish, FinishReason::kMaxTokens);
    EXPECT_EQ(r->stats.generated_tokens, 12);
    EXPECT_EQ(r->stats.prompt_tokens, 6);
    EXPECT_EQ(r->stats.cached_tokens, 0);
    replies.push_back(r->tokens);
  }
  for (size_t i = 1; i < replies.size(); ++i) EXPECT_EQ(replies[i], replies[0]) << i;
}

TEST(SingleRequestTest, StreamsPiecesAndStopsAtEndOfGeneration) {
  auto probe = make();
  ASSERT_TRUE(probe);
  auto first = run(*probe->core, greedy(kPrompt, 6));
  ASSERT_TRUE(first.ok());
  // The 4th greedy token ends the generation (at its first occurrence).
  const int32_t stop_tok = first->tokens[3];
  const auto at = std::find(first->tokens.begin(), first->tokens.end(), stop_tok);
  auto s = make();
  ASSERT_TRUE(s);
  s->eog = {stop_tok};
  std::vector<std::string> pieces;
  auto r = run(*s->core, greedy(kPrompt, 6), nullptr,
               [&](std::string_view p) { pieces.emplace_back(p); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kEndOfGeneration);
  EXPECT_EQ(r->tokens, std::vector<int32_t>(first->tokens.begin(), at + 1));
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, r->text);
  EXPECT_EQ(r->text.find("<" + std::to_string(stop_tok) + ">"), std::string::npos);
  EXPECT_EQ(s->finishes, 1);
}

TEST(SingleRequestTest, StopStringIsNeverStreamed) {
  auto s = make();
  ASSERT_TRUE(s);
  auto first = run(*s->core, greedy(kPrompt, 6));
  ASSERT_TRUE(first.ok());
  // Stop at a string that spans two pieces: "3>"+"<4".
  const std::string t2 = "<" + std::to_string(first->tokens[2]) + ">";
  const std::string t3 = "<" + std::to_string(first->tokens[3]) + ">";
  const std::string stop = t2.substr(1) + t3.substr(0, 2);
  const size_t at = first->text.find(stop);
  ASSERT_NE(at, std::string::npos);
  RequestParams p = greedy(kPrompt, 6);
  p.stop = {stop};
  std::string streamed;
  auto r = run(*s->core, p, nullptr, [&](std::string_view piece) { streamed += piece; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStopString);
  EXPECT_EQ(streamed, first->text.substr(0, at));
  EXPECT_EQ(r->text, streamed);
}

TEST(SingleRequestTest, CancelStopsAfterTheCurrentTokenAndFreesEveryBlock) {
  auto s = make();
  ASSERT_TRUE(s);
  std::atomic<bool> cancel{false};
  int pieces = 0;
  auto r = run(*s->core, greedy(kPrompt, 50), &cancel, [&](std::string_view) {
    if (++pieces == 3) cancel = true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kAborted);
  EXPECT_EQ(r->tokens.size(), 3u);
  EXPECT_EQ(s->core->kv_manager().usage().used_blocks, 0);
  // Cancelled before anything: no token.
  auto r2 = run(*s->core, greedy({3, 4}, 5), &cancel);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->finish, FinishReason::kAborted);
  EXPECT_TRUE(r2->tokens.empty());
}

TEST(SingleRequestTest, ContextFullAndBadPrompts) {
  auto s = make(16);
  ASSERT_TRUE(s);
  auto r = run(*s->core, greedy(kPrompt, 0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kContextFull);
  EXPECT_EQ(r->tokens.size(), 10u);  // prompt + reply fill the context

  auto bad = run(*s->core, greedy(std::vector<int32_t>(16, 3), 4));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.status().message().find("16 tokens but the context holds 16"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(run(*s->core, greedy({}, 4)).ok());
  auto oov = run(*s->core, greedy({1, 96}, 4));
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("96"), std::string::npos) << oov.status().message();
}

TEST(SingleRequestTest, ReusesTheCachedPrefixAcrossTurns) {
  auto s = make();
  ASSERT_TRUE(s);
  auto r1 = run(*s->core, greedy(kPrompt, 5));
  ASSERT_TRUE(r1.ok());
  // Next turn: the history, the reply, then new tokens.
  std::vector<int32_t> turn2 = kPrompt;
  turn2.insert(turn2.end(), r1->tokens.begin(), r1->tokens.end());
  turn2.insert(turn2.end(), {7, 8, 9});
  auto r2 = run(*s->core, greedy(turn2, 5));
  ASSERT_TRUE(r2.ok());
  // The last reply token was sampled but never computed: the 10 positions before it, in whole
  // blocks of 2, are a hit.
  EXPECT_EQ(r2->stats.cached_tokens, 10);
  EXPECT_EQ(r2->stats.prompt_tokens, static_cast<int64_t>(turn2.size()));

  auto fresh = make();
  ASSERT_TRUE(fresh);
  auto want = run(*fresh->core, greedy(turn2, 5));
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(r2->tokens, want->tokens);

  // An edited history: only the common prefix's whole blocks are kept.
  auto r3 = run(*s->core, greedy({1, 17, 50, 50}, 2));
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->stats.cached_tokens, 2);
}

TEST(SingleRequestTest, SeededSamplingIsReproducible) {
  std::vector<std::vector<int32_t>> runs;
  for (uint64_t seed : {5u, 5u, 6u}) {
    auto s = make();
    ASSERT_TRUE(s);
    RequestParams p = greedy(kPrompt, 24);
    p.sampling.temperature = 1.5f;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    p.sampling.seed = seed;
    auto r = run(*s->core, p);
    ASSERT_TRUE(r.ok());
    runs.push_back(r->tokens);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], runs[2]);
}

TEST(SingleRequestTest, TimingsAreFilled) {
  auto s = make();
  ASSERT_TRUE(s);
  auto r = run(*s->core, greedy(kPrompt, 4));
  ASSERT_TRUE(r.ok());
  const RequestStats& t = r->stats;
  EXPECT_GT(t.ttft_ms, 0);
  EXPECT_GT(t.total_ms, t.ttft_ms);
  EXPECT_GT(prefill_tps(t), 0);
  EXPECT_GT(decode_tps(t), 0);
  EXPECT_NE(stats_text(t).find("prompt 6 tokens"), std::string::npos) << stats_text(t);
  EXPECT_NE(stats_text(t).find("generated 4 tokens"), std::string::npos) << stats_text(t);
}

// Guards silent nonsense from corrupt weights: a GGUF with one NaN in output_norm.weight used to
// load and give an empty reply (greedy argmax over NaN is id 0). Every mode (KV cache on and
// off, greedy and sampled) fails at the first step with an error that names the step and says
// the weights may be corrupt, streams nothing, and leaves no block held.
TEST(SingleRequestTest, NaNWeightsAreAnErrorNamingTheStep) {
  const std::string path = test::poisoned_gguf(test::test_data_path("llama/tiny_llama.gguf"),
                                               "nan_norm.gguf", "output_norm.weight", 3, NAN);
  ASSERT_FALSE(path.empty());
  for (bool kv : {true, false}) {
    for (float t : {0.0f, 0.9f}) {
      auto s = make(64, true, 512, kv, path);  // the file is well-formed: only its numbers
      ASSERT_TRUE(s);
      RequestParams p = greedy(kPrompt, 8);
      p.sampling.temperature = t;
      std::string streamed;
      auto r = run(*s->core, p, nullptr, [&](std::string_view piece) { streamed += piece; });
      ASSERT_FALSE(r.ok()) << "kv " << kv << " T " << t;
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
      const std::string& msg = r.status().message();
      EXPECT_NE(msg.find("the model produced non-finite logits at generation step 1"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("the weights may be corrupt"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the logits hold NaN at token"), std::string::npos) << msg;
      EXPECT_TRUE(streamed.empty());
      EXPECT_EQ(s->core->kv_manager().usage().used_blocks, 0);
    }
  }
}

// A model whose runner's logits turn non-finite from its `clean`-th forward pass on (counting
// from 0; the prefill is pass 0 when the prompt fits one step): `bad` at token `at` of every row.
class NonFiniteAfter final : public test::LogitsHook {
 public:
  NonFiniteAfter(std::unique_ptr<DecoderModel> m, int clean, float bad, int32_t at)
      : LogitsHook(*m), m_(std::move(m)), clean_(clean), bad_(bad), at_(at) {}
  mutable bool armed = true;

 private:
  void after_forward(const ForwardBatch& b, float* logits) const override {
    if (!armed || calls_++ < clean_) return;
    for (size_t r = 0; r < b.logit_rows.size(); ++r) {
      logits[static_cast<int64_t>(r) * hparams().n_vocab + at_] = bad_;
    }
  }
  std::unique_ptr<DecoderModel> m_;  // the wrapped model
  int clean_;
  mutable int calls_ = 0;
  float bad_;
  int32_t at_;
};

// Guards the same mid-reply: logits that turn +inf at step 4 end the request with an error naming
// step 4 and the token; its blocks come back, and once the model is sound again the next reply
// equals a fresh core's.
TEST(SingleRequestTest, NonFiniteLogitsMidReplyAreAnErrorAndFreeTheBlocks) {
  NonFiniteAfter m(load(), 3, INFINITY, 17);
  EngineCoreOptions o;
  o.n_ctx = 64;
  o.block_size = 2;
  o.scheduler.max_seqs = 1;
  auto core = EngineCore::create(m, o, nullptr);
  ASSERT_TRUE(core.ok()) << core.status().to_string();
  auto r = run(**core, greedy(kPrompt, 10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("non-finite logits at generation step 4"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("the logits hold +inf at token 17"), std::string::npos)
      << r.status().message();
  EXPECT_EQ((*core)->kv_manager().usage().used_blocks, 0);

  m.armed = false;
  auto again = run(**core, greedy(kPrompt, 10));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  auto fresh = make(64, false);
  ASSERT_TRUE(fresh);
  auto want = run(*fresh->core, greedy(kPrompt, 10));
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(again->tokens, want->tokens);
}

// Guards Ctrl-C during a long prefill: the flag reaches inside the forward pass (the CPU model
// checks it between layers; here the layer observer interrupts the core after layer 0 of the
// k-th forward): the request ends aborted with no further layer run, no block stays held, and
// the next request gives what a fresh core gives. Prefill (one chunk, or the second of several)
// and decode steps, KV cache on and off.
TEST(SingleRequestTest, CancelReachesInsideTheForward) {
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
    auto s = make(64, false, c.chunk, c.kv);
    ASSERT_TRUE(s);
    auto* lm = dynamic_cast<llama::LlamaModel*>(s->model.get());
    ASSERT_NE(lm, nullptr);
    std::atomic<bool> cancel{false};
    int forwards = -1, after_trip = 0;
    bool armed = true;
    EngineCore* core = s->core.get();
    lm->set_layer_observer([&](int64_t layer, int64_t, const float*, int64_t, int64_t) {
      if (layer < 0) ++forwards;
      if (cancel) ++after_trip;  // a block (or an embedding) that ran after the flag was raised
      if (armed && layer == 0 && forwards == c.trip_forward) {
        cancel = true;
        core->interrupt();
      }
    });
    auto r = run(*s->core, greedy(kPrompt, 20), &cancel);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    EXPECT_EQ(r->finish, FinishReason::kAborted) << what;
    EXPECT_EQ(r->tokens.size(), c.tokens) << what;
    EXPECT_EQ(after_trip, 0) << what;  // stopped before layer 1 of that forward
    EXPECT_EQ(forwards, c.trip_forward) << what;
    EXPECT_EQ(s->core->kv_manager().usage().used_blocks, 0) << what;

    armed = false;
    cancel = false;
    s->core->clear_prefix_cache();
    auto again = run(*s->core, greedy(kPrompt, 20), &cancel);
    ASSERT_TRUE(again.ok()) << what;
    auto fresh = make(64, false, c.chunk, c.kv);
    ASSERT_TRUE(fresh);
    auto want = run(*fresh->core, greedy(kPrompt, 20));
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(again->finish, FinishReason::kMaxTokens) << what;
    EXPECT_EQ(again->tokens, want->tokens) << what;
  }
  // Raised before the call: not even the first chunk runs.
  auto s = make();
  ASSERT_TRUE(s);
  auto* lm = dynamic_cast<llama::LlamaModel*>(s->model.get());
  int blocks = 0;
  lm->set_layer_observer([&](int64_t, int64_t, const float*, int64_t, int64_t) { ++blocks; });
  std::atomic<bool> cancel{true};
  auto r = run(*s->core, greedy(kPrompt, 5), &cancel);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kAborted);
  EXPECT_EQ(blocks, 0);
}

}  // namespace
}  // namespace rinfer
