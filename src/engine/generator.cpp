#include "engine/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace rinfer {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool is_cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

// A failed sample at generation step `n` (1-based: step 1 samples the prompt's last row, step n
// the (n-1)-th reply token's). The sampler's (or the device sampler's) kDataLoss means the
// model's logits were not finite.
Status sampling_failed(const Status& st, int64_t n) {
  if (st.code() != StatusCode::kDataLoss) {
    return st.with_context(fmt::format("generation step {}", n));
  }
  return Status(st.code(),
                fmt::format("the model produced non-finite logits at generation step {} (step 1 "
                            "samples the prompt's last row): the weights may be corrupt (NaN or "
                            "inf in the model file): {}",
                            n, st.message()));
}

}  // namespace

Generator::Generator(DecoderModel& model, KvCache& cache, TokenTextStream* text,
                     GeneratorOptions opts)
    : model_(model),
      cache_(cache),
      text_(text),
      opts_(std::move(opts)),
      sampler_(opts_.sampling, model.hparams().n_vocab),
      positions_(static_cast<size_t>(cache.n_ctx())),
      logits_(static_cast<size_t>(model.hparams().n_vocab)) {
  tokens_.reserve(static_cast<size_t>(cache.n_ctx()));
  for (size_t i = 0; i < positions_.size(); ++i) positions_[i] = static_cast<int32_t>(i);
  if (opts_.prefill_chunk <= 0) opts_.prefill_chunk = 512;
}

void Generator::reset() {
  tokens_.clear();
  cache_.clear();
}

Status Generator::evaluate(int64_t from, const std::atomic<bool>* cancel, bool* cancelled) {
  *cancelled = false;
  if (!opts_.kv_cache) {
    cache_.clear();  // the baseline: recompute everything
    from = 0;
  }
  const auto end = static_cast<int64_t>(tokens_.size());
  const std::span<const int32_t> all(tokens_);
  const std::span<const int32_t> pos(positions_);
  for (int64_t c0 = from; c0 < end; c0 += opts_.prefill_chunk) {
    if (is_cancelled(cancel)) {
      *cancelled = true;
      return ok_status();
    }
    const int64_t nc = std::min(opts_.prefill_chunk, end - c0);
    const bool last = c0 + nc == end;
    const int32_t last_row = static_cast<int32_t>(nc - 1);
    DecoderBatch batch;
    batch.tokens = all.subspan(static_cast<size_t>(c0), static_cast<size_t>(nc));
    batch.positions = pos.subspan(static_cast<size_t>(c0), static_cast<size_t>(nc));
    if (last) batch.logit_rows = std::span<const int32_t>(&last_row, 1);
    batch.cancel = cancel;
    Status st = model_.infer(batch, cache_, last ? logits_.data() : nullptr);
    if (st.code() == StatusCode::kCancelled) {  // inside the forward: the cache is as before it
      *cancelled = true;
      return ok_status();
    }
    RINFER_RETURN_IF_ERROR(st);
  }
  return ok_status();
}

Result<GenerationResult> Generator::generate(std::span<const int32_t> prompt,
                                             const PieceCallback& on_piece,
                                             const std::atomic<bool>* cancel) {
  const auto t0 = Clock::now();
  const int64_t n_ctx = cache_.n_ctx();
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  RINFER_RETURN_IF_ERROR(sampler_.params().validate().with_context("sampling"));
  if (static_cast<int64_t>(prompt.size()) >= n_ctx) {
    return out_of_range(
        "the prompt is {} tokens but the context holds {} (context_length), with room for at "
        "least one generated token: shorten the prompt or raise context_length",
        prompt.size(), n_ctx);
  }
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= n_vocab) {
      return invalid_argument("prompt token {} (at {}) is out of the vocabulary [0, {})", prompt[i],
                              i, n_vocab);
    }
  }

  GenerationResult result;
  RequestStats& tm = result.stats;
  if (opts_.max_tokens > 0) result.tokens.reserve(static_cast<size_t>(opts_.max_tokens));

  // Reuse the longest cached prefix; at least one prompt token is evaluated for its logits.
  size_t keep = 0;
  if (opts_.kv_cache) {
    const size_t limit = std::min(tokens_.size(), prompt.size() - 1);
    while (keep < limit && tokens_[keep] == prompt[keep]) ++keep;
    if (cache_.size() < static_cast<int64_t>(keep)) keep = static_cast<size_t>(cache_.size());
    // A ring (sliding-window) cache cannot rewind past what its rows still hold: recompute.
    if (!cache_.truncate(static_cast<int64_t>(keep)).ok()) {
      cache_.clear();
      keep = 0;
    }
  }
  tokens_.assign(prompt.begin(), prompt.end());
  tm.cached_tokens = static_cast<int64_t>(keep);
  tm.prompt_tokens = static_cast<int64_t>(prompt.size());

  // The cache and tokens_ must agree whenever we return (the next call relies on it).
  auto sync = [&] {
    if (opts_.kv_cache) tokens_.resize(static_cast<size_t>(cache_.size()));
  };

  bool cancelled = false;
  Status st = evaluate(static_cast<int64_t>(keep), cancel, &cancelled);
  if (!st.ok() || cancelled) {
    sync();
    if (!st.ok()) return st;
    result.finish = FinishReason::kAborted;
    tm.total_ms = ms_since(t0);
    return result;
  }

  StopStringFilter stop(opts_.stop);
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    result.text += s;
    if (on_piece) on_piece(s);
  };

  Clock::time_point t_first;
  // A sampled token: counted and streamed; false when it ends the reply (finish set), else
  // it joins the history and is fed to the next step.
  bool ended = false;
  auto accept = [&](int32_t tok) -> bool {
    ended = true;  // until it is fed
    result.tokens.push_back(tok);
    ++tm.generated_tokens;
    if (tm.generated_tokens == 1) {
      t_first = Clock::now();
      tm.ttft_ms = std::chrono::duration<double, std::milli>(t_first - t0).count();
    }
    if (text_ != nullptr && text_->is_end_of_generation(tok)) {
      result.finish = FinishReason::kEndOfGeneration;
      return false;
    }
    if (text_ != nullptr) {
      emit(stop.push(text_->push(tok)));
      if (stop.stopped()) {
        result.finish = FinishReason::kStopString;
        return false;
      }
    }
    if (opts_.max_tokens > 0 && tm.generated_tokens >= opts_.max_tokens) {
      result.finish = FinishReason::kMaxTokens;
      return false;
    }
    if (is_cancelled(cancel)) {
      result.finish = FinishReason::kAborted;
      return false;
    }
    if (static_cast<int64_t>(tokens_.size()) >= n_ctx) {
      result.finish = FinishReason::kContextFull;
      return false;
    }
    tokens_.push_back(tok);
    ended = false;
    return true;
  };

  // An error after the prefill: the cache and the history agree, the text stream is reset.
  auto fail = [&](const Status& s) -> Status {
    sync();
    if (text_ != nullptr) text_->finish();  // what it held belongs to the failed reply
    return s;
  };
  // Samples the next reply token from logits_ and accepts it; false with `failed` set when the
  // sampler fails.
  Status failed;
  auto sample_and_accept = [&]() -> bool {
    Result<int32_t> tok = sampler_.sample(logits_, tokens_);
    if (!tok.ok()) {
      failed = sampling_failed(tok.status(), tm.generated_tokens + 1);
      return false;
    }
    return accept(*tok);
  };

  // The first token comes from the prefill's logits, on the host.
  bool go_on = sample_and_accept();
  if (go_on && opts_.kv_cache && model_.can_decode_on_device(sampler_.params())) {
    // Device decoding: each step samples its token on the device and the next step is queued
    // before the host reads it. The uniforms come from sampler_'s RNG in the host loop's order;
    // a draw made for a step queued ahead of the stop is taken back, so the next call draws as
    // the host loop would have.
    std::mt19937_64 before_last = sampler_.rng();
    DeviceDecode dd;
    dd.sampling = &sampler_.params();
    dd.history = tokens_;  // read before the first id is handed out
    dd.uniform = [&] {
      before_last = sampler_.rng();
      return static_cast<float>(sampler_.next_uniform());
    };
    dd.on_token = accept;
    auto r = model_.decode_on_device(cache_, dd);
    if (!r.ok()) {
      // kDataLoss: the device sampler found the step's logits not finite.
      return fail(r.status().code() == StatusCode::kDataLoss
                      ? sampling_failed(r.status(), tm.generated_tokens + 1)
                      : r.status());
    }
    if (r->discarded > 0 && sampler_.params().temperature > 0.0f) sampler_.set_rng(before_last);
    if (!ended) result.finish = FinishReason::kContextFull;  // the model stops only there
    go_on = false;
  }
  while (go_on) {
    st = evaluate(static_cast<int64_t>(tokens_.size()) - 1, cancel, &cancelled);
    if (!st.ok()) return fail(st);
    if (cancelled) {  // inside the step's forward: the fed token is not in the cache
      result.finish = FinishReason::kAborted;
      tokens_.pop_back();
      break;
    }
    go_on = sample_and_accept();
  }
  if (!failed.ok()) return fail(failed);
  tm.total_ms = ms_since(t0);
  if (text_ != nullptr) {
    std::string tail = text_->finish();
    if (!stop.stopped()) {
      emit(stop.push(tail));
      emit(stop.flush());
    }
  }
  sync();
  return result;
}

}  // namespace rinfer
