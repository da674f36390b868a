// Splitting a chat reply, as it streams, into reasoning (`<think>` … `</think>`), content and tool
// calls (Hermes/Qwen `<tool_call>{json}</tool_call>`, or Qwen3.5's XML `<tool_call><function=NAME>
// <parameter=P>value</parameter></function></tool_call>`). Text that may be the start of a marker
// is held back until it cannot be; tool-call arguments stream as they complete (Hermes: the raw
// JSON as written; XML: one fragment per parameter, typed by the tool's JSON schema).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/openai/json_fields.h"

namespace linfer::openai {

enum class ToolFormat { kNone, kHermes, kQwenXml };

// What a chat template's model writes: detected from the template source (see DetectSyntax).
struct ChatSyntax {
  bool reasoning = false;  // <think> … </think>
  ToolFormat tools = ToolFormat::kNone;
};

// `<think>` in the template: reasoning; `<function=`: Qwen XML tool calls; else `<tool_call>`:
// Hermes JSON tool calls.
ChatSyntax DetectSyntax(absl::string_view template_source);

// True when `prompt` ends inside an open `<think>` block (the template opened it for the model).
bool PromptOpensReasoning(absl::string_view prompt);

struct ToolCallDelta {
  int index = 0;
  std::string id;    // first fragment of a call only
  std::string name;  // first fragment of a call only
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void Append(ChatDelta other);
};

class ToolCallParser;

class ChatOutputParser {
 public:
  // `tools`: the request's tools (for parameter types; may be null). `parse_tools` false leaves
  // tool-call text in the content.
  ChatOutputParser(ChatSyntax syntax, bool start_in_reasoning, bool parse_tools, const Json* tools);
  ~ChatOutputParser();

  // The text of the next token(s); returns what can be released now.
  ChatDelta Push(absl::string_view text);
  // The end of the reply: releases everything held back. `cut`: the reply was cut short (by
  // max_tokens, a deadline or a cancel): a tool call left open stays open (see
  // ToolCallParser::Feed).
  ChatDelta Finish(bool cut = false);
  int tool_calls() const;
  // parallel_tool_calls false with tool_choice "auto" (vLLM's rule): the calls after the first
  // are parsed but left out of what Push and Finish release (tool_calls() still counts them).
  void KeepFirstToolCallOnly() { first_call_only_ = true; }
  // Inside a reasoning block (the text pushed last was, or the next is, reasoning).
  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State { kStart, kReasoning, kContent, kTool };
  void Step(ChatDelta& out, bool final);
  bool StepStart(bool final);
  bool StepReasoning(ChatDelta& out, bool final);
  bool StepContent(ChatDelta& out, bool final);

  ChatSyntax syntax_;
  bool parse_tools_;
  State state_;
  bool strip_newlines_ = false;  // drop "\n"s right after </think>
  bool cut_ = false;             // Finish(cut)
  std::string buffer_;           // text not yet released
  std::unique_ptr<ToolCallParser> tool_;
  bool first_call_only_ = false;
  // Drops the calls after the first from `out` (first_call_only_).
  void DropLaterCalls(ChatDelta& out) const;
};

// Length of the longest suffix of `text` that is a proper prefix of `marker` (text to hold back).
size_t PartialMarker(absl::string_view text, absl::string_view marker);

}  // namespace linfer::openai
