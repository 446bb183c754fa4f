// The bodies the server answers with, in OpenAI's shapes: chat.completion and text_completion
// objects, their streamed chunks (server-sent events), logprobs, usage and the model list.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace rinfer::server {

struct ResponseIds {
  std::string id;       // chatcmpl-... / cmpl-...
  int64_t created = 0;  // Unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::kChat;
};

struct TokenLogprob {
  std::string token;  // its bytes (possibly part of a UTF-8 character)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most probable first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// One streamed event of choice `index`: `data: {chunk}\n\n`. `text` is the delta; `finish` empty
// while running; `first` adds the assistant role (chat).
std::string stream_chunk(const ResponseIds& ids, int32_t index, std::string_view text,
                         std::span<const TokenLogprob> logprobs, bool want_logprobs,
                         std::string_view finish, bool first);
// stream_chunk for the common event, a non-empty text delta with no logprobs, not the first, not
// the last: the same bytes, written without building a JSON document (the engine's thread writes
// one per token of every stream).
class DeltaChunkWriter {
 public:
  explicit DeltaChunkWriter(const ResponseIds& ids);
  std::string operator()(int32_t index, std::string_view text) const;

 private:
  std::string head_, mid_, tail_;
};

// `s` as a JSON string (quoted), invalid UTF-8 replaced by U+FFFD as nlohmann's dump does.
void append_json_string(std::string& out, std::string_view s);

// A streamed event of choice `index` with tool calls (numbered from `first_index` within the
// choice), each whole: id, type, function name and arguments in one delta.
std::string stream_tool_calls(const ResponseIds& ids, int32_t index,
                              std::span<const ParsedToolCall> calls, size_t first_index,
                              bool first);

// The last events of a stream: the usage chunk (choices empty) when asked, then [DONE].
std::string stream_usage(const ResponseIds& ids, const Usage& usage);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";
// An error inside a stream that has started (the status line is gone): an event with the error.
std::string stream_error(const ApiError& e);

// One choice of a whole reply: index i of the choices given.
struct ChoiceText {
  std::string_view text;
  std::span<const TokenLogprob> logprobs;
  std::string_view finish;
  // Chat: the calls the reply made; with calls, empty text is content null.
  std::span<const ParsedToolCall> tool_calls = {};
};
// The whole reply of a request that did not stream.
std::string full_response(const ResponseIds& ids, std::span<const ChoiceText> choices,
                          bool want_logprobs, const Usage& usage);

// The token's bytes, shown as text: invalid UTF-8 (half a character) replaced by U+FFFD.
std::string token_display(std::string_view bytes);

}  // namespace rinfer::server
