// The chat-specific fields of /v1/chat/completions (and of /tokenize with messages): messages
// normalised the way vLLM hands them to a template, tools, tool_choice and chat_template_kwargs;
// and rendering them with the model's chat template as transformers' apply_chat_template does.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/openai/chat_setup.h"
#include "server/openai/json_fields.h"
#include "server/openai/tool_grammar.h"

namespace linfer::openai {

struct ChatRequest {
  // Each message an object with a known role ("developer" becomes "system"); text-part lists
  // joined into a string; assistant tool-call arguments given as JSON text parsed into objects
  // (templates iterate over them); "reasoning" spelled "reasoning_content".
  Json messages = Json::array();
  Json tools;                    // the request's tools (array), or null
  Json kwargs = Json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  bool parse_tools = false;  // tools given and tool_choice is not "none"
  // tool_choice "required" or a named function: the reply is calls (tool_grammar.h).
  std::optional<ForcedToolCall> forced;
};

// Errors are InvalidArgument naming the field ("messages[2].role: ...").
absl::StatusOr<ChatRequest> ParseChatRequest(const Json& body);

// The template's text for `messages` with the request's tools and kwargs. InvalidArgument when
// the model has no chat template or the template raises.
absl::StatusOr<std::string> RenderChat(const ChatSetup& setup, const ChatRequest& request,
                                       const Json& messages, bool add_generation_prompt);

}  // namespace linfer::openai
