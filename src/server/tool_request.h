// The tool-calling fields of a chat request (OpenAI's `tools`, `tool_choice`,
// `parallel_tool_calls`, and the `tool_calls` of assistant messages), parsed and checked; used
// by openai_request.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"

namespace rinfer::server {

// `tools`, `tool_choice`, `parallel_tool_calls` (and the legacy `functions`, refused) of `doc`,
// whose text is `body` (re-read in order: a tool's JSON reaches the chat template with its keys
// as the client wrote them).
std::optional<ApiError> parse_tools(const nlohmann::json& doc, std::string_view body,
                                    GenerationRequest* r);

// An assistant message's `tool_calls` (`where` names it: "messages[2].tool_calls").
std::optional<ApiError> parse_tool_calls(const nlohmann::json& calls, const std::string& where,
                                         std::vector<ChatToolCall>* out);

}  // namespace rinfer::server
