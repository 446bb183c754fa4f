// One request of the server in flight: turns the engine core's events into its HTTP answer,
// streamed chunk by chunk (server-sent events) or whole at the end, with logprobs, usage and
// finish_reason, and records its figures in the metrics.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace rinfer::server {

class Completion {
 public:
  // `tokenizer` may be null (a model without one: tokens show as "<id>"). `echo`: the text the
  // reply starts with (the prompt, for completions' echo), sent with the first chunk.
  Completion(std::shared_ptr<HttpExchange> ex, ResponseIds ids, const GenerationRequest& req,
             const Tokenizer* tokenizer, Metrics& metrics, std::string echo = {});

  // On the engine core's thread: the request's progress.
  void on_event(const RequestEvent& ev);

  HttpExchange& exchange() { return *ex_; }
  bool streaming() const { return stream_; }

  std::atomic<RequestId> id{0};
  std::atomic<bool> done{false};           // its last event came
  std::atomic<bool> client_closed{false};  // the connection ended before the reply did

 private:
  // The logprob of the chosen token (and the top alternatives) from the event's logits row.
  TokenLogprob logprob_of(std::span<const float> logits, int32_t token) const;
  void finish(const RequestEvent& ev);

  std::shared_ptr<HttpExchange> ex_;
  ResponseIds ids_;
  DeltaChunkWriter delta_;
  const Tokenizer* tokenizer_;
  std::string token_text(int32_t token) const;
  Metrics& metrics_;
  bool stream_ = false;
  bool include_usage_ = false;
  bool want_logprobs_ = false;
  int32_t top_logprobs_ = 0;
  bool sent_first_ = false;
  std::string echo_;                    // sent with the first chunk (streamed), or text_'s start
  std::string text_;                    // the whole reply (not streamed)
  std::vector<TokenLogprob> logprobs_;  // the whole reply's (not streamed)
};

// "stop" (end of generation, a stop string) or "length" (max_tokens, the context).
std::string_view openai_finish_reason(FinishReason r);

}  // namespace rinfer::server
