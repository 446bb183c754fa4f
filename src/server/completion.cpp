#include "server/completion.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace rinfer::server {

std::string_view openai_finish_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kEndOfGeneration:
    case FinishReason::kStopString: return "stop";
    case FinishReason::kMaxTokens:
    case FinishReason::kContextFull: return "length";
    default: return "";
  }
}

Completion::Completion(std::shared_ptr<HttpExchange> ex, ResponseIds ids,
                       const GenerationRequest& req, const Tokenizer* tokenizer, Metrics& metrics,
                       std::string echo)
    : ex_(std::move(ex)),
      ids_(std::move(ids)),
      delta_(ids_),
      tokenizer_(tokenizer),
      metrics_(metrics),
      stream_(req.stream),
      include_usage_(req.include_usage),
      want_logprobs_(req.logprobs),
      top_logprobs_(req.top_logprobs),
      echo_(std::move(echo)) {
  if (!stream_) text_ = echo_;
}

std::string Completion::token_text(int32_t token) const {
  if (tokenizer_ == nullptr) return "<" + std::to_string(token) + ">";
  return std::string(tokenizer_->token_text(token));
}

TokenLogprob Completion::logprob_of(std::span<const float> logits, int32_t token) const {
  TokenLogprob t;
  t.token = token_text(token);
  double max = -INFINITY;
  for (float l : logits) max = std::max<double>(max, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);
  auto lp = [&](int32_t t_id) {
    return static_cast<float>(static_cast<double>(logits[t_id]) - lse);
  };
  if (token >= 0 && static_cast<size_t>(token) < logits.size()) t.logprob = lp(token);
  if (top_logprobs_ > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min(static_cast<size_t>(top_logprobs_), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    for (size_t i = 0; i < k; ++i) {
      t.top.emplace_back(token_text(ids[i]), lp(ids[i]));
    }
  }
  return t;
}

void Completion::on_event(const RequestEvent& ev) {
  std::vector<TokenLogprob> lps;
  if (want_logprobs_ && !ev.logits.empty() && !ev.tokens.empty()) {
    lps.push_back(logprob_of(ev.logits, ev.tokens.front()));
  }
  if (stream_) {
    if (sent_first_ && !want_logprobs_) {
      if (!ev.text.empty()) ex_->push(delta_(ev.text));
    } else if (!ev.text.empty() || !lps.empty() || !echo_.empty() ||
               (!sent_first_ && ev.finish == FinishReason::kNone)) {
      const std::string text = sent_first_ ? std::string(ev.text) : echo_ + std::string(ev.text);
      ex_->push(stream_chunk(ids_, text, lps, want_logprobs_, "", !sent_first_));
      sent_first_ = true;
    }
  } else {
    text_.append(ev.text);
    for (TokenLogprob& t : lps) logprobs_.push_back(std::move(t));
  }
  if (ev.finish != FinishReason::kNone) finish(ev);
}

void Completion::finish(const RequestEvent& ev) {
  const Labels model{{"model", ids_.model}};
  const RequestStats st = ev.stats != nullptr ? *ev.stats : RequestStats{};
  Usage u{st.prompt_tokens, st.generated_tokens, st.cached_tokens};
  const std::string_view reason = openai_finish_reason(ev.finish);
  // The metrics are counted and the request marked done before the reply goes out: a client
  // that reads /metrics, or sends again, the moment it has its answer sees this one finished.
  metrics_.add("rinfer_prompt_tokens_total", model, static_cast<double>(st.prompt_tokens));
  metrics_.add("rinfer_generation_tokens_total", model, static_cast<double>(st.generated_tokens));
  if (reason.empty()) {  // aborted (client gone, shutdown) or failed
    const bool aborted = ev.finish == FinishReason::kAborted;
    ApiError e{aborted ? 503 : 500,
               aborted ? std::string("the request was cancelled (the client left, or the "
                                     "server is shutting down)")
                       : "the engine failed on this request: " + ev.error.message(),
               "", aborted ? "server_shutting_down" : "server_error"};
    metrics_.add("rinfer_requests_total",
                 {{"model", ids_.model}, {"finish", aborted ? "aborted" : "error"}});
    done.store(true);
    if (stream_) {
      ex_->push(stream_error(e));
      ex_->push(kStreamDone);
      ex_->finish();
    } else {
      ex_->respond(HttpResponse{e.status, "application/json", e.to_json(), {}, false});
    }
    return;
  }
  metrics_.add("rinfer_requests_total", {{"model", ids_.model}, {"finish", std::string(reason)}});
  metrics_.observe("rinfer_time_to_first_token_seconds", model, st.ttft_ms / 1e3);
  if (st.generated_tokens > 1) {
    metrics_.observe(
        "rinfer_time_per_output_token_seconds", model,
        (st.total_ms - st.ttft_ms) / 1e3 / static_cast<double>(st.generated_tokens - 1));
  }
  metrics_.observe("rinfer_request_duration_seconds", model, st.total_ms / 1e3);
  done.store(true);
  if (stream_) {
    std::string tail =
        stream_chunk(ids_, sent_first_ ? "" : echo_, {}, false, reason, !sent_first_);
    if (include_usage_) tail += stream_usage(ids_, u);
    tail += kStreamDone;
    ex_->push(tail);
    ex_->finish();
  } else {
    ex_->respond(HttpResponse{200,
                              "application/json",
                              full_response(ids_, text_, logprobs_, want_logprobs_, reason, u),
                              {},
                              false});
  }
}

}  // namespace rinfer::server
