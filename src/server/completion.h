// One request of the server in flight: its choices (n per prompt; each a request of the engine
// core) and the HTTP answer they make together, streamed chunk by chunk (server-sent events, one
// choice per chunk, as OpenAI sends them) or whole once every choice has ended, with logprobs,
// usage and finish_reason; it records each choice's figures in the metrics.
//
// Choice k belongs to prompt k / n. The first choice of a prompt (its leader) is submitted at
// once; the other n - 1 only after the leader's first event (its prompt computed and its full
// KV blocks in the prefix cache), so they share those blocks instead of computing the prompt
// again (ServedModel::submit_followers).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace rinfer::server {

class Completion {
 public:
  // `tokenizer` may be null (a model without one: tokens show as "<id>"). `echoes`: per prompt,
  // the text its choices start with (the prompt, for completions' echo), or empty strings.
  Completion(std::shared_ptr<HttpExchange> ex, ResponseIds ids, const GenerationRequest& req,
             const Tokenizer* tokenizer, Metrics& metrics, std::vector<std::string> echoes);

  int32_t choices() const { return static_cast<int32_t>(choices_.size()); }
  int32_t n() const { return n_; }
  // On the engine core's thread: choice `k`'s progress.
  void on_event(int32_t k, const RequestEvent& ev);
  // On the engine core's thread: the request cannot go on (a follower's submission failed);
  // answers with `e` unless an answer went out already.
  void fail(const ApiError& e);

  // Before any event: the replies are searched for calls of the tools offered (a chat request
  // with tools), which leave the text and come as tool_calls (finish_reason "tool_calls").
  void parse_tool_calls(const std::vector<FunctionTool>& tools);

  HttpExchange& exchange() { return *ex_; }
  bool streaming() const { return stream_; }
  // Core thread: whether choice k's leader has had its first event, so k may be submitted.
  bool leader_started(int32_t k) const { return choices_[leader(k)].started; }
  // Whether the answer went out (the whole reply, an error, or the stream's end).
  bool replied() const { return replied_.load(); }
  // Before the request is in flight (a later prompt of it was refused): its events are ignored,
  // the caller answers.
  void abandon() { replied_.store(true); }
  // Core thread: whether choice k's last event came.
  bool finished(int32_t k) const { return choices_[k].finished; }

  // Set and read under the ServedModel's lock: each choice's engine request, 0 until submitted;
  // the followers' parameters until then (on_event set at submission).
  std::vector<RequestId> request_ids;
  std::vector<RequestParams> deferred;
  // Every choice submitted has ended and the answer went out: no longer in flight.
  std::atomic<bool> done{false};
  std::atomic<bool> client_closed{false};  // the connection ended before the reply did

 private:
  struct Choice {
    bool started = false;   // its first event came
    bool finished = false;  // its last event came
    bool sent_first = false;
    std::string text;                    // the whole reply (not streamed)
    std::vector<TokenLogprob> logprobs;  // the whole reply's (not streamed)
    std::string_view finish;             // "stop", "length" or "tool_calls" once finished
    RequestStats stats;
    std::optional<ToolCallParser> tool_parser;  // a chat request with tools
    std::vector<ParsedToolCall> calls;          // the whole reply's (not streamed)
    size_t n_calls = 0;
  };
  int32_t leader(int32_t k) const { return k / n_ * n_; }
  // The logprob of the chosen token (and the top alternatives) from the event's logits row.
  TokenLogprob logprob_of(std::span<const float> logits, int32_t token) const;
  void record(const RequestEvent& ev, std::string_view reason);
  void finish_all();
  bool all_finished() const;
  std::string token_text(int32_t token) const;

  std::shared_ptr<HttpExchange> ex_;
  ResponseIds ids_;
  DeltaChunkWriter delta_;
  const Tokenizer* tokenizer_;
  Metrics& metrics_;
  bool stream_ = false;
  bool include_usage_ = false;
  bool want_logprobs_ = false;
  int32_t top_logprobs_ = 0;
  int32_t n_ = 1;
  std::atomic<bool> replied_{false};
  std::vector<std::string> echoes_;  // per prompt
  std::vector<Choice> choices_;
};

// "stop" (end of generation, a stop string) or "length" (max_tokens, the context).
std::string_view openai_finish_reason(FinishReason r);

}  // namespace rinfer::server
