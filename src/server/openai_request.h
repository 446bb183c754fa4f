// The bodies of POST /v1/chat/completions and /v1/completions, parsed and checked: every field
// of OpenAI's API that the server honours, each with its type and range; fields it cannot
// honour (functions, logit_bias, echo with logprobs) are refused by name, and fields it does not
// know are ignored, as OpenAI's clients send many.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/grammar.h"
#include "tokenizer/chat_template.h"

namespace rinfer::server {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  ApiError() = default;
  ApiError(int status_, std::string message_, std::string param_ = {},
           std::string type_ = "invalid_request_error", std::string code_ = {})
      : status(status_),
        message(std::move(message_)),
        param(std::move(param_)),
        type(std::move(type_)),
        code(std::move(code_)) {}
  int status = 400;
  std::string message;
  std::string param;  // the field, or empty
  std::string type = "invalid_request_error";
  // OpenAI's machine-readable code ("invalid_api_key", "model_not_found", "rate_limit_exceeded",
  // "context_length_exceeded"), or empty: null. The status goes in the HTTP status line.
  std::string code;
  std::string to_json() const;
};

template <typename T>
using ApiResult = std::variant<T, ApiError>;

enum class Endpoint { kChat, kCompletion };

// A function tool offered to the model (chat `tools`).
struct FunctionTool {
  std::string name;
  std::string parameters;  // its JSON schema, as text
};

// `tool_choice`: none (the default without tools; tools are then left out of the prompt), auto
// (the default with tools: the model decides), required (at least one call), or one function.
struct ToolChoice {
  enum class Kind { kNone, kAuto, kRequired, kFunction };
  Kind kind = Kind::kNone;
  std::string function;  // kFunction
};
inline constexpr size_t kMaxTools = 128;

// One prompt of /v1/completions: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;  // empty when left out: the server's one text-generation model
  std::vector<ChatMessage> messages;  // chat
  // completions: one prompt, or a batch of them (a list of strings or of token-id lists, at
  // most kMaxPrompts); every prompt gets n choices, prompt i's at indices i * n ... i * n + n - 1.
  std::vector<PromptInput> prompts;
  int32_t n = 1;  // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<int64_t> max_tokens;
  std::optional<float> temperature, top_p, min_p, presence_penalty, frequency_penalty,
      repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<std::vector<std::string>> stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // alternatives per token (chat top_logprobs, completions logprobs)
  bool ignore_eos = false;   // an extension for benchmarks: generate max_tokens regardless
  bool echo = false;         // completions: the reply's text starts with the prompt (no logprobs)
  // Structured output: response_format json_object / json_schema, or the `grammar` extension
  // (EBNF); grammar_param names the field for errors.
  std::optional<GrammarSpec> grammar;
  std::string grammar_param;
  // Tools (chat): the `tools` array as JSON text in the client's key order (for the chat
  // template), each tool's name and schema, the choice, and whether several calls may come.
  std::string tools_json;
  std::vector<FunctionTool> tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // Whether the model is offered tools this turn (some, and tool_choice not `none`).
  bool offers_tools() const {
    return !tools.empty() && tool_choice.kind != ToolChoice::Kind::kNone;
  }
};

// The limits of the API's numbers (OpenAI's where it states them).
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxStop = 16;
inline constexpr size_t kMaxStopBytes = 256;
inline constexpr int kMaxJsonDepth = 64;
// Choices of one request (prompts times n): each is a request of the engine core.
inline constexpr int64_t kMaxChoices = 128;

ApiResult<GenerationRequest> parse_generation_request(std::string_view body, Endpoint endpoint);

// POST /v1/embeddings: `input` is a string, an array of strings, an array of token ids or an
// array of such arrays (at most kMaxEmbeddingInputs inputs); `encoding_format` float (default)
// or base64 (little-endian float32, what the official client asks for); `dimensions`, when
// given, must be the model's (checked by the server); `user` is ignored.
struct EmbeddingRequest {
  std::string model;  // empty when left out: the server's one embedding model
  std::vector<std::string> texts;               // string inputs ...
  std::vector<std::vector<int32_t>> token_ids;  // ... or token-id inputs (one kind per request)
  bool base64 = false;
  std::optional<int64_t> dimensions;
  size_t size() const { return texts.empty() ? token_ids.size() : texts.size(); }
};
inline constexpr size_t kMaxEmbeddingInputs = 2048;

ApiResult<EmbeddingRequest> parse_embedding_request(std::string_view body);

}  // namespace rinfer::server
