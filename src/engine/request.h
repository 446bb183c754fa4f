// A generation request as the engine core sees it: what the caller submits, what streams back,
// and the state the scheduler keeps.
//
// There are no prefill and decode phases: a request has `computed` tokens (their keys and
// values are in its KV blocks) out of `tokens` (the prompt and every token generated so far).
// Each step the scheduler gives it some of the difference: a chunk of its prompt, or the one
// token generated last step. When computed reaches tokens.size() the step's logits of its last
// row are sampled and the new token is appended.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/stop_strings.h"
#include "engine/token_constraint.h"
#include "models/model.h"
#include "ops/cpu/sampler.h"
#include "rinfer/status.h"

namespace rinfer {

using RequestId = uint64_t;

enum class FinishReason : uint8_t {
  kNone,             // still running
  kEndOfGeneration,  // the model sampled an end-of-generation token
  kStopString,
  kMaxTokens,
  kContextFull,
  kAborted,  // abort() or a cancelled client
  kError,    // a bad request or a failed step (RequestEvent::error says why)
};
// "end of generation", "stop string", "max tokens", "context full", "cancelled", ...
std::string_view finish_reason_name(FinishReason r);

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache (last admission)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  double queue_ms = 0;  // submit -> first scheduled
  double ttft_ms = 0;   // submit -> first token
  double total_ms = 0;  // submit -> finish
};

// A finished request's rates: the prefill's (the prompt tokens computed, the cached ones left
// out, over the time to the first token) and the decode's (the tokens after the first over the
// time after it); 0 where no time passed.
double prefill_tps(const RequestStats& s);
double decode_tps(const RequestStats& s);
// "prompt 42 tokens (+8 cached) 512.3 tok/s | generated 100 tokens 230.1 tok/s | first token
// 82 ms"
std::string stats_text(const RequestStats& s);

// What a request hands back each step it makes progress (called on the thread running step()).
struct RequestEvent {
  RequestId id = 0;
  std::span<const int32_t> tokens;  // the tokens generated this step (usually one)
  // With RequestParams::want_logits: the logits row the token was chosen from [n_vocab]
  // (before the sampler's penalties), and what the sampler chose (differs from tokens[0] only
  // under teacher forcing).
  std::span<const float> logits;
  int32_t sampled = -1;
  std::string_view text;  // the text they completed (stop strings held back)
  FinishReason finish = FinishReason::kNone;
  Status error;  // kError: why
  const RequestStats* stats = nullptr;
};
using RequestCallback = std::function<void(const RequestEvent&)>;

struct RequestParams {
  std::vector<int32_t> prompt;  // token ids (the rendered chat, or raw text)
  SamplingParams sampling;      // seed included: the request's own random sequence
  int64_t max_tokens = 256;     // reply length limit (0: until EOS, a stop string or the context)
  std::vector<std::string> stop;
  bool ignore_eos = false;   // keep generating past end-of-generation tokens (benchmarks)
  int32_t priority = 0;      // lower runs first when the policy honours priorities
  uint64_t cache_salt = 0;   // the prefix cache's extra key: different salts never share blocks
  bool want_logits = false;  // hand each event the logits row (tests, logprobs, evaluation)
  // Teacher forcing: the reply's first tokens are these instead of the sampled ones (the
  // sampler still runs; RequestEvent::sampled says what it chose). For evaluation and tests.
  std::vector<int32_t> forced;
  // Structured output: the grammar every generated token must follow (engine/token_constraint.h);
  // null: none. Its rows are sampled on the host.
  std::shared_ptr<const TokenConstraint> constraint;
  RequestCallback on_event;
};

// The engine core's record of one request (internal to src/engine).
struct Request {
  using Clock = std::chrono::steady_clock;
  RequestId id = 0;
  RequestParams params;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_prompt = 0;
  int64_t computed = 0;       // tokens whose keys and values are in the KV blocks
  bool attached = false;      // known to the KV manager
  bool swapped = false;       // its blocks are in host memory
  bool reserved_max = false;  // prealloc max: blocks for its whole length taken at admission
  uint64_t arrival = 0;       // submission order
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TokenConstraintState> constraint;  // from params.constraint
  // A token sampled on the device that the constraint has not taken yet (-1: none): taken by
  // the next step's mask job (on a pool thread, while that pass runs) or before a host mask.
  int32_t pending_accept = -1;
  std::unique_ptr<TokenTextStream> text;
  StopStringFilter stop;
  RequestStats stats;
  std::vector<float> logits;  // [n_vocab] the last row, with want_logits
  Clock::time_point submitted;
  bool scheduled_once = false;
  // A token was appended since its keys and values were last dropped (recompute_each_step).
  bool fresh_token = false;

  int64_t n_generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - computed; }
  // The most positions this request can reach: prompt + max_tokens, within the context.
  int64_t max_length(int64_t n_ctx) const;
};

// A reply as one client sees it (LlmEngine::generate): its tokens,
// its text, why it ended and its figures (a cancelled reply ends with FinishReason::kAborted).
struct GenerationResult {
  std::vector<int32_t> tokens;  // sampled ids (an end-of-generation token included)
  std::string text;             // the streamed text, concatenated
  FinishReason finish = FinishReason::kMaxTokens;
  RequestStats stats;
};

// Each piece of a reply's text as it streams.
using PieceCallback = std::function<void(std::string_view piece)>;

}  // namespace rinfer
