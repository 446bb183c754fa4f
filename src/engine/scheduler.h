// The scheduler: each step, which requests run and how many of their tokens.
//
// One rule covers prefill, chunked prefill and decode: a request owes `tokens - computed`
// tokens, and a step hands out a token budget (max_batched_tokens) over at most max_seqs
// requests:
//   1. running requests first, in admission order: a decode takes 1 token, an unfinished
//      prefill the rest of its prompt up to what the budget has left (a chunk). When the KV
//      pool cannot give a request its blocks, the most recently admitted running request is
//      preempted (recompute: its blocks are freed and it recomputes later, usually cheaply from
//      the prefix cache; swap: its blocks are copied to host memory and come back intact) until
//      the request fits or is itself the one preempted;
//   2. then, if nothing was preempted, waiting requests (FCFS, or by priority then arrival) in
//      order, while budget and seats remain: swapped ones come back first when their blocks
//      fit; new ones take their prefix-cache hit, then a chunk of their prompt, admitted only
//      when the pools keep a watermark of free blocks afterwards (so running decodes do not
//      preempt each other at once).
// With recompute_each_step (kv_cache off) a request due a decode row first drops its keys and
// values and owes its whole sequence again.
// Static batching (the baseline) is the same loop, except that waiting requests are admitted
// only into an open batch: a batch opens when nothing runs, takes members (their prompts over as
// many steps as the budget needs) until its seats are full or nobody waits, and the next one
// waits for its last request.
#pragma once

#include <cstdint>
#include <deque>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "kv/kv_manager.h"
#include "strategies/strategy_config.h"

namespace rinfer {

enum class QueueOrder : uint8_t { kFcfs, kPriority };

struct SchedulerConfig {
  BatchingPolicy policy = BatchingPolicy::kContinuous;
  int64_t max_batched_tokens = 512;  // tokens per step (rows of the forward batch)
  int64_t max_seqs = 64;             // requests per step
  bool chunked_prefill = true;       // false: a prompt is admitted only whole
  QueueOrder order = QueueOrder::kFcfs;
  double watermark = 0.01;  // fraction of each pool kept free when admitting
  PreemptionMode preemption = PreemptionMode::kRecompute;
  // kv_cache.prealloc max: a request takes the blocks of its whole length when admitted, so it
  // is never preempted.
  bool reserve_max_length = false;
  // kv_cache off (the baseline): no keys and values are kept from one token to the next. A
  // request due a decode row gives its blocks back and computes its whole sequence again, in
  // chunks as a prompt (prefix caching must be off).
  bool recompute_each_step = false;
};

struct ScheduledSeq {
  Request* req = nullptr;
  int64_t n_new = 0;  // tokens computed this step: tokens[computed, computed + n_new)
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<kv::BlockCopy> swap_out;  // device -> host, run before this step's forward
  std::vector<kv::BlockCopy> swap_in;   // host -> device, run after swap_out
  // Requests that can never run (taken out of the queues, KV freed): the engine fails them.
  std::vector<std::pair<Request*, Status>> failed;
  int64_t n_preempted = 0;
  int64_t n_tokens() const;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, kv::KvManager& kv, int64_t n_ctx);

  const SchedulerConfig& config() const { return cfg_; }
  // A new request joins the waiting queue.
  void add(Request* r);
  // Takes a request out of the queues and frees its KV blocks (finished or aborted).
  void remove(Request* r);
  Result<SchedulerOutput> schedule();

  size_t n_running() const { return running_.size(); }
  size_t n_waiting() const { return waiting_.size(); }
  int64_t n_preemptions() const { return n_preemptions_; }
  bool empty() const { return running_.empty() && waiting_.empty(); }

 private:
  void enqueue_waiting(Request* r, bool front);
  // Preempts the last running request; false when there is none.
  Result<bool> preempt_last(SchedulerOutput& out, Request** victim);
  int64_t target_length(const Request& r) const;  // positions to allocate for the next n_new
  int32_t watermark_blocks() const;
  // A prompt chunk of one token with more to come waits for the next step: a one-token row is
  // computed as a decode row, and the prompt's other rows as prefill rows, so the chunking of a
  // prompt never changes its numbers (batch invariance).
  bool split_off_one(const Request& r, int64_t n_new) const;

  SchedulerConfig cfg_;
  kv::KvManager& kv_;
  int64_t n_ctx_;
  std::vector<Request*> running_;  // admission order
  std::deque<Request*> waiting_;
  int64_t n_preemptions_ = 0;
  bool batch_open_ = false;  // static batching: the current batch still takes members
};

}  // namespace rinfer
