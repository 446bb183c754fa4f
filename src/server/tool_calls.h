// Tool calls in a model's reply: found in the text as it streams (the calls leave the text and
// become OpenAI `tool_calls`), and the grammar that makes a reply one call (tool_choice required
// or a named function), in the format of the model's chat template:
//   kHermes  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, as Qwen2.5 (and the
//            Hermes models) write them; text may come before, between and after calls.
//   kJson    the whole reply is {"tool_calls": [{"name": "f", "arguments": {...}}, ...]} (the
//            tools preamble of templates that do not render tools, e.g. SmolLM2), or one bare
//            call {"name": "f", "arguments"|"parameters": {...}} (Llama 3.x's JSON calls).
// A block that does not parse as a call stays text. The format decides the grammar of a forced
// call; the parser reads every form.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"

namespace rinfer::server {

struct ParsedToolCall {
  std::string id;  // "call_" and 24 random characters
  std::string name;
  std::string arguments;  // JSON text of an object
};

// Finds the calls in a reply, in any of the forms above, as the reply streams: <tool_call>
// blocks anywhere; and a reply that is only a JSON call (bare, or in a ```json fence, as models
// also write them unasked) when it names one of the tools offered.
class ToolCallParser {
 public:
  explicit ToolCallParser(std::vector<std::string> tool_names) : names_(std::move(tool_names)) {}

  struct Out {
    std::string text;                   // text to show now
    std::vector<ParsedToolCall> calls;  // calls completed now
  };
  // The next piece of the reply.
  Out feed(std::string_view delta);
  // The reply ended: what was held back. Whitespace around calls is dropped.
  Out finish();
  bool any_calls() const { return calls_ > 0; }

 private:
  enum class Lead { kUndecided, kJson, kFence, kText };
  void emit(std::string_view text, Out& out);
  bool call_from(std::string_view json, bool known_names_only, Out& out);
  void scan(Out& out);  // <tool_call> blocks in pending_ (Lead::kText)

  std::vector<std::string> names_;
  Lead lead_ = Lead::kUndecided;
  std::string pending_;  // not yet shown: the reply's lead, a possible call opener, a call
  std::string space_;    // whitespace held until text follows it
  bool in_call_ = false;
  bool after_call_ = false;  // whitespace now follows a call
  int calls_ = 0;
};

// The grammar for tool_choice required (any of the tools) or a named function: one call, in the
// template's format. Only for those two choices.
GrammarSpec tool_call_grammar(ToolCallFormat format, const std::vector<FunctionTool>& tools,
                              const ToolChoice& choice);

}  // namespace rinfer::server
