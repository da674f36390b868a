// Fuzz target: a model reply through ChatOutputParser, the streaming split of generated text into
// reasoning, content and tool calls: fed whole, byte by byte, in 3-byte pieces and in uneven ones,
// the reasoning, content and tool calls must come out the same, in every tool-call format
// (malformed tool-call JSON included). When the bytes also parse as a request body, its `tools`
// go to the parser. Seeds: replies in every format, and request bodies that carry tools.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/openai/chat_output.h"
#include "server/openai/params.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using linfer::fuzz::Require;
using namespace linfer::openai;  // NOLINT

struct Output {
  std::string reasoning, content;
  std::map<int, std::string> names, args;
  bool operator==(const Output& o) const {
    return reasoning == o.reasoning && content == o.content && names == o.names && args == o.args;
  }
};

// `text` fed in pieces of the sizes in `steps`, in turn.
Output ParseReply(const std::string& text, const std::vector<size_t>& steps, ChatSyntax syntax,
                  bool reasoning, const Json* tools) {
  ChatOutputParser p(syntax, reasoning, true, tools);
  ChatDelta all;
  for (size_t i = 0, k = 0; i < text.size(); i += steps[k++ % steps.size()]) {
    all.Append(p.Push(text.substr(i, steps[k % steps.size()])));
  }
  all.Append(p.Finish());
  Output out{all.reasoning, all.content, {}, {}};
  for (const ToolCallDelta& t : all.tool_calls) {
    out.names[t.index] += t.name;
    out.args[t.index] += t.arguments;
  }
  return out;
}

void CheckReply(const std::string& text, const Json* tools) {
  for (ToolFormat format : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwenXml}) {
    for (bool reasoning : {false, true}) {
      const ChatSyntax syntax{true, format};
      const Output whole = ParseReply(text, {text.size() + 1}, syntax, reasoning, tools);
      Require(ParseReply(text, {1}, syntax, reasoning, tools) == whole,
              "byte-by-byte parsing differs from whole-text parsing");
      Require(ParseReply(text, {3}, syntax, reasoning, tools) == whole,
              "3-byte parsing differs from whole-text parsing");
      Require(ParseReply(text, {2, 5, 1, 7, 4}, syntax, reasoning, tools) == whole,
              "uneven-piece parsing differs from whole-text parsing");
      if (format == ToolFormat::kNone && !reasoning && text.find("<think>") == std::string::npos) {
        Require(whole.content == text, "plain text passes through unchanged");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Json> body = ParseBody(text);
  const Json* tools = nullptr;
  if (body.ok()) {
    auto it = body->find("tools");
    if (it != body->end()) tools = &*it;
  }
  if (size <= 4096) CheckReply(text, tools);
  return 0;
}
