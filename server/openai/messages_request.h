// POST /v1/messages (and /v1/messages/count_tokens), the request side: Anthropic's Messages API
// body read into what chat completions already runs on.
//
//   model, max_tokens (required), messages ({"role": "user" | "assistant", "content": string |
//   blocks}), system (string | text blocks), stop_sequences, temperature, top_p, top_k, stream,
//   tools ({"name", "description", "input_schema"}), tool_choice ({"type": "auto" | "none"}),
//   thinking ({"type": "enabled", "budget_tokens"} renders the template with enable_thinking
//   true and closes the reasoning block after budget_tokens (CommonParams::thinking_budget);
//   "disabled" or absent: false, as the API has no thinking unless asked), metadata.user_id
//   Blocks: text; user tool_result ({"tool_use_id", "content", "is_error"}: a tool message each,
//   before the message's text); assistant tool_use ({"id", "name", "input"}: the message's tool
//   calls) and thinking (its reasoning); redacted_thinking is skipped.
//   vLLM's extras: min_p, repetition/presence/frequency penalties, seed, chat_template_kwargs.
//   linfer's: session_id (or the x-session-id header) and create_session, as on chat completions
//   (count_tokens refuses session_id: it counts a whole conversation).
//
// Refused by name: image, document and other block types, server tools (a "type" other than
// "custom"), tool_choice "any"/"tool", mcp_servers, container.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/openai/chat_request.h"
#include "server/openai/params.h"

namespace linfer::openai {

struct MessagesRequest {
  CommonParams params;  // max_tokens is params.stop.max_tokens
  ChatRequest chat;     // messages with the system prompt first; tools in chat's form
  // The request's last message as errors name it ("messages[N]"; chat.messages counts the
  // system prompt and tool results apart).
  std::string final_message;
};

// `count_only`: /v1/messages/count_tokens (no max_tokens). Errors are InvalidArgument naming the
// field ("messages[1].content[0].type: ..."). `request` gives the x-session-id header.
absl::StatusOr<MessagesRequest> ParseMessagesRequest(const Json& body, bool count_only = false,
                                                     const HttpRequest& request = HttpRequest());

}  // namespace linfer::openai
