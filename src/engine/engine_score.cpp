// EngineCore::score: teacher-forced logits of a token sequence through the engine core's runner
// and KV pool (engine_core.h), for perplexity, the precision gates and parity.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "engine/engine_core.h"
#include "models/op_profile.h"

namespace rinfer {

int32_t EngineCore::one_sequence_tables(RequestId seq, int64_t len) {
  const int32_t n_groups = kv_->spec().n_groups();
  const auto stride = static_cast<int32_t>(kv_->spec().blocks_for(len));
  tables_.assign(static_cast<size_t>(n_groups * stride), kv::kNoBlock);
  for (int32_t g = 0; g < n_groups; ++g) {
    const auto t = kv_->table(seq, g);
    const auto m = std::min<int64_t>(stride, static_cast<int64_t>(t.size()));
    std::copy(t.begin(), t.begin() + m, tables_.begin() + g * stride);
  }
  return stride;
}

Status EngineCore::score(std::span<const int32_t> tokens, int64_t first_row, int64_t chunk,
                         const ScoreCallback& on_rows, TapSink* taps) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (n == 0) return invalid_argument("score: the token sequence is empty");
  if (n > opts_.n_ctx) {
    return out_of_range("score: {} tokens do not fit the context of {} positions (context_length)",
                        n, opts_.n_ctx);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= n_vocab) {
      return invalid_argument("score: token {} (at {}) is out of the vocabulary [0, {})", t, i,
                              n_vocab);
    }
  }
  const int64_t budget = opts_.scheduler.max_batched_tokens;
  chunk = chunk > 0 ? std::min(chunk, budget) : budget;
  const int64_t max_rows = std::max<int64_t>(1, runner_->max_logit_rows());
  first_row = std::clamp<int64_t>(first_row, 0, n);

  // A sequence id no request can take; a salt no request uses, so no prefix is shared.
  RequestId seq = 0;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    seq = next_id_++;
  }
  RINFER_ASSIGN_OR_RETURN(const int64_t hit, kv_->attach(seq, tokens, ~seq));
  (void)hit;  // 0: the salt is new
  struct Release {
    kv::KvManager& kv;
    RequestId seq;
    ~Release() { kv.free(seq); }
  } release{*kv_, seq};

  std::vector<float> logits;
  std::vector<int32_t> positions, rows;
  int64_t done = 0;
  while (done < n) {
    // The pass: a chunk, cut short so that its wanted rows fit the runner's logits.
    int64_t end = std::min(n, done + chunk);
    if (end > first_row) end = std::min(end, std::max(first_row, done) + max_rows);
    if (!kv_->allocate(seq, end)) {
      return out_of_memory(
          "score: the KV pool has no room for a sequence of {} positions beside the {} running "
          "requests",
          end, scheduler_->n_running());
    }
    positions.resize(static_cast<size_t>(end - done));
    for (int64_t i = done; i < end; ++i)
      positions[static_cast<size_t>(i - done)] = static_cast<int32_t>(i);
    rows.clear();
    for (int64_t i = std::max(done, first_row); i < end; ++i) {
      rows.push_back(static_cast<int32_t>(i - done));
    }
    const int32_t stride = one_sequence_tables(seq, end);
    const int32_t query_start[2] = {0, static_cast<int32_t>(end - done)};
    const auto len = static_cast<int32_t>(end);
    ForwardBatch b;
    b.tokens = tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(end - done));
    b.positions = positions;
    b.query_start = query_start;
    b.kv_len = std::span<const int32_t>(&len, 1);
    b.block_tables = tables_;
    b.table_stride = stride;
    b.logit_rows = rows;
    b.cancel = &interrupt_;
    b.taps = taps;
    b.profile = profile_;
    logits.resize(rows.size() * static_cast<size_t>(n_vocab));
    const int64_t pass_begin = profile_ != nullptr ? now_ns() : 0;
    Status fwd = runner_->forward(b, *arena_, logits.data());
    if (profile_ != nullptr && fwd.ok()) {
      profile_->record_pass(
          {pass_begin, now_ns(), b.n_tokens(), 1, static_cast<int64_t>(rows.size())});
    }
    interrupt_.store(false);
    RINFER_RETURN_IF_ERROR(fwd.with_context(fmt::format("score: positions [{}, {})", done, end)));
    ++stats_.steps;
    stats_.computed_tokens += end - done;
    kv_->commit(seq, tokens, end);
    if (!rows.empty()) RINFER_RETURN_IF_ERROR(on_rows(done + rows[0], logits));
    done = end;
  }
  return ok_status();
}

}  // namespace rinfer
