// EngineCore's decode steps queued ahead of the host (engine_core.h): one request alone at
// batch 1, where the device would otherwise wait for the host between steps (reading the id,
// streaming its text, scheduling and staging the next step). The runner feeds each sampled id
// to the next step on the device; the core keeps the request's blocks, tokens and text as its
// ordinary steps do.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/engine_core.h"

namespace rinfer {

namespace {

// Steps one step() runs ahead at most: the callers' own checks between steps (run_request's
// cancel flag) wait no longer than this many tokens.
constexpr int64_t kAheadSteps = 32;

}  // namespace

bool EngineCore::inbox_has_work() const {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return !inbox_.empty() || !aborts_.empty();
}

bool EngineCore::runs_ahead(const SchedulerOutput& s) const {
  if (s.seqs.size() != 1 || s.seqs[0].n_new != 1 || !s.swap_in.empty() || !s.swap_out.empty()) {
    return false;
  }
  const Request& r = *s.seqs[0].req;
  return opts_.queue_ahead && !opts_.scheduler.recompute_each_step && profile_ == nullptr &&
         scheduler_->n_waiting() == 0 && scheduler_->n_running() == 1 &&
         r.computed + 1 == static_cast<int64_t>(r.tokens.size()) && r.params.forced.empty() &&
         r.constraint == nullptr && runner_->decodes_ahead(r.sampler->params());
}

void EngineCore::decode_ahead(Request& r, const ForwardBatch& b, StepStats& st) {
  const RequestId id = r.id;
  const int64_t p0 = r.computed;  // step k computes position p0 + k
  const auto size0 = static_cast<int64_t>(r.tokens.size());
  const int64_t max_len = r.max_length(opts_.n_ctx);
  bool gone = false;
  int32_t pos = 0, len = 0;
  const int32_t query_start[2] = {0, 1};
  const int32_t row = 0;
  ForwardBatch nb;
  nb.tokens = b.tokens;  // not read after step 0
  nb.positions = std::span<const int32_t>(&pos, 1);
  nb.query_start = query_start;
  nb.kv_len = std::span<const int32_t>(&len, 1);
  nb.logit_rows = std::span<const int32_t>(&row, 1);

  DecoderRunner::DecodeAhead d;
  d.first = &b;
  d.sampling = row_sampling_[0];
  d.next = [&](int64_t k, float& uniform) -> const ForwardBatch* {
    // Step k feeds step k - 1's token: none when that token ends the request by its length, or
    // when something else wants the engine.
    if (k >= kAheadSteps || size0 + k >= max_len) return nullptr;
    if (interrupt_.load(std::memory_order_relaxed) || inbox_has_work()) return nullptr;
    if (!kv_->allocate(id, p0 + k + 1)) return nullptr;  // the next step() preempts or waits
    if (r.sampler->params().temperature > 0.0f) {
      uniform = std::min(static_cast<float>(r.sampler->next_uniform()), std::nextafter(1.0f, 0.0f));
    }
    pos = static_cast<int32_t>(p0 + k);
    len = pos + 1;
    nb.table_stride = one_sequence_tables(id, len);
    nb.block_tables = tables_;
    return &nb;
  };
  d.on_token = [&](int64_t k, int32_t tok) -> bool {
    if (k > 0) {
      ++stats_.steps;
      ++stats_.computed_tokens;
      ++stats_.queued_ahead;
    }
    r.computed += 1;
    kv_->commit(id, r.tokens, r.computed);
    const int64_t finished = st.n_finished;
    if (tok < 0) {
      stream_token(r, data_loss("the logits row holds NaN or +inf, or no finite value"), st);
    } else {
      stream_token(r, tok, st);
    }
    gone = st.n_finished > finished;  // r is gone
    return !gone;
  };
  auto ran = runner_->decode_ahead(d, *arena_);
  interrupt_.store(false);
  if (!ran.ok() && !gone) {
    finish(r, FinishReason::kError, ran.status());
    ++st.n_finished;
  }
}

}  // namespace rinfer
