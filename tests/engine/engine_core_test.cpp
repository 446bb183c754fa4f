// The engine core on the tiny synthetic models (tests/data/{llama,gemma3}): many concurrent
// requests against each one run alone, prefix hits, preemption by recompute and by swap,
// aborts, bad requests, submissions from other threads. The reference kernels make every
// result exact, so batching must not change a single token.
#include "engine/engine_core.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "test_util.h"

namespace rinfer {
namespace {

std::unique_ptr<DecoderModel> load(const std::string& rel, cpu::Impl impl,
                                   ThreadPool* pool = nullptr) {
  LoadOptions o;
  o.cpu.ops.impl = impl;
  o.cpu.ops.pool = pool;
  o.cpu.ops.quantize_activations = false;
  auto m = load_decoder_model(test::test_data_path(rel), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

EngineCoreOptions options(int64_t n_ctx = 96) {
  EngineCoreOptions o;
  o.n_ctx = n_ctx;
  o.block_size = 4;
  o.scheduler.max_batched_tokens = 64;
  o.scheduler.max_seqs = 64;
  return o;
}

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0.0f;
  s.repeat_penalty = 1.0f;
  return s;
}

struct Job {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 8;
};

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  Status error;
  std::vector<std::vector<float>> logits;  // per generated token, with want_logits
  RequestStats stats;
};

// Submits every job, runs the engine until idle, returns each job's tokens.
std::vector<Outcome> run_all(EngineCore& e, const std::vector<Job>& jobs, bool want_logits = false,
                             SamplingParams sp = greedy()) {
  std::vector<Outcome> out(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    RequestParams p;
    p.prompt = jobs[i].prompt;
    p.max_tokens = jobs[i].max_tokens;
    p.sampling = sp;
    p.want_logits = want_logits;
    p.on_event = [&out, i](const RequestEvent& ev) {
      out[i].tokens.insert(out[i].tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (!ev.logits.empty()) out[i].logits.emplace_back(ev.logits.begin(), ev.logits.end());
      if (ev.finish != FinishReason::kNone) {
        out[i].finish = ev.finish;
        out[i].error = ev.error;
        out[i].stats = *ev.stats;
      }
    };
    auto id = e.submit(std::move(p));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
  }
  const Status st = e.run_until_idle();
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<Job> random_jobs(int n, int64_t n_vocab, uint32_t seed, int64_t max_prompt,
                             int64_t max_reply) {
  std::mt19937 rng(seed);
  std::vector<int32_t> shared;  // a common prefix for some of them (prefix hits)
  for (int i = 0; i < 24; ++i) shared.push_back(static_cast<int32_t>(rng() % n_vocab));
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    const int64_t len = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_prompt));
    const bool share = i % 3 == 0;
    for (int64_t k = 0; k < len; ++k) {
      j.prompt.push_back(share && k < 24 ? shared[static_cast<size_t>(k)]
                                         : static_cast<int32_t>(rng() % n_vocab));
    }
    j.max_tokens = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_reply));
    jobs.push_back(j);
  }
  return jobs;
}

std::vector<int32_t> alone(const DecoderModel& m, const Job& job, EngineCoreOptions o) {
  auto e = EngineCore::create(m, o, nullptr);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return run_all(**e, {job})[0].tokens;
}

void expect_batched_equals_alone(const std::string& model, EngineCoreOptions o, int n_jobs,
                                 int64_t max_prompt, int64_t max_reply, uint32_t seed) {
  auto m = load(model, cpu::Impl::kReference);
  ASSERT_TRUE(m);
  const std::vector<Job> jobs =
      random_jobs(n_jobs, m->hparams().n_vocab, seed, max_prompt, max_reply);
  auto e = EngineCore::create(*m, o, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const std::vector<Outcome> got = run_all(**e, jobs);
  const EngineStats st = (*e)->stats();
  EXPECT_EQ(st.kv.used_blocks, 0);  // every block back in the pool
  int64_t max_batch = 0;
  (void)max_batch;
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "job " << i << " prompt " << jobs[i].prompt.size());
    ASSERT_EQ(got[i].finish, FinishReason::kMaxTokens) << got[i].error.to_string();
    EXPECT_EQ(static_cast<int64_t>(got[i].tokens.size()), jobs[i].max_tokens);
    EXPECT_EQ(got[i].tokens, alone(*m, jobs[i], o));
  }
}

TEST(EngineCore, SixtyFourConcurrentRequestsGiveTheTokensOfEachAlone) {
  expect_batched_equals_alone("llama/tiny_llama.gguf", options(), 64, 40, 24, 1);
}

TEST(EngineCore, ContiguousLayoutAndStaticBatchingGiveTheSameTokens) {
  EngineCoreOptions o = options();
  o.layout = kv::Layout::kContiguous;
  o.scheduler.policy = BatchingPolicy::kStatic;
  o.scheduler.max_seqs = 16;
  expect_batched_equals_alone("llama/tiny_llama.gguf", o, 24, 40, 16, 2);
}

// kv_cache off (the baseline, recompute_each_step): every decode step computes the request's
// whole sequence again, batched with the others and in chunks past the step's token budget
// (prompts up to 60 and replies up to 30 tokens, 16-token steps, 8 seats), and gives each job the tokens
// it gets alone with the cache on; the sliding-window model too.
TEST(EngineCore, RecomputingEveryStepGivesTheTokensOfTheKvCache) {
  for (const char* model : {"llama/tiny_llama.gguf", "gemma3/tiny_gemma3.gguf"}) {
    SCOPED_TRACE(model);
    auto m = load(model, cpu::Impl::kReference);
    ASSERT_TRUE(m);
    const std::vector<Job> jobs = random_jobs(12, m->hparams().n_vocab, 6, 60, 30);
    EngineCoreOptions o = options();
    o.scheduler.max_batched_tokens = 16;
    o.scheduler.max_seqs = 8;
    o.scheduler.recompute_each_step = true;
    o.prefix_caching = false;
    auto e = EngineCore::create(*m, o, nullptr);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    const std::vector<Outcome> got = run_all(**e, jobs);
    EXPECT_EQ((*e)->stats().kv.used_blocks, 0);
    int64_t computed = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "job " << i);
      ASSERT_EQ(got[i].finish, FinishReason::kMaxTokens) << got[i].error.to_string();
      EXPECT_EQ(got[i].tokens, alone(*m, jobs[i], options()));
      // Every step after the first token recomputed the prompt and the reply so far.
      const auto n = static_cast<int64_t>(jobs[i].prompt.size());
      for (int64_t t = 0; t < jobs[i].max_tokens; ++t) computed += n + t;
    }
    EXPECT_EQ((*e)->stats().computed_tokens, computed);
  }
}

// A static batch takes all its seats even when their prompts need several steps of the token
// budget, and the next batch starts only when the last member of this one finished.
TEST(EngineCore, StaticBatchesFillTheirSeatsThenRunToTheEnd) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  EngineCoreOptions o = options();
  o.layout = kv::Layout::kContiguous;
  o.scheduler.policy = BatchingPolicy::kStatic;
  o.scheduler.max_seqs = 4;
  o.scheduler.max_batched_tokens = 16;  // 10-token prompts: 1-2 per step
  auto e = EngineCore::create(*m, o, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  int64_t step = 0;
  std::vector<int64_t> first(8, -1), last(8, -1);
  for (int i = 0; i < 8; ++i) {
    RequestParams p;
    for (int k = 0; k < 10; ++k) p.prompt.push_back((i * 13 + k * 7) % 96);
    p.max_tokens = 3 + i % 4;
    p.sampling = greedy();
    p.on_event = [&, i](const RequestEvent& ev) {
      if (first[static_cast<size_t>(i)] < 0) first[static_cast<size_t>(i)] = step;
      if (ev.finish != FinishReason::kNone) last[static_cast<size_t>(i)] = step;
    };
    ASSERT_TRUE((*e)->submit(std::move(p)).ok());
  }
  for (; (*e)->has_work(); ++step) ASSERT_TRUE((*e)->step().ok());
  const int64_t batch1_end = *std::max_element(last.begin(), last.begin() + 4);
  for (int i = 4; i < 8; ++i) EXPECT_GT(first[static_cast<size_t>(i)], batch1_end) << i;
  // Every member of the first batch got its first token before any of them finished.
  const int64_t batch1_started = *std::max_element(first.begin(), first.begin() + 4);
  EXPECT_LE(batch1_started, *std::min_element(last.begin(), last.begin() + 4));
}

TEST(EngineCore, SlidingWindowModelCrossesItsWindowInBatches) {
  // tiny_gemma3: window 4 on 5 of its 6 layers; blocks of 3 are released as they leave it.
  EngineCoreOptions o = options(64);
  o.block_size = 3;
  o.scheduler.max_batched_tokens = 20;  // prompts arrive in chunks
  o.scheduler.max_seqs = 16;
  expect_batched_equals_alone("gemma3/tiny_gemma3.gguf", o, 16, 30, 12, 3);
}

TEST(EngineCore, PrefixHitGivesTheLogitsOfAMiss) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  Job a{random_jobs(1, m->hparams().n_vocab, 7, 1, 1)[0].prompt, 3};
  a.prompt.clear();
  for (int i = 0; i < 30; ++i) a.prompt.push_back((i * 37 + 11) % 96);
  Job b = a;
  b.prompt.push_back(5);  // extends a's prompt: its first 28 tokens (7 blocks) hit
  auto hit_engine = EngineCore::create(*m, options(), nullptr);
  ASSERT_TRUE(hit_engine.ok());
  run_all(**hit_engine, {a});
  const std::vector<Outcome> hit = run_all(**hit_engine, {b}, true);
  EXPECT_EQ(hit[0].stats.cached_tokens, 28);
  EngineCoreOptions no_cache = options();
  no_cache.prefix_caching = false;
  auto miss_engine = EngineCore::create(*m, no_cache, nullptr);
  ASSERT_TRUE(miss_engine.ok());
  const std::vector<Outcome> miss = run_all(**miss_engine, {b}, true);
  EXPECT_EQ(miss[0].stats.cached_tokens, 0);
  ASSERT_EQ(hit[0].logits.size(), 3u);
  ASSERT_EQ(miss[0].logits.size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_LE(test::rel_l2(hit[0].logits[t], miss[0].logits[t]), 1e-6) << "token " << t;
  }
  EXPECT_EQ(hit[0].tokens, miss[0].tokens);
  EXPECT_GT((*hit_engine)->stats().kv.hit_rate(), 0.0);
}

void expect_preemption_keeps_tokens(PreemptionMode mode) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  const std::vector<Job> jobs = random_jobs(12, m->hparams().n_vocab, 5, 30, 24);
  EngineCoreOptions big = options();
  auto e0 = EngineCore::create(*m, big, nullptr);
  ASSERT_TRUE(e0.ok());
  const std::vector<Outcome> want = run_all(**e0, jobs);
  EXPECT_EQ((*e0)->stats().preemptions, 0);

  EngineCoreOptions small = options();
  small.kv_blocks = 20;  // 80 positions for 12 requests of up to 54: they must take turns
  small.prefix_caching = false;
  small.scheduler.preemption = mode;
  if (mode == PreemptionMode::kSwap) small.swap_blocks = 64;
  auto e = EngineCore::create(*m, small, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const std::vector<Outcome> got = run_all(**e, jobs);
  EXPECT_GT((*e)->stats().preemptions, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(got[i].finish, FinishReason::kMaxTokens) << i << " " << got[i].error.to_string();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "job " << i;
  }
  EXPECT_EQ((*e)->stats().kv.used_blocks, 0);
  EXPECT_TRUE((*e)->kv_manager().check_invariants().ok());
  if (mode == PreemptionMode::kSwap) {
    EXPECT_EQ((*e)->kv_manager().host_pool(0).num_free(), 64);
  }
}

// prealloc auto: the pool starts at one seat and grows from the lengths seen; the tokens are
// those of the full pool, the arena ends smaller, and the host arena grows with its content.
TEST(EngineCore, PreallocAutoGrowsThePoolAndKeepsTheTokens) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  const std::vector<Job> jobs = random_jobs(40, m->hparams().n_vocab, 21, 30, 16);
  EngineCoreOptions o = options();
  o.scheduler.max_seqs = 16;
  auto full = EngineCore::create(*m, o, nullptr);
  ASSERT_TRUE(full.ok());
  const std::vector<Outcome> want = run_all(**full, jobs);
  o.prealloc = KvPrealloc::kAuto;
  auto e = EngineCore::create(*m, o, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const uint64_t start = (*e)->kv_arena().bytes();
  EXPECT_LT(start, (*full)->kv_arena().bytes());
  const std::vector<Outcome> got = run_all(**e, jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(got[i].finish, FinishReason::kMaxTokens) << i << " " << got[i].error.to_string();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "job " << i;
  }
  const EngineStats st = (*e)->stats();
  EXPECT_GT(st.kv_grows, 0);
  EXPECT_GT((*e)->kv_arena().bytes(), start);
  EXPECT_LE((*e)->kv_arena().bytes(), (*full)->kv_arena().bytes());
  EXPECT_EQ(st.kv.used_blocks, 0);
  EXPECT_EQ(st.kv.total_blocks, (*e)->kv_arena().n_blocks(0));
  EXPECT_TRUE((*e)->kv_manager().check_invariants().ok());
}

TEST(KvArena, HostArenaGrowsKeepingItsBlocks) {
  auto spec = kv::KvSpec::make(std::vector<int64_t>{0, 0}, 8, DType::kF32, 4, 64);
  ASSERT_TRUE(spec.ok());
  auto a = kv::HostKvArena::create(*spec, std::vector<int32_t>{3});
  ASSERT_TRUE(a.ok());
  for (int64_t l = 0; l < 2; ++l) {
    for (int i = 0; i < 3 * 4 * 8; ++i) {
      (*a)->kf(l)[i] = static_cast<float>(l * 1000 + i);
      (*a)->vf(l)[i] = static_cast<float>(-l * 1000 - i);
    }
  }
  ASSERT_TRUE((*a)->grow(std::vector<int32_t>{7}).ok());
  EXPECT_EQ((*a)->n_blocks(0), 7);
  for (int64_t l = 0; l < 2; ++l) {
    for (int i = 0; i < 7 * 4 * 8; ++i) {
      const float k = i < 96 ? static_cast<float>(l * 1000 + i) : 0.0f;
      const float v = i < 96 ? static_cast<float>(-l * 1000 - i) : 0.0f;
      ASSERT_EQ((*a)->kf(l)[i], k) << l << " " << i;
      ASSERT_EQ((*a)->vf(l)[i], v) << l << " " << i;
    }
  }
  EXPECT_EQ((*a)->grow(std::vector<int32_t>{5}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*a)->grow(std::vector<int32_t>{8, 8}).code(), StatusCode::kInvalidArgument);
}

TEST(EngineCore, PreemptedByRecomputeResumesWithTheSameTokens) {
  expect_preemption_keeps_tokens(PreemptionMode::kRecompute);
}

TEST(EngineCore, PreemptedBySwapResumesWithTheSameTokens) {
  expect_preemption_keeps_tokens(PreemptionMode::kSwap);
}

TEST(EngineCore, AbortFreesEveryBlock) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  auto e = EngineCore::create(*m, options(), nullptr);
  ASSERT_TRUE(e.ok());
  const int32_t free0 = (*e)->kv_manager().pool(0).num_free();
  std::map<RequestId, FinishReason> finish;
  std::vector<RequestId> ids;
  for (const Job& j : random_jobs(10, 96, 9, 30, 40)) {
    RequestParams p;
    p.prompt = j.prompt;
    p.max_tokens = 40;
    p.sampling = greedy();
    p.on_event = [&](const RequestEvent& ev) {
      if (ev.finish != FinishReason::kNone) finish[ev.id] = ev.finish;
    };
    ids.push_back(*(*e)->submit(std::move(p)));
  }
  for (int s = 0; s < 4; ++s) ASSERT_TRUE((*e)->step().ok());
  EXPECT_LT((*e)->kv_manager().pool(0).num_free(), free0);
  // From another thread, while nothing steps; then once more from here after a step started.
  std::thread t([&] {
    for (size_t i = 0; i < ids.size(); i += 2) (*e)->abort(ids[i]);
  });
  t.join();
  for (size_t i = 1; i < ids.size(); i += 2) (*e)->abort(ids[i]);
  (*e)->abort(9999);  // unknown: ignored
  ASSERT_TRUE((*e)->step().ok());
  EXPECT_FALSE((*e)->has_work());
  EXPECT_EQ((*e)->kv_manager().pool(0).num_free(), free0);
  EXPECT_EQ((*e)->stats().kv.used_blocks, 0);
  ASSERT_EQ(finish.size(), ids.size());
  for (auto& [id, why] : finish) EXPECT_EQ(why, FinishReason::kAborted) << id;
}

TEST(EngineCore, RefusesBadRequestsAtSubmit) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  auto e = EngineCore::create(*m, options(32), nullptr);
  ASSERT_TRUE(e.ok());
  RequestParams p;
  EXPECT_EQ((*e)->submit(p).status().code(), StatusCode::kInvalidArgument);  // empty
  p.prompt = {1, 96};
  EXPECT_EQ((*e)->submit(p).status().code(), StatusCode::kInvalidArgument);  // vocabulary
  p.prompt.assign(32, 1);
  EXPECT_EQ((*e)->submit(p).status().code(), StatusCode::kOutOfRange);  // context
  p.prompt = {1, 2};
  p.sampling.temperature = NAN;
  EXPECT_EQ((*e)->submit(p).status().code(), StatusCode::kInvalidArgument);
  p.sampling = greedy();
  p.max_tokens = -1;
  EXPECT_EQ((*e)->submit(p).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE((*e)->has_work());
}

TEST(EngineCore, ARequestThatCanNeverFitFailsAndOthersGoOn) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  EngineCoreOptions o = options();
  o.kv_blocks = 4;  // 16 positions
  o.reserve_max_length = true;
  auto e = EngineCore::create(*m, o, nullptr);
  ASSERT_TRUE(e.ok());
  std::vector<Job> jobs{{std::vector<int32_t>(20, 3), 4}, {{1, 2, 3}, 4}};
  const std::vector<Outcome> got = run_all(**e, jobs);
  EXPECT_EQ(got[0].finish, FinishReason::kError);
  EXPECT_EQ(got[0].error.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(got[0].error.message().find("KV blocks"), std::string::npos);
  EXPECT_EQ(got[1].finish, FinishReason::kMaxTokens);
  EXPECT_EQ(got[1].tokens.size(), 4u);
}

TEST(EngineCore, SubmissionsFromManyThreadsWhileStepping) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  auto e = EngineCore::create(*m, options(), nullptr);
  ASSERT_TRUE(e.ok());
  const std::vector<Job> jobs = random_jobs(32, 96, 11, 20, 8);
  std::mutex mu;
  std::map<size_t, std::vector<int32_t>> got;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < jobs.size(); i += 4) {
        RequestParams p;
        p.prompt = jobs[i].prompt;
        p.max_tokens = jobs[i].max_tokens;
        p.sampling = greedy();
        p.on_event = [&, i](const RequestEvent& ev) {
          std::lock_guard<std::mutex> lock(mu);
          got[i].insert(got[i].end(), ev.tokens.begin(), ev.tokens.end());
          if (ev.finish != FinishReason::kNone) ++done;
        };
        ASSERT_TRUE((*e)->submit(std::move(p)).ok());
      }
    });
  }
  while (done.load() < static_cast<int>(jobs.size())) {
    (*e)->wait_for_work(std::chrono::milliseconds(5));
    ASSERT_TRUE((*e)->step().ok());
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(got[i], alone(*m, jobs[i], options())) << i;
}

TEST(EngineCore, SeededSamplingIsPerRequest) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.seed = 42;
  const std::vector<Job> jobs = random_jobs(8, 96, 13, 20, 12);
  auto e = EngineCore::create(*m, options(), nullptr);
  ASSERT_TRUE(e.ok());
  const std::vector<Outcome> together = run_all(**e, jobs, false, sp);
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto one = EngineCore::create(*m, options(), nullptr);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(run_all(**one, {jobs[i]}, false, sp)[0].tokens, together[i].tokens) << i;
  }
}

TEST(EngineCore, RefusesBadOptions) {
  auto m = load("llama/tiny_llama.gguf", cpu::Impl::kReference);
  ASSERT_TRUE(m);
  EngineCoreOptions o = options();
  o.scheduler.max_seqs = 100;  // > max_batched_tokens 64
  EXPECT_FALSE(EngineCore::create(*m, o, nullptr).ok());
  o = options();
  o.block_size = 0;
  EXPECT_FALSE(EngineCore::create(*m, o, nullptr).ok());
  o = options();
  o.scheduler.watermark = 1.5;
  EXPECT_FALSE(EngineCore::create(*m, o, nullptr).ok());
}

}  // namespace
}  // namespace rinfer
