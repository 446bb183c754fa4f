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
                       std::vector<std::string> echoes)
    : ex_(std::move(ex)),
      ids_(std::move(ids)),
      delta_(ids_),
      tokenizer_(tokenizer),
      metrics_(metrics),
      stream_(req.stream),
      include_usage_(req.include_usage),
      want_logprobs_(req.logprobs),
      top_logprobs_(req.top_logprobs),
      n_(std::max<int32_t>(req.n, 1)),
      echoes_(std::move(echoes)) {
  if (echoes_.empty()) echoes_.emplace_back();
  choices_.resize(echoes_.size() * static_cast<size_t>(n_));
  request_ids.assign(choices_.size(), 0);
  deferred.resize(choices_.size());
  if (!stream_) {
    for (size_t k = 0; k < choices_.size(); ++k) choices_[k].text = echoes_[k / n_];
  }
}

void Completion::parse_tool_calls(const std::vector<FunctionTool>& tools) {
  std::vector<std::string> names;
  for (const FunctionTool& t : tools) names.push_back(t.name);
  for (Choice& c : choices_) c.tool_parser.emplace(names);
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

void Completion::on_event(int32_t k, const RequestEvent& ev) {
  Choice& c = choices_[static_cast<size_t>(k)];
  c.started = true;
  if (ev.finish != FinishReason::kNone) c.finished = true;
  if (replied_) return;  // the request failed: its other choices are being aborted
  std::vector<TokenLogprob> lps;
  if (want_logprobs_ && !ev.logits.empty() && !ev.tokens.empty()) {
    lps.push_back(logprob_of(ev.logits, ev.tokens.front()));
  }
  const std::string& echo = echoes_[static_cast<size_t>(k / n_)];
  // With tools, the calls leave the text (held back while a call may be starting).
  std::string_view delta = ev.text;
  ToolCallParser::Out parsed;
  if (c.tool_parser) {
    parsed = c.tool_parser->feed(ev.text);
    if (ev.finish != FinishReason::kNone) {
      ToolCallParser::Out tail = c.tool_parser->finish();
      parsed.text += tail.text;
      for (ParsedToolCall& t : tail.calls) parsed.calls.push_back(std::move(t));
    }
    delta = parsed.text;
  }
  if (stream_) {
    if (c.sent_first && !want_logprobs_) {
      if (!delta.empty()) ex_->push(delta_(k, delta));
    } else if (!delta.empty() || !lps.empty() || !echo.empty() ||
               (!c.sent_first && ev.finish == FinishReason::kNone && parsed.calls.empty())) {
      const std::string text = c.sent_first ? std::string(delta) : echo + std::string(delta);
      ex_->push(stream_chunk(ids_, k, text, lps, want_logprobs_, "", !c.sent_first));
      c.sent_first = true;
    }
    if (!parsed.calls.empty()) {
      ex_->push(stream_tool_calls(ids_, k, parsed.calls, c.n_calls, !c.sent_first));
      c.sent_first = true;
    }
  } else {
    c.text.append(delta);
    for (TokenLogprob& t : lps) c.logprobs.push_back(std::move(t));
    for (ParsedToolCall& t : parsed.calls) c.calls.push_back(std::move(t));
  }
  c.n_calls += parsed.calls.size();
  if (ev.finish == FinishReason::kNone) return;

  std::string_view reason = openai_finish_reason(ev.finish);
  if (reason == "stop" && c.n_calls > 0) reason = "tool_calls";
  record(ev, reason);
  if (reason.empty()) {  // aborted (client gone, shutdown) or failed
    const bool aborted = ev.finish == FinishReason::kAborted;
    fail(ApiError{aborted ? 503 : 500,
                  aborted ? std::string("the request was cancelled (the client left, or the "
                                        "server is shutting down)")
                          : "the engine failed on this request: " + ev.error.message(),
                  "", aborted ? "server_shutting_down" : "server_error"});
    return;
  }
  c.finish = reason;
  if (ev.stats != nullptr) c.stats = *ev.stats;
  if (stream_) {
    ex_->push(stream_chunk(ids_, k, c.sent_first ? "" : echo, {}, false, reason, !c.sent_first));
    c.sent_first = true;
  }
  if (all_finished()) finish_all();
}

// A choice's figures, counted before any answer goes out: a client that reads /metrics, or sends
// again, the moment it has its answer sees this one finished.
void Completion::record(const RequestEvent& ev, std::string_view reason) {
  const Labels model{{"model", ids_.model}};
  const RequestStats st = ev.stats != nullptr ? *ev.stats : RequestStats{};
  metrics_.add("rinfer_prompt_tokens_total", model, static_cast<double>(st.prompt_tokens));
  metrics_.add("rinfer_generation_tokens_total", model, static_cast<double>(st.generated_tokens));
  if (reason.empty()) {
    metrics_.add("rinfer_requests_total",
                 {{"model", ids_.model},
                  {"finish", ev.finish == FinishReason::kAborted ? "aborted" : "error"}});
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
}

bool Completion::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished; });
}

void Completion::fail(const ApiError& e) {
  if (replied_.exchange(true)) return;
  // Done at once when nothing else of it runs; else the loop's sweep aborts the rest and marks
  // it done when their last events have come.
  if (all_finished()) done.store(true);
  if (stream_) {
    ex_->push(stream_error(e));
    ex_->push(kStreamDone);
    ex_->finish();
  } else {
    ex_->respond(HttpResponse{e.status, "application/json", e.to_json(), {}, false});
  }
}

// Every choice ended well: the usage (each prompt's tokens once, as OpenAI counts them, and every
// choice's completion tokens) and the answer's end.
void Completion::finish_all() {
  Usage u;
  for (size_t k = 0; k < choices_.size(); ++k) {
    const RequestStats& st = choices_[k].stats;
    if (k % static_cast<size_t>(n_) == 0) {
      u.prompt_tokens += st.prompt_tokens;
      u.cached_tokens += st.cached_tokens;
    }
    u.completion_tokens += st.generated_tokens;
  }
  if (replied_.exchange(true)) return;
  done.store(true);
  if (stream_) {
    std::string tail;
    if (include_usage_) tail += stream_usage(ids_, u);
    tail += kStreamDone;
    ex_->push(tail);
    ex_->finish();
    return;
  }
  std::vector<ChoiceText> out;
  out.reserve(choices_.size());
  for (const Choice& c : choices_) {
    out.push_back(ChoiceText{c.text, c.logprobs, c.finish, c.calls});
  }
  ex_->respond(HttpResponse{
      200, "application/json", full_response(ids_, out, want_logprobs_, u), {}, false});
}

}  // namespace rinfer::server
