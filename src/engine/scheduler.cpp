#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rinfer {

int64_t SchedulerOutput::n_tokens() const {
  int64_t n = 0;
  for (const ScheduledSeq& s : seqs) n += s.n_new;
  return n;
}

Scheduler::Scheduler(SchedulerConfig cfg, kv::KvManager& kv, int64_t n_ctx)
    : cfg_(cfg), kv_(kv), n_ctx_(n_ctx) {}

void Scheduler::enqueue_waiting(Request* r, bool front) {
  if (cfg_.order == QueueOrder::kPriority) {
    auto before = [](const Request* a, const Request* b) {
      return a->params.priority != b->params.priority ? a->params.priority < b->params.priority
                                                      : a->arrival < b->arrival;
    };
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), r, before), r);
  } else if (front) {
    waiting_.push_front(r);
  } else {
    waiting_.push_back(r);
  }
}

void Scheduler::add(Request* r) { enqueue_waiting(r, false); }

void Scheduler::remove(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  if (r->attached) kv_.free(r->id);
  r->attached = false;
  r->swapped = false;
}

bool Scheduler::split_off_one(const Request& r, int64_t n_new) const {
  return n_new == 1 && r.remaining() > 1 && cfg_.max_batched_tokens > 1;
}

int32_t Scheduler::watermark_blocks() const {
  int32_t smallest = kv_.pool(0).size();
  for (int32_t g = 1; g < kv_.spec().n_groups(); ++g)
    smallest = std::min(smallest, kv_.pool(g).size());
  return static_cast<int32_t>(std::ceil(cfg_.watermark * smallest));
}

int64_t Scheduler::target_length(const Request& r) const {
  return cfg_.reserve_max_length ? r.max_length(n_ctx_) : 0;
}

Result<bool> Scheduler::preempt_last(SchedulerOutput& out, Request** victim) {
  if (running_.empty()) return false;
  Request* v = running_.back();
  running_.pop_back();
  ++n_preemptions_;
  ++v->stats.preemptions;
  ++out.n_preempted;
  *victim = v;
  if (cfg_.preemption == PreemptionMode::kSwap && kv_.can_swap()) {
    auto copies = kv_.swap_out(v->id);
    if (copies.ok()) {
      out.swap_out.insert(out.swap_out.end(), copies->begin(), copies->end());
      v->swapped = true;
      enqueue_waiting(v, true);
      return true;
    }
    if (copies.status().code() != StatusCode::kOutOfMemory) return copies.status();
    // No host room: recompute instead.
  }
  kv_.free(v->id);
  v->attached = false;
  v->computed = 0;
  enqueue_waiting(v, true);
  return true;
}

Result<SchedulerOutput> Scheduler::schedule() {
  SchedulerOutput out;
  if (cfg_.recompute_each_step) {
    for (Request* r : running_) {
      // A decode row due: the token sampled last step (a sequence being recomputed in chunks
      // keeps its blocks until it is whole).
      if (!r->fresh_token) continue;
      r->fresh_token = false;
      kv_.free(r->id);
      RINFER_ASSIGN_OR_RETURN(const int64_t hit, kv_.attach(r->id, r->tokens, r->params.cache_salt));
      r->computed = hit;  // 0: prefix caching is off
    }
  }
  int64_t budget = cfg_.max_batched_tokens;
  const bool nothing_ran = running_.empty();
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int64_t n_new = std::min(r->remaining(), budget);
    if (split_off_one(*r, n_new)) {
      ++i;
      continue;
    }
    const int64_t want = std::max(target_length(*r), r->computed + n_new);
    bool fits = kv_.allocate(r->id, want);
    while (!fits) {
      Request* victim = nullptr;
      RINFER_ASSIGN_OR_RETURN(const bool any, preempt_last(out, &victim));
      preempted = true;
      if (!any || victim == r) break;
      fits = kv_.allocate(r->id, want);
    }
    if (!fits) break;  // r was the last running request and is preempted itself
    out.seqs.push_back({r, n_new});
    budget -= n_new;
    ++i;
  }

  // Static batching: a batch opens when nothing runs and takes members (over as many steps as
  // their prompts need) until its seats are full or nobody waits; then it closes until its
  // last request finishes.
  if (nothing_ran) batch_open_ = true;
  const bool may_admit = !preempted && (cfg_.policy == BatchingPolicy::kContinuous || batch_open_);
  const int32_t watermark = watermark_blocks();
  while (may_admit && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < cfg_.max_seqs) {
    Request* r = waiting_.front();
    if (r->swapped) {
      if (!kv_.can_swap_in(r->id)) break;
      RINFER_ASSIGN_OR_RETURN(auto copies, kv_.swap_in(r->id, r->tokens));
      out.swap_in.insert(out.swap_in.end(), copies.begin(), copies.end());
      r->swapped = false;
    } else if (!r->attached) {
      RINFER_ASSIGN_OR_RETURN(const int64_t hit,
                              kv_.attach(r->id, r->tokens, r->params.cache_salt));
      r->attached = true;
      r->computed = hit;
      r->stats.cached_tokens = std::min(hit, r->n_prompt);
    }
    const int64_t n_new = std::min(r->remaining(), budget);
    if (split_off_one(*r, n_new)) break;
    if (!cfg_.chunked_prefill && n_new < r->remaining()) {
      if (running_.empty() && out.seqs.empty()) {
        out.failed.emplace_back(
            r, invalid_argument("the prompt needs {} tokens in one step but a step holds {} "
                                "(max_batched_tokens) and chunked prefill is off",
                                r->remaining(), cfg_.max_batched_tokens));
        remove(r);
        continue;
      }
      break;
    }
    const int64_t want = std::max(target_length(*r), r->computed + n_new);
    bool fits = kv_.allocate(r->id, want, watermark);
    if (!fits && running_.empty()) fits = kv_.allocate(r->id, want, 0);
    if (!fits) {
      if (running_.empty()) {
        // Nothing else holds blocks: this request can never fit.
        out.failed.emplace_back(
            r, out_of_memory("{} positions need {} more KV blocks but the pool has {} free (of "
                             "{}): raise the KV memory, shorten the prompt or lower max_tokens",
                             want, kv_.blocks_needed(r->id, want), kv_.min_free_blocks(),
                             kv_.pool(0).size()));
        remove(r);
        continue;
      }
      break;
    }
    waiting_.pop_front();
    running_.push_back(r);
    out.seqs.push_back({r, n_new});
    budget -= n_new;
  }
  if (waiting_.empty() || static_cast<int64_t>(running_.size()) >= cfg_.max_seqs) {
    batch_open_ = false;
  }
  return out;
}

}  // namespace rinfer
