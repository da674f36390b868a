// Fuzz target: a model reply through ChatOutputParser, the streaming split of generated text into
// reasoning, content and tool calls: fed whole, byte by byte, in 3-byte pieces and in uneven ones,
// the reasoning, content and tool calls must come out the same, in every tool-call format
// (malformed tool-call JSON included), ended by the model or cut short. When the bytes also parse
// as a request body, its `tools` go to the parser. The same reply through the /v1/responses
// formatter, streamed in uneven pieces: every event is JSON with the next sequence number, and the
// items rebuilt from the events the way the official SDK rebuilds them equal the final response's
// output, which equals the non-streamed response's. Seeds: replies in every format, and request
// bodies that carry tools.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/openai/chat_output.h"
#include "server/openai/params.h"
#include "server/openai/responses.h"
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
                  bool reasoning, const Json* tools, bool cut) {
  ChatOutputParser p(syntax, reasoning, true, tools);
  ChatDelta all;
  for (size_t i = 0, k = 0; i < text.size(); i += steps[k++ % steps.size()]) {
    all.Append(p.Push(text.substr(i, steps[k % steps.size()])));
  }
  all.Append(p.Finish(cut));
  Output out{all.reasoning, all.content, {}, {}};
  for (const ToolCallDelta& t : all.tool_calls) {
    out.names[t.index] += t.name;
    out.args[t.index] += t.arguments;
  }
  return out;
}

void CheckReply(const std::string& text, const Json* tools) {
  for (ToolFormat format : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwenXml}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool reasoning = variant & 1, cut = variant & 2;  // cut: the reply hit max_tokens
      const ChatSyntax syntax{true, format};
      const Output whole = ParseReply(text, {text.size() + 1}, syntax, reasoning, tools, cut);
      Require(ParseReply(text, {1}, syntax, reasoning, tools, cut) == whole,
              "byte-by-byte parsing differs from whole-text parsing");
      Require(ParseReply(text, {3}, syntax, reasoning, tools, cut) == whole,
              "3-byte parsing differs from whole-text parsing");
      Require(ParseReply(text, {2, 5, 1, 7, 4}, syntax, reasoning, tools, cut) == whole,
              "uneven-piece parsing differs from whole-text parsing");
      if (format == ToolFormat::kNone && !reasoning && text.find("<think>") == std::string::npos) {
        Require(whole.content == text, "plain text passes through unchanged");
      }
    }
  }
}

// The items' texts (reasoning, message, call name + arguments), ids and statuses left out.
std::vector<std::string> ItemTexts(const Json& output) {
  std::vector<std::string> out;
  for (const Json& item : output) {
    std::string t = item.value("type", std::string()) + ":";
    if (item.contains("content")) {
      for (const Json& part : item["content"]) t += part.value("text", std::string());
    }
    if (item.contains("arguments"))
      t += item.value("name", std::string()) + item["arguments"].get<std::string>();
    out.push_back(t);
  }
  return out;
}

void CheckResponses(const std::string& text, const Json* tools) {
  for (ToolFormat format : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwenXml}) {
    std::vector<std::string> finals;
    for (bool stream : {true, false}) {
      FormatOptions o;
      o.api = Api::kResponses;
      o.id = "resp_f";
      o.stream = stream;
      o.syntax = {true, format};
      o.start_in_reasoning = true;
      o.parse_tools = true;
      if (tools != nullptr) o.tools = *tools;
      std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
      std::string sse;
      // Uneven pieces cut at code point boundaries, as the detokenizer releases text.
      const size_t steps[] = {2, 5, 1, 7, 4};
      for (size_t i = 0, k = 0; i < text.size(); ++k) {
        size_t n = std::min(steps[k % 5], text.size() - i);
        while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
        linfer::TokenEvent e;
        e.token = 1;
        e.text = text.substr(i, n);
        f->Event(0, e, nullptr, &sse);
        i += n;
      }
      f->End(0, {linfer::Finish::kStop, std::nullopt, std::nullopt, std::nullopt}, nullptr, &sse);
      if (!stream) {
        Require(sse.empty(), "a non-streamed response streams nothing");
        finals.push_back(Dump(Json(ItemTexts(f->Response({1, 1, 0})["output"]))));
        continue;
      }
      f->StreamTail(absl::OkStatus(), {1, 1, 0}, false, nullptr, &sse);
      sse = f->StreamHead() + sse;
      Json snapshot;
      int64_t next = 0;
      Json last;
      for (size_t at = 0; at < sse.size();) {
        const size_t end = sse.find("\n\n", at);
        Require(end != std::string::npos, "an event ends with a blank line");
        const std::string block = sse.substr(at, end - at);
        at = end + 2;
        const size_t data = block.find("\ndata: ");
        Require(block.rfind("event: ", 0) == 0 && data != std::string::npos, "event + data");
        const Json e = Json::parse(block.substr(data + 7), nullptr, false);
        Require(e.is_object() && e["type"] == block.substr(7, data - 7), "data names its event");
        Require(e["sequence_number"] == next++, "sequence numbers in order");
        const std::string type = e["type"];
        if (snapshot.is_null()) {
          Require(type == "response.created", "the stream opens with response.created");
          snapshot = e["response"];
        } else if (type == "response.output_item.added") {
          snapshot["output"].push_back(e["item"]);
        } else if (type == "response.content_part.added") {
          snapshot["output"].at(e["output_index"].get<size_t>())["content"].push_back(e["part"]);
        } else if (type == "response.output_text.delta" ||
                   type == "response.reasoning_text.delta") {
          Json& part = snapshot["output"].at(e["output_index"].get<size_t>())["content"].at(0);
          part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
        } else if (type == "response.function_call_arguments.delta") {
          Json& item = snapshot["output"].at(e["output_index"].get<size_t>());
          item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
        }
        last = e;
      }
      Require(last["type"] == "response.completed", "the stream closes with response.completed");
      const std::string final_items = Dump(Json(ItemTexts(last["response"]["output"])));
      Require(Dump(Json(ItemTexts(snapshot["output"]))) == final_items,
              "the events rebuild the final output");
      finals.push_back(final_items);
    }
    Require(finals[0] == finals[1], "streamed and whole responses have the same output");
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
  // (valid UTF-8 only: the events' JSON replaces invalid bytes delta by delta)
  if (size <= 1024 && Json::parse(Dump(Json(text)), nullptr, false) == Json(text)) {
    CheckResponses(text, tools);
  }
  return 0;
}
