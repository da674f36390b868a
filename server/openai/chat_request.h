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
  Json documents;                // vLLM's documents (RAG templates read them), or null
  bool add_generation_prompt = true;
  // vLLM's continue_final_message: the final message is left open and the reply continues it
  // (rendered without the generation prompt, cut after that message's text).
  bool continue_final_message = false;
  bool parse_tools = false;  // tools given and tool_choice is not "none"
  // parallel_tool_calls (default true); false: at most one call is returned (vLLM's rule: the
  // calls after the first are dropped), one is made when forced.
  bool parallel_tool_calls = true;
  // tool_choice "required" or a named function: the reply is calls (tool_grammar.h).
  std::optional<ForcedToolCall> forced;
  // The request field each message came from where that is not "messages[i]" (Anthropic's
  // Messages API: "system", a tool result's "messages[2].content[0]"); empty: messages[i].
  std::vector<std::string> message_fields;
};

// The request field of r.messages[i], as errors name it.
std::string MessageField(const ChatRequest& r, size_t i);

// Errors are InvalidArgument naming the field ("messages[2].role: ...").
absl::StatusOr<ChatRequest> ParseChatRequest(const Json& body);

// OpenAI's reasoning effort ("none", "minimal", "low", "medium", "high", "xhigh") into the
// template variables as vLLM passes it: `reasoning_effort`, and "none" also turns
// `enable_thinking` off (Qwen's templates); values the request's chat_template_kwargs give win.
// InvalidArgument naming `field` for another value.
absl::Status ApplyReasoningEffort(const std::string& effort, const std::string& field,
                                  Json& kwargs);

// `text`, the template's rendering of `messages` without a generation prompt, cut right after the
// final message's text (transformers' apply_chat_template(continue_final_message=True)), so the
// reply continues that message. InvalidArgument naming `field` (default "messages[N]" of
// `messages`) when that message has no text, has tool calls, or the template does not write its
// text as given.
absl::StatusOr<std::string> CutAfterFinalMessage(const std::string& text, const Json& messages,
                                                 const std::string& field = "");

// The template's text for `messages` with the request's tools and kwargs. InvalidArgument when
// the model has no chat template or the template raises.
absl::StatusOr<std::string> RenderChat(const ChatSetup& setup, const ChatRequest& request,
                                       const Json& messages, bool add_generation_prompt);

}  // namespace linfer::openai
