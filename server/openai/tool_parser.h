// Incremental parsing of one or more tool calls of a chat reply, from the text after
// `<tool_call>` on. Used by ChatOutputParser; see chat_output.h for the two formats.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/openai/chat_output.h"
#include "server/openai/json_fields.h"

namespace linfer::openai {

class ToolCallParser {
 public:
  ToolCallParser(ToolFormat format, const Json* tools) : format_(format), tools_(tools) {}

  // Starts a call: the text after its opening marker follows through Feed. `opened`: the
  // `<tool_call>` marker was consumed (else the text starts with `<function=`).
  void Begin(bool opened);
  struct Result {
    bool ended = false;    // the closing marker was consumed (or the reply ended)
    std::string rest;      // text after the closing marker, not consumed
    std::string unparsed;  // text that turned out not to be a call, given back as content
  };
  // Consumes text of the current call (all of `text` unless the call ends in it). `final`: the
  // reply ended; `cut` with it: the reply was cut short (max_tokens, a cancel), so a call left
  // open keeps the arguments it streamed, unclosed (as OpenAI's API returns a call cut off), and
  // its unfinished markup is dropped, never given back as content. Ended by the model (`cut`
  // false), an open call is closed ("}" or "{}").
  Result Feed(absl::string_view text, bool final, bool cut, std::vector<ToolCallDelta>& out);
  int calls() const { return calls_; }

 private:
  bool FeedHermes(bool final, bool cut, std::vector<ToolCallDelta>& out, Result& r);
  // `closed`: the call ended (its arguments, when none came, are {}); `complete`: it ended with
  // its closing marker or the model's end (else it was cut: no {} made up).
  void StreamHermes(bool closed, bool complete, std::vector<ToolCallDelta>& out);
  bool FeedXml(bool final, bool cut, std::vector<ToolCallDelta>& out, Result& r);
  // One XML element; false when it needs more text. Sets `done` at the end of the block.
  bool XmlStep(bool final, std::vector<ToolCallDelta>& out, Result& r, bool& done);
  bool XmlParameter(bool final, std::vector<ToolCallDelta>& out);
  ToolCallDelta& Emit(std::vector<ToolCallDelta>& out);
  std::string ConvertParameter(const std::string& name, std::string value) const;

  ToolFormat format_;
  const Json* tools_;
  int calls_ = 0;         // calls emitted (the current one is calls_ - 1)
  std::string buf_;       // text of the current call not consumed yet
  std::string function_;  // XML: the current function's name
  bool named_ = false;    // the current call's name has been emitted
  int params_ = 0;        // XML: parameters emitted in the current call
  bool in_function_ = false;
  bool opened_ = true;  // the block began with <tool_call>
  // Hermes: the raw JSON of the call, scanned one character at a time by ScanHermes, so that
  // what is found (the name, where the arguments value starts and ends) depends only on the
  // text, never on how it was split into chunks.
  struct HermesScan {
    size_t pos = 0;          // characters of json_ scanned
    int depth = 0;           // open `{` and `[` (1: inside the call object)
    bool done = false;       // the call object closed, or the text is not an object
    bool in_string = false;  // inside a string literal (`escape`: just after a backslash)
    bool escape = false;
    bool expect_key = false;              // depth 1: the next string is in key position
    bool key_string = false;              // the current depth-1 string is in key position
    size_t string_at = 0;                 // where the current depth-1 string starts
    std::optional<std::string> key;       // a key waiting for its `:`
    std::optional<std::string> value_of;  // the key whose value starts at the next token
    bool args_nested = false;             // inside the arguments value, an object or array
    bool args_scalar = false;             // inside the arguments value, a bare scalar
    bool name_open = false;               // inside the name's string value
  };
  void ScanHermes();
  void ScanTopLevel(char c);
  void EndTopLevelString();
  std::string json_;
  HermesScan scan_;
  std::optional<std::string> name_;      // the call object's "name", once complete
  size_t args_at_ = std::string::npos;   // where its arguments value starts
  size_t args_end_ = std::string::npos;  // where it ends (npos while open)
  size_t args_sent_ = 0;                 // how much of it has been emitted
};

// The JSON Schema type a Qwen XML parameter's value is read as: the property's "type", the first
// non-null member of a list of types or of anyOf/oneOf's typed alternatives, or "" (none: the
// value is a string).
std::string PropertyType(const Json& property, const Json* root = nullptr, int depth = 0);
// Whether the property admits null (a type list with "null", nullable, an enum member or an
// alternative that is null): only then is a text parameter's "null" read as null.
bool PropertyNullable(const Json& property, const Json* root = nullptr, int depth = 0);
// `property` with its local "$ref"s ("#", "#/$defs/NAME", "#/definitions/NAME") followed in `root`
// (the function's `parameters`; null: none followed), at most 16 in a row. Both of the above
// follow them, also in anyOf/oneOf alternatives (pydantic's nested models, Optional[Model]).
const Json& ResolveRef(const Json& property, const Json* root);
// Whether a parameter of that type is read as raw text (a string, never parsed as JSON).
bool IsTextType(const std::string& type);

// A random tool call id: "call_" and 24 hex digits.
std::string NewToolCallId();

}  // namespace linfer::openai
