// POST /v1/responses, the request side: OpenAI's Responses API body read into what chat
// completions already runs on.
//
//   input                 a string (one user message) or a list of items: messages
//                         ({"type": "message", "role", "content": string | [{"type":
//                         "input_text" | "output_text", "text"}]}, "type" optional),
//                         "function_call" ({"call_id", "name", "arguments"}: joined into the
//                         assistant message before it), "function_call_output" ({"call_id",
//                         "output"}: a tool message) and "reasoning" (skipped: templates drop
//                         past reasoning)
//   instructions          a system message before the input (not carried to the next turn);
//                         system/developer messages of the input join it (WithSystemFirst)
//   tools, tool_choice    function tools {"type": "function", "name", "description",
//                         "parameters"}; tool_choice "auto" | "none"
//   text.format           structured output ({"type": "json_schema", "name", "schema"} |
//                         {"type": "json_object"} | {"type": "text"})
//   max_output_tokens, temperature, top_p, top_logprobs, include
//                         ["message.output_text.logprobs"], stream, store, metadata,
//                         previous_response_id, reasoning.effort ("none" renders the template
//                         with enable_thinking false), parallel_tool_calls, user
//   vLLM's extras         top_k, min_p, repetition_penalty, presence/frequency_penalty, seed,
//                         stop, logit_bias, priority, chat_template_kwargs
//
// Refused by name (a 400, never ignored): background, conversation, prompt, truncation "auto",
// n other than 1, non-function tools, image/file/audio parts, item references, and chat
// completions' spellings (messages, max_tokens, response_format, …) with the field to use.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/openai/chat_request.h"
#include "server/openai/params.h"

namespace linfer::openai {

struct ResponsesRequest {
  CommonParams params;  // max_output_tokens is params.stop.max_tokens
  // messages: the input items as chat messages (no instructions); tools in chat's form.
  ChatRequest chat;
  std::optional<std::string> instructions;
  std::string previous_response_id;
  bool store = true;
  Json input_items = Json::array();  // the input as items, each with an "id" (for input_items)
  // The request's settings as a response object echoes them (instructions, max_output_tokens,
  // metadata, parallel_tool_calls, previous_response_id, reasoning, store, text, tool_choice,
  // tools, top_logprobs, truncation, user, ...); temperature and top_p, which the model's
  // defaults may fill, are the handler's to add.
  Json echo = Json::object();
};

// Errors are InvalidArgument naming the field ("input[2].content[0].type: ...").
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const Json& body);

// Every function_call_output of `input_items` answers a function_call before it in them, or a
// tool call of the assistant messages of `earlier` (a previous response's conversation; null:
// none); else InvalidArgument naming input[i].call_id.
absl::Status CheckCallOutputs(const Json& input_items, const Json& earlier);

// Response items (a response's "output", or input items) as chat messages, appended to
// `messages`: output_text parts joined, function calls folded into the assistant message before
// them with their arguments parsed, reasoning items dropped. `field` names the list in errors.
absl::Status ItemsToMessages(const Json& items, const std::string& field, Json* messages);

// The conversation as chat templates take it: `instructions` and every system message of
// `messages`, in order, joined by blank lines into one leading system message, then the other
// messages. (Qwen's templates refuse a system message after the first; the Responses API allows
// developer messages anywhere.)
Json WithSystemFirst(const std::optional<std::string>& instructions, const Json& messages);
bool HasSystemMessage(const Json& messages);

// An error of the chat machinery in the Responses API's names ("max_tokens …" is
// "max_output_tokens …", "messages: …" is "input: …", …).
absl::Status ResponsesTerms(const absl::Status& status);

// A new random id with `prefix` ("resp_", "msg_", "fc_", "rs_").
std::string NewItemId(absl::string_view prefix);

}  // namespace linfer::openai
