// ChatOutputParser: the reasoning / content / tool-call state machine over streamed text.
#include "server/openai/chat_output.h"

#include <utility>

#include "absl/strings/match.h"
#include "server/openai/tool_parser.h"

namespace linfer::openai {
namespace {

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";
constexpr absl::string_view kToolOpen = "<tool_call>";
constexpr absl::string_view kFunctionOpen = "<function=";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

ChatSyntax DetectSyntax(absl::string_view source) {
  ChatSyntax s;
  s.reasoning = absl::StrContains(source, kThinkOpen);
  if (absl::StrContains(source, kFunctionOpen)) {
    s.tools = ToolFormat::kQwenXml;
  } else if (absl::StrContains(source, kToolOpen)) {
    s.tools = ToolFormat::kHermes;
  }
  return s;
}

bool PromptOpensReasoning(absl::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == absl::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkClose);
  return close == absl::string_view::npos || close < open;
}

size_t PartialMarker(absl::string_view text, absl::string_view marker) {
  const size_t most = std::min(text.size(), marker.size() - 1);
  for (size_t n = most; n > 0; --n) {
    if (absl::EndsWith(text, marker.substr(0, n))) return n;
  }
  return 0;
}

void ChatDelta::Append(ChatDelta other) {
  reasoning += other.reasoning;
  content += other.content;
  for (ToolCallDelta& t : other.tool_calls) tool_calls.push_back(std::move(t));
}

ChatOutputParser::ChatOutputParser(ChatSyntax syntax, bool start_in_reasoning, bool parse_tools,
                                   const Json* tools)
    : syntax_(syntax),
      parse_tools_(parse_tools && syntax.tools != ToolFormat::kNone),
      state_(start_in_reasoning ? State::kReasoning
             : syntax.reasoning ? State::kStart
                                : State::kContent),
      strip_newlines_(start_in_reasoning) {
  if (parse_tools_) tool_ = std::make_unique<ToolCallParser>(syntax.tools, tools);
}

ChatOutputParser::~ChatOutputParser() = default;

int ChatOutputParser::tool_calls() const { return tool_ ? tool_->calls() : 0; }

ChatDelta ChatOutputParser::Push(absl::string_view text) {
  buffer_.append(text.data(), text.size());
  ChatDelta out;
  Step(out, false);
  DropLaterCalls(out);
  return out;
}

ChatDelta ChatOutputParser::Finish(bool cut) {
  cut_ = cut;
  ChatDelta out;
  Step(out, true);
  if (!buffer_.empty()) {
    (state_ == State::kReasoning ? out.reasoning : out.content) += buffer_;
    buffer_.clear();
  }
  DropLaterCalls(out);
  return out;
}

void ChatOutputParser::DropLaterCalls(ChatDelta& out) const {
  if (!first_call_only_) return;
  std::erase_if(out.tool_calls, [](const ToolCallDelta& t) { return t.index > 0; });
}

void ChatOutputParser::Step(ChatDelta& out, bool final) {
  for (;;) {
    bool more = false;
    switch (state_) {
      case State::kStart:
        more = StepStart(final);
        break;
      case State::kReasoning:
        more = StepReasoning(out, final);
        break;
      case State::kContent:
        more = StepContent(out, final);
        break;
      case State::kTool: {
        const size_t fed = buffer_.size();
        const size_t calls = out.tool_calls.size();
        ToolCallParser::Result r = tool_->Feed(buffer_, final, final && cut_, out.tool_calls);
        buffer_ = std::move(r.rest);
        if (!r.unparsed.empty()) out.content += r.unparsed;
        if (r.ended && r.unparsed.empty() && out.tool_calls.size() == calls &&
            buffer_.size() >= fed && absl::StartsWith(buffer_, kFunctionOpen)) {
          // A bare `<function=` that turned out not to be a call: it is text (else the content
          // scan would find the same marker again, forever).
          out.content.append(kFunctionOpen.data(), kFunctionOpen.size());
          buffer_.erase(0, kFunctionOpen.size());
        }
        if (r.ended) {
          state_ = State::kContent;
          strip_newlines_ = r.unparsed.empty();  // whitespace between calls
          more = !buffer_.empty();
        }
        break;
      }
    }
    if (!more) return;
  }
}

// Only at the start of a reply: an opening <think> (after whitespace) starts the reasoning.
bool ChatOutputParser::StepStart(bool final) {
  size_t i = 0;
  while (i < buffer_.size() && IsSpace(buffer_[i])) ++i;
  const absl::string_view rest = absl::string_view(buffer_).substr(i);
  if (absl::StartsWith(rest, kThinkOpen)) {
    buffer_.erase(0, i + kThinkOpen.size());
    state_ = State::kReasoning;
    strip_newlines_ = true;
    return true;
  }
  if (!final && absl::StartsWith(kThinkOpen, rest)) return false;  // may still become <think>
  state_ = State::kContent;
  return true;
}

bool ChatOutputParser::StepReasoning(ChatDelta& out, bool final) {
  if (strip_newlines_) {
    const size_t n = buffer_.find_first_not_of('\n');
    buffer_.erase(0, n == std::string::npos ? buffer_.size() : n);
    if (buffer_.empty()) return false;
    strip_newlines_ = false;
  }
  const size_t at = absl::string_view(buffer_).find(kThinkClose);
  if (at != std::string::npos) {
    out.reasoning.append(buffer_, 0, at);
    buffer_.erase(0, at + kThinkClose.size());
    state_ = State::kContent;
    strip_newlines_ = true;
    return true;
  }
  const size_t hold = final ? 0 : PartialMarker(buffer_, kThinkClose);
  out.reasoning.append(buffer_, 0, buffer_.size() - hold);
  buffer_.erase(0, buffer_.size() - hold);
  return false;
}

bool ChatOutputParser::StepContent(ChatDelta& out, bool final) {
  if (strip_newlines_) {
    const size_t n = buffer_.find_first_not_of("\n");
    buffer_.erase(0, n == std::string::npos ? buffer_.size() : n);
    if (buffer_.empty()) return false;
    strip_newlines_ = false;
  }
  if (!parse_tools_) {
    out.content += buffer_;
    buffer_.clear();
    return false;
  }
  const size_t tool = absl::string_view(buffer_).find(kToolOpen);
  const size_t function = syntax_.tools == ToolFormat::kQwenXml
                              ? absl::string_view(buffer_).find(kFunctionOpen)
                              : std::string::npos;
  const size_t at = std::min(tool, function);
  if (at != std::string::npos) {
    out.content.append(buffer_, 0, at);
    buffer_.erase(0, at == tool ? at + kToolOpen.size() : at);
    tool_->Begin(at == tool);
    state_ = State::kTool;
    return true;
  }
  // The tail that may begin a call's opening marker waits for more text. At the end it is text,
  // unless the reply was cut short (max_tokens): then it is a call's markup cut off, as the rest
  // of a call cut short is never content.
  size_t hold = PartialMarker(buffer_, kToolOpen);
  if (syntax_.tools == ToolFormat::kQwenXml) {
    hold = std::max(hold, PartialMarker(buffer_, kFunctionOpen));
  }
  if (final && !cut_) hold = 0;
  out.content.append(buffer_, 0, buffer_.size() - hold);
  buffer_.erase(0, buffer_.size() - hold);
  if (final) buffer_.clear();  // (cut short: the partial marker goes)
  return false;
}

}  // namespace linfer::openai
