// The engine core: many requests over one model, batched step by step.
//
//   submit()  from any thread: validates the request (a bad one is an error right away) and
//             queues it with its own sampling settings, stop strings and limits
//   abort()   from any thread, at any time: the request ends with FinishReason::kAborted at the
//             start of the next step and every KV block it held is released
//   step()    on one thread (the serving loop): the scheduler picks the batch (running
//             decodes first, then chunks of waiting prompts, preempting when the KV pool runs
//             out), the runner executes it as one multi-sequence forward pass over the paged
//             KV arena, each request whose prompt is done samples its next token, and the
//             tokens and text stream to the requests' callbacks
//
// The KV pool is sized once at create(): kv_cache.layout contiguous (the baseline) reserves one
// block of n_ctx positions per seat; paged makes blocks of block_size, by default enough for
// every seat at the context length, or kv_blocks of them; checked against the device's free
// memory before it is allocated.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/kv_arena.h"
#include "kv/kv_manager.h"
#include "models/model.h"
#include "rinfer/status.h"

namespace rinfer {

class ThreadPool;

struct EngineCoreOptions {
  int64_t n_ctx = 2048;  // the longest sequence (prompt + reply)
  kv::Layout layout = kv::Layout::kPaged;
  int64_t block_size = 16;  // positions per block (paged)
  bool prefix_caching = true;
  // Each request takes the blocks of its whole length (prompt + max_tokens) when admitted, so it
  // is never preempted; false: blocks as it grows, preemption when the pool runs out.
  bool reserve_max_length = false;
  // > 0: exactly this many blocks per layer group; 0: every seat at the context length.
  int32_t kv_blocks = 0;
  // The pool's size when kv_blocks is 0 (paged): kMax holds every seat at the context length;
  // kAuto starts with one seat's worth and grows (never shrinks) to seats x (mean x 2 + standard
  // deviation) of the lengths the finished requests reached (before any finishes, of the
  // requests present), capped by the context and the device's free memory; preemption covers
  // the requests past it.
  KvPrealloc prealloc = KvPrealloc::kMax;
  // Host blocks per group for preemption by swapping: 0 none, -1 as many as the device pool.
  int32_t swap_blocks = 0;
  // One request alone decoding, with device sampling: its steps are queued ahead of the host
  // where the runner can (DecoderRunner::decode_ahead); false: step by step.
  bool queue_ahead = true;
  SchedulerConfig scheduler;
  // What to change when the KV pool does not fit in memory (names the recipe keys or flags).
  std::string memory_hint;
};

using TextStreamFactory = std::function<std::unique_ptr<TokenTextStream>()>;

struct StepStats {
  int64_t n_seqs = 0;
  int64_t n_tokens = 0;  // rows of the forward batch
  int64_t n_sampled = 0;
  int64_t n_preempted = 0;
  int64_t n_finished = 0;
  double forward_ms = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // computed prompt tokens (prefix hits excluded)
  int64_t generated_tokens = 0;  // sampled
  int64_t computed_tokens = 0;   // rows of every forward batch (recomputation included)
  int64_t preemptions = 0;
  int64_t finished = 0;
  int64_t kv_grows = 0;  // prealloc auto: times the pool grew
  int64_t queued_ahead = 0;  // decode steps queued ahead of the host (a request alone; in steps)
  size_t running = 0;
  size_t waiting = 0;
  kv::KvUsage kv;
};

class EngineCore {
 public:
  // `model` must outlive the core. `text` (may be empty: no text, no end-of-generation check)
  // makes each request's detokenizer.
  static Result<std::unique_ptr<EngineCore>> create(const DecoderModel& model,
                                                    EngineCoreOptions opts, TextStreamFactory text);
  ~EngineCore();

  // Thread-safe. Errors (kInvalidArgument, kOutOfRange): an empty prompt, a token outside the
  // vocabulary, a prompt that leaves no room in the context, sampling settings that fail
  // SamplingParams::validate, a negative max_tokens.
  Result<RequestId> submit(RequestParams params);
  // Thread-safe; unknown or finished ids are ignored.
  void abort(RequestId id);
  // Thread-safe, and safe in a signal handler (one lock-free atomic store): makes the forward
  // pass in flight stop at its next layer (kCancelled inside; its requests are not advanced and
  // run again next step). For Ctrl-C with abort().
  void interrupt() { interrupt_.store(true, std::memory_order_relaxed); }
  // Forgets every cached prefix (blocks held by requests stay): a benchmark's runs each start
  // from an empty cache.
  void clear_prefix_cache();

  // One scheduled batch; returns at once when there is nothing to do. An error here is the
  // engine's own failure (a bug); a request's failure reaches its callback instead.
  Result<StepStats> step();
  // Steps until every request has finished.
  Status run_until_idle();

  // Teacher-forced logits (perplexity, precision gates, parity): evaluates `tokens` as a new
  // sequence of the KV pool (no prefix-cache hit; its blocks given back at the end), at most
  // `chunk` rows per forward pass (0: the step budget, max_batched_tokens), and hands the logits
  // of every row at or after `first_row` to on_rows(row, logits [n, n_vocab]) pass by pass, in
  // order (n is at most the runner's max_logit_rows()). On the calling thread, between steps:
  // nothing may step the core meanwhile. interrupt() stops it (kCancelled). Errors: an empty
  // sequence, one longer than the context, a token outside the vocabulary, a pool the running
  // requests leave too small (kOutOfMemory), a failed pass, the callback's error. `taps` (may be
  // null) gets every pass's activations (models/taps.h; the passes' rows are the positions in
  // order), or the runner's kUnsupported when it cannot tap.
  using ScoreCallback = std::function<Status(int64_t row, std::span<const float> logits)>;
  Status score(std::span<const int32_t> tokens, int64_t first_row, int64_t chunk,
               const ScoreCallback& on_rows, TapSink* taps = nullptr);
  // Per-op times of every pass from now on (null: off), and each pass's wall time
  // (models/op_profile.h): the runner times its ops, steps are not queued ahead. Between steps.
  void set_profile(OpProfileSink* sink) { profile_ = sink; }
  // Thread-safe: whether a request is queued, running or about to be aborted.
  bool has_work() const;
  // Whether constrained rows with these settings are masked and sampled on the runner's device
  // (their masks filled on host threads while the pass runs), or on the host.
  bool masks_on_device(const SamplingParams& sp) const {
    return runner_->masks_on_device() && runner_->samples_on_device(sp);
  }
  // Blocks until has_work() or the timeout (a serving loop between requests).
  void wait_for_work(std::chrono::milliseconds timeout) const;

  EngineStats stats() const;
  const kv::KvManager& kv_manager() const { return *kv_; }
  const kv::KvArena& kv_arena() const { return *arena_; }
  const EngineCoreOptions& options() const { return opts_; }
  const DecoderModel& model() const { return model_; }

 private:
  EngineCore(const DecoderModel& model, EngineCoreOptions opts, TextStreamFactory text);
  Status init();
  void admit_inbox();
  // Ends a request: its last event (with any held-back text), its KV blocks released.
  // `tokens`: the ones sampled this step, handed out with the last event.
  void finish(Request& r, FinishReason why, Status error, std::string text = {},
              std::span<const int32_t> tokens = {}, int32_t sampled = -1);
  Status build_batch(const SchedulerOutput& s);
  // Samples the request's next token from logits row `row` and streams it (finishing the
  // request when it is done).
  void sample_and_stream(Request& r, std::span<float> row, StepStats& st);
  // The request's next token (or the error that ends it): appended, streamed, finished when
  // it stops the request.
  void stream_token(Request& r, Result<int32_t> tok, StepStats& st);
  // Whether this step's batch (sampled on the device) is one request's decode alone, with nothing
  // waiting: then its steps are queued ahead of the host (engine_ahead.cpp).
  bool runs_ahead(const SchedulerOutput& s) const;
  // Up to kAheadSteps decode steps of `r` queued ahead (DecoderRunner::decode_ahead), from the
  // batch `b` of its next step; stops early for new work, an abort or an interrupt.
  void decode_ahead(Request& r, const ForwardBatch& b, StepStats& st);
  bool inbox_has_work() const;
  // tables_ = the block tables of sequence `seq` (every group) for `len` positions; returns their
  // stride (a one-sequence forward batch: engine_score.cpp, engine_ahead.cpp).
  int32_t one_sequence_tables(RequestId seq, int64_t len);

  const DecoderModel& model_;
  EngineCoreOptions opts_;
  TextStreamFactory text_factory_;
  std::unique_ptr<DecoderRunner> runner_;
  std::unique_ptr<kv::KvArena> arena_;
  std::unique_ptr<kv::KvArena> host_arena_;  // swap space (null without swapping)
  std::unique_ptr<kv::KvManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  EngineStats stats_;

  // prealloc auto: grows the pool (arena and manager) when the lengths seen call for it.
  Status maybe_grow();
  std::vector<int32_t> max_blocks_;  // [n_groups] the pool at every seat's full length
  int64_t n_lengths_ = 0;            // finished requests' lengths (Welford)
  double len_mean_ = 0, len_m2_ = 0;

  // Submissions and aborts from other threads.
  mutable std::mutex inbox_mu_;
  mutable std::condition_variable inbox_cv_;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::vector<RequestId> aborts_;
  RequestId next_id_ = 1;
  std::atomic<int64_t> live_{0};  // submitted and not finished
  std::atomic<bool> interrupt_{false};
  OpProfileSink* profile_ = nullptr;

  // The forward batch, reused every step.
  std::vector<int32_t> tokens_, positions_, query_start_, kv_len_, tables_, logit_rows_;
  int32_t table_stride_ = 0;                              // blocks per table row of tables_
  std::vector<float> logits_;                             // [max_seqs, n_vocab]
  std::vector<DecoderRunner::RowSampling> row_sampling_;  // device sampling: per logit row
  std::vector<int32_t> sampled_;                          // ... and the ids it chose
  // The RNG of each request that drew for this step, taken back when the pass fails.
  std::vector<std::pair<Request*, std::mt19937_64>> rng_saved_;
  // Structured output sampled on the device: each constrained row's mask of allowed tokens,
  // filled on mask_pool_'s threads while the pass runs (fill_masks).
  struct MaskJob {
    Request* req = nullptr;
    size_t row = 0;  // of row_sampling_
    Status status;
  };
  Status fill_masks();
  static Status take_pending(Request& r);
  std::vector<uint32_t> mask_bits_;  // [rows, words], when the runner has no staging of its own
  std::vector<MaskJob> mask_jobs_;
  std::unique_ptr<ThreadPool> mask_pool_;
};

// How a request run by run_request ended.
struct RequestOutcome {
  FinishReason finish = FinishReason::kNone;
  RequestStats stats;
};

// Runs one request to its end on a core that nothing else steps meanwhile (a single-user client:
// rinfer run, bench): submits it, steps until it finishes and returns how it ended, or its error
// (a bad request, a failed step, FinishReason::kError). `cancel` (may be null) aborts it between
// steps. The request's own on_event still sees every event.
Result<RequestOutcome> run_request(EngineCore& core, RequestParams params,
                                   const std::atomic<bool>* cancel = nullptr);

}  // namespace rinfer
