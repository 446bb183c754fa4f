// The engine core on the CUDA runner (paged bf16 KV arena, paged attention, GEMMs for batches,
// the model's decode matvecs for a decode step of one sequence (llama_cuda_model_test.cpp tests
// those against the single-sequence decode), per-row device sampling): many requests served
// together against each served alone,
// device sampling against host sampling of the same logits, preemption by swap and by
// recompute, aborts, and the real SmolLM2-135M-Instruct when its file is here. Batching changes
// the GEMMs' shapes (and cuBLASLt's kernels), so the bar against "alone" is teacher-forced top-1
// agreement, not bit identity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cublas_lt.h"
#include "core/error.h"
#include "cuda_test_util.h"
#include "engine/engine_core.h"
#include "engine/precision.h"
#include "engine/token_constraint.h"
#include "models/llama/cuda/llama_cuda_model.h"
#include "models/llama/shapes.h"
#include "ops/cuda/ops_cuda.h"
#include "smollm2_served.h"

namespace rinfer {
namespace {

struct Reply {
  std::vector<int32_t> tokens;
  std::vector<int32_t> sampled;
  FinishReason finish = FinishReason::kNone;
};

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0.0f;
  s.repeat_penalty = 1.0f;
  return s;
}

std::vector<Reply> serve(EngineCore& e, const std::vector<std::vector<int32_t>>& inputs,
                         int64_t n_out, const SamplingParams& sp, const std::vector<Reply>* forced,
                         bool want_logits = false) {
  std::vector<Reply> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    RequestParams p;
    p.prompt = inputs[i];
    p.max_tokens = n_out;
    p.ignore_eos = true;
    p.sampling = sp;
    p.sampling.seed = 1000 + i;
    p.want_logits = want_logits;
    if (forced != nullptr) p.forced = (*forced)[i].tokens;
    p.on_event = [&out, i](const RequestEvent& ev) {
      out[i].tokens.insert(out[i].tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (!ev.tokens.empty()) out[i].sampled.push_back(ev.sampled);
      if (ev.finish != FinishReason::kNone) out[i].finish = ev.finish;
      EXPECT_TRUE(ev.error.ok()) << ev.error.to_string();
    };
    EXPECT_TRUE(e.submit(std::move(p)).ok());
  }
  const Status st = e.run_until_idle();
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// Teacher-forced top-1 agreement of `forced` (served with alone's tokens forced) with alone.
double agreement(const std::vector<Reply>& alone, const std::vector<Reply>& forced,
                 int* n = nullptr) {
  int agree = 0, total = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(forced[i].tokens, alone[i].tokens);
    for (size_t t = 0; t < alone[i].tokens.size() && t < forced[i].sampled.size(); ++t) {
      agree += forced[i].sampled[t] == alone[i].tokens[t] ? 1 : 0;
      ++total;
    }
  }
  if (n != nullptr) *n = total;
  return total > 0 ? static_cast<double>(agree) / total : 0.0;
}

class CudaEngineCore : public test::CudaTest {
 protected:
  void SetUp() override {
    test::CudaTest::SetUp();
    if (IsSkipped()) return;
    auto hp = llama::named_shape("smollm2");
    ASSERT_TRUE(hp.ok());
    hp->n_layer = 6;  // the shape of SmolLM2's layers, fewer of them
    LoadOptions lo;
    lo.device = Device::cuda(0);
    auto m = llama::make_random_cuda_model(*hp, DType::kBF16, 77, lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }
  std::unique_ptr<EngineCore> make(EngineCoreOptions o) {
    auto e = EngineCore::create(*model_, o, nullptr);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static EngineCoreOptions options() {
    EngineCoreOptions o;
    o.n_ctx = 512;
    o.scheduler.max_seqs = 64;
    o.scheduler.max_batched_tokens = 512;
    return o;
  }
  // Prompts of 3 to 300 random tokens.
  std::vector<std::vector<int32_t>> prompts(size_t n, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < n; ++i) {
      std::vector<int32_t> p(3 + rng() % 298);
      for (int32_t& t : p) t = static_cast<int32_t>(rng() % model_->hparams().n_vocab);
      out.push_back(std::move(p));
    }
    return out;
  }
  std::unique_ptr<DecoderModel> model_;
};

TEST_F(CudaEngineCore, TheModelHasARunnerAndABf16Arena) {
  auto e = make(options());
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->kv_arena().device().is_cuda());
  EXPECT_EQ(e->kv_arena().spec().dtype, DType::kBF16);
}

TEST_F(CudaEngineCore, DeviceSamplingOffSendsEveryRowToTheHost) {
  RunnerOptions ro;
  ro.max_tokens = 64;
  ro.max_seqs = 4;
  auto on = model_->create_runner(ro);
  ASSERT_TRUE(on.ok()) << on.status().to_string();
  EXPECT_TRUE((*on)->samples_on_device(greedy()));
  EXPECT_TRUE((*on)->masks_on_device());
  auto hp = llama::named_shape("smollm2");
  ASSERT_TRUE(hp.ok());
  hp->n_layer = 2;
  LoadOptions lo;
  lo.device = Device::cuda(0);
  lo.cuda.device_sampling = false;  // strategies.device_sampling: {enabled: false}
  auto m = llama::make_random_cuda_model(*hp, DType::kBF16, 78, lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto off = (*m)->create_runner(ro);
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_FALSE((*off)->samples_on_device(greedy()));
  EXPECT_FALSE((*off)->masks_on_device());
  EXPECT_FALSE((*off)->decodes_ahead(greedy()));
}

TEST_F(CudaEngineCore, SixtyFourRequestsTogetherMatchEachAlone) {
  const auto inputs = prompts(64, 1);
  std::vector<Reply> alone;
  for (const auto& in : inputs) {
    auto e = make(options());
    ASSERT_TRUE(e);
    alone.push_back(serve(*e, {in}, 16, greedy(), nullptr)[0]);
  }
  auto together = make(options());
  const std::vector<Reply> batched = serve(*together, inputs, 16, greedy(), nullptr);
  auto fe = make(options());
  const std::vector<Reply> forced = serve(*fe, inputs, 16, greedy(), &alone);
  int identical = 0, total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(alone[i].tokens.size(), 16u);
    identical += batched[i].tokens == alone[i].tokens ? 1 : 0;
  }
  const double a = agreement(alone, forced, &total);
  std::printf(
      "random smollm2-shape model, 6 layers: identical greedy replies %d of 64; "
      "teacher-forced top-1 agreement %.4f of %d\n",
      identical, a, total);
  EXPECT_GE(a, 0.995);
}

TEST_F(CudaEngineCore, DeviceSamplingMatchesHostSamplingOfTheSameLogits) {
  const auto inputs = prompts(48, 2);
  SamplingParams pen = greedy();
  pen.repeat_penalty = 1.3f;
  pen.presence_penalty = 0.2f;
  pen.repeat_last_n = 64;
  SamplingParams chain;  // the defaults: temperature, top-k, top-p, min-p, penalties
  chain.temperature = 0.9f;
  for (const SamplingParams& sp : {pen, chain}) {
    auto dev = make(options());
    auto host = make(options());
    ASSERT_TRUE(dev && host);
    const auto on_device = serve(*dev, inputs, 12, sp, nullptr, false);
    const auto on_host = serve(*host, inputs, 12, sp, nullptr, /*want_logits=*/true);
    int same = 0;
    for (size_t i = 0; i < inputs.size(); ++i) same += on_device[i].tokens == on_host[i].tokens;
    std::printf("temperature %.1f: %d of %zu replies identical\n", sp.temperature, same,
                inputs.size());
    // The same batches give the same logits; the chains agree but for a uniform that falls on
    // a boundary between two candidates (f32 on the device, f64 on the host).
    EXPECT_GE(same, static_cast<int>(inputs.size()) - 2);
  }
}

// A constraint that allows the tokens t with t % 5 == k % 5 after k accepted tokens; with
// fail_at >= 0 its mask fails at that step.
class ModFive final : public TokenConstraint {
 public:
  explicit ModFive(int64_t n_vocab, int64_t fail_at = -1) : n_vocab_(n_vocab), fail_at_(fail_at) {}
  class State final : public TokenConstraintState {
   public:
    State(int64_t n_vocab, int64_t fail_at) : n_vocab_(n_vocab), fail_at_(fail_at) {}
    Status fill(std::span<uint32_t> bits) override {
      if (k_ == fail_at_) return internal_error("mask {} refused", k_);
      std::fill(bits.begin(), bits.end(), 0u);
      for (int64_t t = k_ % 5; t < n_vocab_; t += 5) bits[t / 32] |= 1u << (t % 32);
      return ok_status();
    }
    Status accept(int32_t token) override {
      if (token % 5 != k_ % 5) return internal_error("token {} at step {}", token, k_);
      ++k_;
      return ok_status();
    }

   private:
    int64_t n_vocab_, fail_at_, k_ = 0;
  };
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<State>(n_vocab_, fail_at_);
  }
  std::string describe() const override { return "mod five"; }

 private:
  int64_t n_vocab_, fail_at_;
};

TEST_F(CudaEngineCore, DeviceMasksMatchHostMasksOfTheSameLogits) {
  const auto inputs = prompts(40, 4);
  const int64_t V = model_->hparams().n_vocab;
  auto mod5 = std::make_shared<ModFive>(V);
  SamplingParams chain;
  chain.temperature = 0.9f;
  for (const SamplingParams& sp : {greedy(), chain}) {
    std::vector<std::vector<int32_t>> got[2];
    for (int host = 0; host < 2; ++host) {
      auto e = make(options());
      ASSERT_TRUE(e);
      got[host].resize(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        RequestParams p;
        p.prompt = inputs[i];
        p.max_tokens = 10;
        p.ignore_eos = true;
        p.sampling = sp;
        p.sampling.seed = 500 + i;
        p.want_logits = host == 1;  // the rows go to the host, masked and sampled there
        // Every other request constrained: a batch mixes masked and free rows.
        if (i % 2 == 0) p.constraint = mod5;
        p.on_event = [&got, host, i](const RequestEvent& ev) {
          EXPECT_TRUE(ev.error.ok()) << ev.error.to_string();
          got[host][i].insert(got[host][i].end(), ev.tokens.begin(), ev.tokens.end());
        };
        ASSERT_TRUE(e->submit(std::move(p)).ok());
      }
      ASSERT_TRUE(e->run_until_idle().ok());
    }
    int same = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(got[0][i].size(), 10u) << i;
      same += got[0][i] == got[1][i] ? 1 : 0;
      if (i % 2 != 0) continue;
      for (size_t k = 0; k < got[0][i].size(); ++k) {
        EXPECT_EQ(got[0][i][k] % 5, static_cast<int32_t>(k % 5))
            << "request " << i << " token " << k;
      }
    }
    std::printf("temperature %.1f: %d of %zu replies identical, device and host masks\n",
                sp.temperature, same, inputs.size());
    EXPECT_GE(same, static_cast<int>(inputs.size()) - 2);
  }
  // A mask that fails ends its request with the error; the others go on.
  auto e = make(options());
  ASSERT_TRUE(e);
  auto failing = std::make_shared<ModFive>(V, 3);
  Status err[2];
  int64_t n[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    RequestParams p;
    p.prompt = inputs[static_cast<size_t>(i)];
    p.max_tokens = 8;
    p.ignore_eos = true;
    p.sampling = greedy();
    p.constraint = i == 0 ? failing : mod5;
    p.on_event = [&err, &n, i](const RequestEvent& ev) {
      n[i] += static_cast<int64_t>(ev.tokens.size());
      if (!ev.error.ok()) err[i] = ev.error;
    };
    ASSERT_TRUE(e->submit(std::move(p)).ok());
  }
  ASSERT_TRUE(e->run_until_idle().ok());
  EXPECT_EQ(n[0], 3);
  EXPECT_NE(err[0].message().find("mask 3 refused"), std::string::npos) << err[0].to_string();
  EXPECT_NE(err[0].message().find("mod five"), std::string::npos) << err[0].to_string();
  EXPECT_TRUE(err[1].ok()) << err[1].to_string();
  EXPECT_EQ(n[1], 8);
}

TEST_F(CudaEngineCore, PreemptedRequestsResumeBySwapAndByRecompute) {
  const auto inputs = prompts(24, 3);
  auto free_run = make(options());
  ASSERT_TRUE(free_run);
  const auto want = serve(*free_run, inputs, 24, greedy(), nullptr);
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    EngineCoreOptions o = options();
    o.kv_blocks = 60;  // 960 positions for 24 requests of up to 324
    o.scheduler.preemption = mode;
    if (mode == PreemptionMode::kSwap) o.swap_blocks = -1;
    auto e = make(o);
    ASSERT_TRUE(e);
    const auto got = serve(*e, inputs, 24, greedy(), &want);
    EXPECT_GT(e->stats().preemptions, 0);
    const double a = agreement(want, got);
    std::printf("%s: %lld preemptions, teacher-forced agreement with the unpreempted run %.4f\n",
                mode == PreemptionMode::kSwap ? "swap" : "recompute",
                static_cast<long long>(e->stats().preemptions), a);
    EXPECT_GE(a, 0.995);
    EXPECT_TRUE(e->kv_manager().check_invariants().ok());
  }
}

TEST_F(CudaEngineCore, AbortFreesEveryBlock) {
  EngineCoreOptions o = options();
  o.prefix_caching = false;
  auto e = make(o);
  ASSERT_TRUE(e);
  const int32_t free0 = e->kv_manager().pool(0).num_free();
  std::vector<RequestId> ids;
  std::map<RequestId, FinishReason> finish;
  for (const auto& in : prompts(10, 4)) {
    RequestParams p;
    p.prompt = in;
    p.max_tokens = 40;
    p.sampling = greedy();
    p.on_event = [&](const RequestEvent& ev) {
      if (ev.finish != FinishReason::kNone) finish[ev.id] = ev.finish;
    };
    ids.push_back(*e->submit(std::move(p)));
  }
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(e->step().ok());
  EXPECT_LT(e->kv_manager().pool(0).num_free(), free0);
  for (RequestId id : ids) e->abort(id);
  ASSERT_TRUE(e->step().ok());
  EXPECT_FALSE(e->has_work());
  EXPECT_EQ(e->kv_manager().pool(0).num_free(), free0);
  EXPECT_EQ(e->stats().kv.used_blocks, 0);
  EXPECT_EQ(finish.size(), ids.size());
  for (auto& [id, why] : finish) EXPECT_EQ(why, FinishReason::kAborted) << id;
}

// One request alone: its decode steps queued ahead of the host (DecoderRunner::decode_ahead,
// each sampled id fed to the next step on the device) give exactly the tokens of the same steps
// run one at a time, with the penalties' window growing on the device and with draws; runs cross
// block boundaries and end at max_tokens; every block comes back.
TEST_F(CudaEngineCore, StepsQueuedAheadMatchStepByStep) {
  auto inputs = prompts(3, 5);
  inputs.push_back({11, 12, 13, 14, 15});  // a history shorter than the penalties' window
  SamplingParams pen = greedy();
  pen.repeat_penalty = 1.3f;
  pen.presence_penalty = 0.2f;
  pen.repeat_last_n = 64;
  SamplingParams chain;  // the defaults: temperature, top-k, top-p, min-p, penalties
  chain.temperature = 0.9f;
  for (const SamplingParams& sp : {greedy(), pen, chain}) {
    for (const auto& in : inputs) {
      EngineCoreOptions o = options();
      o.prefix_caching = false;
      o.queue_ahead = true;
      auto ahead = make(o);
      o.queue_ahead = false;
      auto stepwise = make(o);
      ASSERT_TRUE(ahead && stepwise);
      const auto a = serve(*ahead, {in}, 100, sp, nullptr);
      const auto b = serve(*stepwise, {in}, 100, sp, nullptr);
      ASSERT_EQ(a[0].tokens.size(), 100u);
      EXPECT_EQ(a[0].tokens, b[0].tokens) << "temperature " << sp.temperature;
      EXPECT_EQ(a[0].finish, FinishReason::kMaxTokens);
      // One step for the prompt, then every decode step but the first of each run of up to 32
      // queued ahead.
      EXPECT_EQ(ahead->stats().steps, 100);
      EXPECT_GE(ahead->stats().queued_ahead, 90) << ahead->stats().queued_ahead;
      EXPECT_EQ(stepwise->stats().steps, 100);
      EXPECT_EQ(stepwise->stats().queued_ahead, 0);
      EXPECT_EQ(ahead->stats().kv.used_blocks, 0);
      EXPECT_TRUE(ahead->kv_manager().check_invariants().ok());
    }
  }
}

// A run queued ahead stops for new work: a request submitted while another decodes alone gets
// its first token before the other ends; an abort ends a run within a step or two.
TEST_F(CudaEngineCore, RunsAheadStopForNewRequestsAndAborts) {
  EngineCoreOptions o = options();
  o.queue_ahead = true;
  auto e = make(o);
  ASSERT_TRUE(e);
  const auto in = prompts(2, 6);
  std::vector<std::string> order;
  int n_first = 0;
  RequestId first_id = 0;
  RequestParams p;
  p.prompt = in[0];
  p.max_tokens = 200;
  p.ignore_eos = true;
  p.sampling = greedy();
  p.on_event = [&](const RequestEvent& ev) {
    n_first += static_cast<int>(ev.tokens.size());
    if (n_first == 10) {
      RequestParams q;
      q.prompt = in[1];
      q.max_tokens = 5;
      q.ignore_eos = true;
      q.sampling = greedy();
      q.on_event = [&](const RequestEvent& qe) {
        if (qe.finish != FinishReason::kNone) order.push_back("second done");
      };
      EXPECT_TRUE(e->submit(std::move(q)).ok());
    }
    if (n_first == 60) e->abort(first_id);
    if (ev.finish != FinishReason::kNone) {
      order.push_back("first done");
      EXPECT_EQ(ev.finish, FinishReason::kAborted);
    }
  };
  first_id = *e->submit(std::move(p));
  ASSERT_TRUE(e->run_until_idle().ok());
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], "second done");
  EXPECT_LE(n_first, 62) << "tokens after the abort";
  EXPECT_EQ(e->stats().kv.used_blocks, 0);
}

// The small-batch matvec (strategies.kernels.cuda.batch_matvec_rows, default 8) in decode steps
// of 5, 4, 3 and 2 sequences, per quantized weight format: the logits against those of the GEMM
// path (batch_matvec_rows 0) with the same tokens forced. Both read the same bf16 activations;
// the GEMM rounds the weights to bf16, the matvec dequantizes them exactly.
TEST(CudaEngineCoreSmallBatch, MatvecStepsMatchTheGemmSteps) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  auto hp = llama::named_shape("smollm2");
  ASSERT_TRUE(hp.ok());
  hp->n_layer = 4;
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    // [run][request][step]; run 0 the matvec, run 1 the GEMMs with run 0's tokens forced.
    std::vector<std::vector<std::vector<float>>> logits[2];
    std::vector<std::vector<int32_t>> tokens(5);
    for (int run = 0; run < 2; ++run) {
      LoadOptions lo;
      lo.device = Device::cuda(0);
      lo.cuda.kernels.batch_matvec_rows = run == 0 ? 8 : 0;
      auto m = llama::make_random_cuda_model(*hp, dt, 77, lo);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EngineCoreOptions o;
      o.n_ctx = 256;
      o.scheduler.max_seqs = 8;
      o.scheduler.max_batched_tokens = 256;
      auto e = EngineCore::create(**m, o, nullptr);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      logits[run].resize(5);
      std::mt19937 rng(9);
      for (size_t i = 0; i < 5; ++i) {
        RequestParams p;
        p.prompt.resize(3 + 9 * i);
        for (int32_t& t : p.prompt) t = static_cast<int32_t>(rng() % hp->n_vocab);
        p.max_tokens = static_cast<int64_t>(10 + 2 * i);  // the batch shrinks step by step
        p.ignore_eos = true;
        p.sampling = greedy();
        p.want_logits = true;
        if (run == 1) p.forced = tokens[i];
        p.on_event = [&, run, i](const RequestEvent& ev) {
          if (ev.tokens.empty()) return;
          logits[run][i].emplace_back(ev.logits.begin(), ev.logits.end());
          if (run == 0) tokens[i].insert(tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
        };
        ASSERT_TRUE((*e)->submit(std::move(p)).ok());
      }
      const Status st = (*e)->run_until_idle();
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    double worst = 0;
    int agree = 0, total = 0;
    for (size_t i = 0; i < 5; ++i) {
      ASSERT_EQ(logits[0][i].size(), 10 + 2 * i);
      ASSERT_EQ(logits[1][i].size(), logits[0][i].size());
      for (size_t t = 0; t < logits[0][i].size(); ++t) {
        const auto& a = logits[0][i][t];
        const auto& b = logits[1][i][t];
        worst = std::max(worst, test::rel_l2(a, b));
        agree += std::max_element(a.begin(), a.end()) - a.begin() ==
                         std::max_element(b.begin(), b.end()) - b.begin()
                     ? 1
                     : 0;
        ++total;
      }
    }
    std::printf(
        "%s: worst logits rel L2, small-batch matvec against the GEMMs: %.3g; same top-1 %d of "
        "%d\n",
        std::string(dtype_name(dt)).c_str(), worst, agree, total);
    // The GEMMs round the dequantized weights to bf16 where the matvec keeps them exact
    // (CudaGemm.DeviceMadeQ8_0WeightsMatchTheirDownloadedValues); this random network amplifies
    // that more for Q8_0 than for Q4 (figures: docs/serving.md). A wrong layout is at 1 and more.
    EXPECT_LT(worst, dt == DType::kQ8_0 ? 1e-1 : 3e-2);
    EXPECT_GE(agree, total * 9 / 10);
    EXPECT_GT(worst, 0.0);  // the two paths did run different kernels
  }
}

// The real SmolLM2 (Q4_1 weights, dequantized per GEMM) on the H200: 64 chat prompts
// (smollm2_served.h).
TEST(CudaEngineCoreSmolLM2, SixtyFourPromptsTogetherMatchEachAlone) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  LoadOptions lo;
  lo.device = Device::cuda(0);
  test::expect_smollm2_batched_matches_alone(lo, "SmolLM2 on CUDA");
}

// Decode steps of 2 to 5 sequences replayed from batch graphs (cuda_graphs, the default), padded
// to buckets of 8, 4 and 2 rows, one sequence crossing the 1024-position length bound mid-run:
// [0] graphs, host logits; [1] graphs off, the same tokens forced: the logits against [0];
// [2] graphs, sampled on the device (greedy), the same tokens forced: its ids against [0]'s
// argmax. bf16 weights (cuBLASLt) and Q4_0 (the small-batch matvec over the padded rows).
TEST(CudaEngineCoreBatchGraphs, GraphStepsMatchTheStepsWithoutGraphs) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  auto hp = llama::named_shape("smollm2");
  ASSERT_TRUE(hp.ok());
  hp->n_layer = 4;
  constexpr size_t kReq = 5;
  for (DType dt : {DType::kBF16, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<std::vector<std::vector<float>>> logits[3];  // [run][request][step]
    std::vector<std::vector<int32_t>> tokens(kReq), sampled(kReq);
    int64_t graph_steps[3] = {0, 0, 0};
    for (int run = 0; run < 3; ++run) {
      LoadOptions lo;
      lo.device = Device::cuda(0);
      lo.cuda.graphs = run != 1;
      auto m = llama::make_random_cuda_model(*hp, dt, 77, lo);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EngineCoreOptions o;
      o.n_ctx = 2048;
      o.scheduler.max_seqs = 8;
      o.scheduler.max_batched_tokens = 2048;
      auto e = EngineCore::create(**m, o, nullptr);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      logits[run].resize(kReq);
      std::mt19937 rng(9);
      for (size_t i = 0; i < kReq; ++i) {
        RequestParams p;
        p.prompt.resize(i == 0 ? 1015 : 3 + 9 * i);  // request 0 crosses 1024 at its step 9
        for (int32_t& t : p.prompt) t = static_cast<int32_t>(rng() % hp->n_vocab);
        p.max_tokens = static_cast<int64_t>(24 - 3 * i);  // the batch shrinks step by step
        p.ignore_eos = true;
        p.sampling = greedy();
        p.want_logits = run != 2;
        if (run > 0) p.forced = tokens[i];
        p.on_event = [&, run, i](const RequestEvent& ev) {
          if (ev.tokens.empty()) return;
          if (run != 2) logits[run][i].emplace_back(ev.logits.begin(), ev.logits.end());
          if (run == 0) tokens[i].insert(tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
          if (run == 2) sampled[i].push_back(ev.sampled);
        };
        ASSERT_TRUE((*e)->submit(std::move(p)).ok());
      }
      const Status st = (*e)->run_until_idle();
      ASSERT_TRUE(st.ok()) << st.to_string();
      graph_steps[run] = llama::cuda_graph_steps(**m);
    }
    double worst = 0;
    int agree = 0, total = 0;
    for (size_t i = 0; i < kReq; ++i) {
      const size_t n = 24 - 3 * i;
      ASSERT_EQ(logits[0][i].size(), n);
      ASSERT_EQ(logits[1][i].size(), n);
      ASSERT_EQ(sampled[i].size(), n);
      for (size_t t = 0; t < n; ++t) {
        worst = std::max(worst, test::rel_l2(logits[0][i][t], logits[1][i][t]));
        const auto& l = logits[0][i][t];
        const auto top = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        agree += sampled[i][t] == top ? 1 : 0;
        ++total;
      }
    }
    std::printf(
        "%s: decode steps from batch graphs: %lld (host logits), %lld (sampled); worst logits "
        "rel L2 against the steps without graphs %.3g; device greedy ids = host argmax %d of %d\n",
        std::string(dtype_name(dt)).c_str(), static_cast<long long>(graph_steps[0]),
        static_cast<long long>(graph_steps[2]), worst, agree, total);
    // Steps of 2 to 5 rows: 5 of 5 rows (bucket 8) 9 steps, 4 rows 3 more, ... one-row steps
    // after: every bucket's first step runs eagerly, the rest replay.
    EXPECT_GE(graph_steps[0], 10);
    EXPECT_GE(graph_steps[2], 10);
    EXPECT_EQ(graph_steps[1], 0);
    EXPECT_LT(worst, dt == DType::kBF16 ? 1e-2 : 3e-2);
    EXPECT_GE(agree, total - 1);
  }
}

// The precision gate's decode check on `m` (an engine core of 4 seats over 512 positions): 200
// random tokens teacher-forced, then decode_precision over the last kDecodeGateSteps at 1 and 3
// seats; `replayed` the decode steps that replayed a graph.
struct GateRun {
  PrecisionReport report;
  int64_t replayed = 0;
  int64_t used_blocks = 0;  // after the run
};
Result<GateRun> decode_gate(DecoderModel& m, int64_t n_vocab, uint32_t seed) {
  EngineCoreOptions o;
  o.n_ctx = 512;
  o.scheduler.max_seqs = 4;
  o.scheduler.max_batched_tokens = 512;
  RINFER_ASSIGN_OR_RETURN(auto e, EngineCore::create(m, o, nullptr));
  std::mt19937 rng(seed);
  std::vector<int32_t> toks(200);
  for (int32_t& t : toks) t = static_cast<int32_t>(rng() % n_vocab);
  RINFER_ASSIGN_OR_RETURN(auto ref, teacher_forced_logits(*e, toks));
  const int64_t before = llama::cuda_graph_steps(m);
  GateRun g;
  RINFER_ASSIGN_OR_RETURN(g.report,
                          decode_precision(*e, ref, toks, kDecodeGateSteps, kDecodeGateSeats, {}));
  g.replayed = llama::cuda_graph_steps(m) - before;
  g.used_blocks = e->kv_manager().usage().used_blocks;
  return g;
}

// The precision gate's decode check (engine/precision.h: decode_precision) runs the decode path
// that teacher forcing never reaches: the one-row graphs at one seat, a batch graph (3 rows in
// the bucket of 4) at three. Against the same model's teacher-forced rows it passes the default
// gate, and the graphs did replay.
TEST(CudaEngineCoreDecodeGate, GraphStepsPassAgainstTeacherForcing) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  auto hp = llama::named_shape("smollm2");
  ASSERT_TRUE(hp.ok());
  hp->n_layer = 4;
  for (DType dt : {DType::kBF16, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    LoadOptions lo;
    lo.device = Device::cuda(0);
    auto m = llama::make_random_cuda_model(*hp, dt, 78, lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto g = decode_gate(**m, hp->n_vocab, 5);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const PrecisionReport* p = &g->report;
    const int64_t replayed = g->replayed;
    std::printf(
        "%s: decode gate over %lld positions at 1 and 3 seats: top-1 %.4f, mean KL %.3g, "
        "rel L2 %.3g, ppl change %+.3f%%; %lld steps replayed from graphs\n",
        std::string(dtype_name(dt)).c_str(), static_cast<long long>(p->positions),
        p->logits.top1_agreement, p->logits.mean_kl, p->logits.rel_l2, 100.0 * p->ppl_change,
        static_cast<long long>(replayed));
    EXPECT_TRUE(p->passed) << p->failures;
    EXPECT_EQ(p->positions, kDecodeGateSteps + 1);
    // 64 one-row steps and 64 of three rows, each graph's first step eager.
    EXPECT_GE(replayed, 100);
    EXPECT_EQ(g->used_blocks, 0);
  }
}

// FP8 weights (f8_e4m3 layer matrices, bf16 embedding and output): a one-seat decode step reads
// them as weights only (the W8A16 matvec, f32 activations); the small-batch path at three seats
// quantizes each activation row to e4m3 and runs matvec_f8; teacher forcing quantizes the bf16
// rows of its passes and runs cuBLASLt's FP8 GEMM. Over the same weight codes, the activations'
// e4m3 rounding (RMS relative error 2^-3 / sqrt(12), 3.6%, in each matrix's input) is the
// difference. One layer is held to rel L2 0.1 (a few such roundings); this random network
// amplifies differences layer by layer, so four are reported. A wrong fragment layout, buffer or
// scale gives unrelated logits (rel L2 near 1) at one layer already.
TEST(CudaEngineCoreFp8, DecodeStepsStayNearTeacherForcing) {
  if (!cuda_devices().ok()) GTEST_SKIP() << "no usable CUDA device";
  // Without cuBLASLt's FP8 GEMM the passes dequantize the weights and keep bf16 activations:
  // then only top-1 is held.
  auto lt = cuda::CublasLt::create(0);
  ASSERT_TRUE(lt.ok()) << lt.status().to_string();
  auto f8_gemm = cuda::gemm_f8_supported(*lt);
  ASSERT_TRUE(f8_gemm.ok()) << f8_gemm.status().to_string();
  for (int64_t n_layer : {1, 4}) {
    SCOPED_TRACE(testing::Message() << n_layer << " layers");
    auto hp = llama::named_shape("smollm2");
    ASSERT_TRUE(hp.ok());
    hp->n_layer = n_layer;
    LoadOptions lo;
    lo.device = Device::cuda(0);
    auto m = llama::make_random_cuda_model(*hp, DType::kF8E4M3, 79, lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    // Per token: the bf16 embedding row and the whole tied output table, and the layer matrices
    // at one byte a weight and an f32 scale a row.
    const int64_t e = hp->n_embd, ff = hp->n_ff, kv = hp->kv_dim(), q = hp->n_head * hp->head_dim;
    const int64_t rows = (q + 2 * kv) + e + 2 * ff + e;
    const int64_t layer = (q + 2 * kv) * e + e * q + 2 * ff * e + e * ff + 4 * rows;
    EXPECT_EQ((*m)->weight_bytes_per_token(),
              static_cast<uint64_t>(2 * e + 2 * hp->n_vocab * e + n_layer * layer));
    auto g = decode_gate(**m, hp->n_vocab, 6);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const PrecisionReport* p = &g->report;
    const int64_t replayed = g->replayed;
    std::printf(
        "f8_e4m3, %lld layers: decode (W8A16 matvec, matvec_f8) against teacher forcing (FP8 "
        "GEMMs) "
        "over %lld positions at 1 and 3 seats: top-1 %.4f, mean KL %.3g, rel L2 %.3g; %lld graph "
        "steps\n",
        static_cast<long long>(n_layer), static_cast<long long>(p->positions),
        p->logits.top1_agreement, p->logits.mean_kl, p->logits.rel_l2,
        static_cast<long long>(replayed));
    if (n_layer == 1 && *f8_gemm) EXPECT_LT(p->logits.rel_l2, 0.1);
    EXPECT_GE(p->logits.top1_agreement, 0.9);
    EXPECT_GT(p->logits.rel_l2, 0.0);  // the decode steps did run other kernels
    EXPECT_GE(replayed, 100);
  }
}

}  // namespace
}  // namespace rinfer
