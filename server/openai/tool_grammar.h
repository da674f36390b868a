// Forced tool calls (tool_choice "required" or a named function; Anthropic's "any" / "tool"): a
// grammar of the calls in the chat template's own syntax, so that the model writes what its
// template taught it and the output parser (tool_parser.h) reads every output back as calls:
//
//   Hermes:   <tool_call>\n{"name": "F", "arguments": ARGS}\n</tool_call>
//   Qwen XML:
//   <tool_call>\n<function=F>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
//
// F is one of the allowed functions; ARGS is the function's `parameters` schema compiled as
// structured output (json_schema.cc: the language of that subset); an XML VALUE is raw text for a
// text-typed parameter (PropertyType: string or untyped; one of its enum members when it has
// one) and JSON of the parameter's schema otherwise, and parameters come in the schema's order,
// every required one. JSON has at most one whitespace character between tokens (tojson's ", "
// and ": "). With parallel calls, "\n" and another call may follow each call (the
// templates' separator); a stop token may come after any whole call. After a reasoning block the
// prompt opened, the reasoning comes first (text_grammar.h AfterReasoning).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/structured/json_grammar.h"
#include "server/openai/chat_output.h"
#include "server/openai/json_fields.h"

namespace linfer::openai {

struct ForcedToolCall {
  std::string name;                                 // the function to call; empty: any of the tools
  bool parallel = true;                             // more than one call allowed
  std::string field = "tool_choice";                // where the request asked (for errors)
  std::string parameters = ".function.parameters";  // where a tool's schema is, after tools[i]
};

// `tools`: chat-format tools ([{"type": "function", "function": {"name", "parameters"}}]).
// InvalidArgument naming the field: no tools, an unknown name, a name or parameter name the
// syntax cannot carry, two tools of one name, a schema structured output cannot enforce (an XML
// call needs an object schema with properties), or a template that writes no tool calls.
absl::StatusOr<std::shared_ptr<const structured::Grammar>> ToolCallGrammar(
    const Json& tools, ToolFormat format, const ForcedToolCall& forced);

}  // namespace linfer::openai
