// The /v1/messages formatter: one reply split (by ChatOutputParser) into content blocks —
// "thinking", "text" and "tool_use" — and, streaming, Anthropic's events, each `event: TYPE` +
// `data: {"type": TYPE, ...}`:
//
//   message_start {message: {id, content: [], usage: {input_tokens, output_tokens: 0}}}  (head)
//   per block: content_block_start {index, content_block}
//              content_block_delta {index, delta: thinking_delta | text_delta}*, or for a
//              tool_use block one input_json_delta with its whole input as it closes
//              content_block_stop {index}
//   message_delta {delta: {stop_reason, stop_sequence}, usage: {output_tokens}}, message_stop
//   (tail), or `event: error` {error: {type, message}} when the generation failed.
//
// stop_reason: "end_turn", "stop_sequence" (with stop_sequence), "tool_use" (the reply called a
// tool), "max_tokens"; null when it was cut otherwise (a deadline, a cancel).
#include <map>

#include "server/openai/messages_api.h"
#include "server/openai/responses.h"
#include "server/openai/responses_request.h"

namespace linfer::openai {
namespace {

class MessagesFormatter : public Formatter {
 public:
  explicit MessagesFormatter(FormatOptions o)
      : Formatter(std::move(o)),
        parser_(o_.syntax, o_.start_in_reasoning, o_.parse_tools, &o_.tools) {
    if (o_.first_tool_call_only) parser_.KeepFirstToolCallOnly();
  }

  std::string StreamHead() override {
    std::string sse;
    Json m = Message(nullptr);
    m["content"] = Json::array();
    Emit("message_start", {{"message", std::move(m)}}, &sse);
    return sse;
  }

  void Event(int, const TokenEvent& e, const Json&, std::string* sse) override {
    Apply(parser_.Push(e.text), o_.stream ? sse : nullptr);
  }

  void End(int, const ChoiceEnd& end, const Json&, std::string* sse) override {
    end_ = end;
    Apply(parser_.Finish(end.finish != Finish::kStop), o_.stream ? sse : nullptr);
    CloseOpen(o_.stream ? sse : nullptr);
  }

  Json Response(const UsageTotals& usage) override { return Message(&usage); }

  void StreamTail(const absl::Status& error, const UsageTotals& usage, bool, const ChoiceEnd*,
                  std::string* sse) override {
    if (!error.ok()) {
      Emit("error",
           {{"error",
             {{"type", AnthropicErrorType(AnthropicErrorResponse(error).status)},
              {"message", std::string(error.message())}}}},
           sse);
      return;
    }
    Json delta = {{"delta", {{"stop_reason", StopReason()}, {"stop_sequence", StopSequence()}}},
                  // the counts message_start could not know yet (the SDK overwrites them)
                  {"usage",
                   {{"input_tokens", usage.prompt - usage.cached},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", usage.cached},
                    {"output_tokens", usage.completion}}}};
    if (!o_.session.is_null()) delta["session"] = SessionNote(&end_);
    Emit("message_delta", std::move(delta), sse);
    Emit("message_stop", Json::object(), sse);
  }

  HttpResponse ErrorResponse(const absl::Status& status) const override {
    return AnthropicErrorResponse(status);
  }

 private:
  enum class Kind { kThinking, kText, kToolUse };
  struct Block {
    Kind kind;
    std::string text;  // thinking or text; a tool call's arguments (JSON text)
    std::string id, name;
  };

  void Emit(const std::string& type, const Json& fields, std::string* sse) const {
    if (sse == nullptr) return;
    Json e = {{"type", type}};
    for (const auto& [k, v] : fields.items()) e[k] = v;
    *sse += SseEvent(type, e);
  }

  // The block as the message lists it; `start`: as content_block_start announces it (empty).
  Json BlockJson(const Block& b, bool start) const {
    switch (b.kind) {
      case Kind::kThinking:
        return {{"type", "thinking"}, {"thinking", start ? "" : b.text}, {"signature", ""}};
      case Kind::kText:
        return {{"type", "text"}, {"text", start ? "" : b.text}};
      case Kind::kToolUse:
        return {{"type", "tool_use"},
                {"id", b.id},
                {"name", b.name},
                {"input", start ? Json::object() : Input(b.text)}};
    }
    return nullptr;
  }

  // A call's arguments as the API's `input`, always an object: the JSON object the model wrote
  // (or a string holding one); else {} (the call is malformed; its text is not an input).
  static Json Input(const std::string& text) {
    Json v = ParseJsonText(text);
    if (v.is_string()) v = ParseJsonText(v.get<std::string>());
    return v.is_object() ? v : Json::object();
  }

  // A tool_use block's input goes out whole as it closes (one input_json_delta of the object the
  // message carries), so a streamed reply and a whole one always agree.
  void CloseOpen(std::string* sse) {
    if (open_ < 0) return;
    const Block& b = blocks_[open_];
    if (b.kind == Kind::kToolUse) {
      Delta(open_, {{"type", "input_json_delta"}, {"partial_json", Dump(Input(b.text))}}, sse);
    }
    Emit("content_block_stop", {{"index", open_}}, sse);
    open_ = -1;
  }

  // The open block of `kind`, else a new one.
  int Current(Kind kind, std::string* sse, const ToolCallDelta* call = nullptr) {
    if (open_ >= 0 && blocks_[open_].kind == kind && call == nullptr) return open_;
    CloseOpen(sse);
    Block b;
    b.kind = kind;
    if (call != nullptr) {
      b.id = call->id.empty() ? NewItemId("toolu_") : call->id;
      b.name = call->name;
    }
    blocks_.push_back(std::move(b));
    open_ = static_cast<int>(blocks_.size()) - 1;
    Emit("content_block_start",
         {{"index", open_}, {"content_block", BlockJson(blocks_.back(), true)}}, sse);
    return open_;
  }

  void Delta(int index, Json delta, std::string* sse) const {
    Emit("content_block_delta", {{"index", index}, {"delta", std::move(delta)}}, sse);
  }

  // A delta's fragments of calls already open come first (they continue them: text or thinking
  // opening first would close them), then its thinking and text, then new calls. A closed block
  // takes no more: its input went out as it closed, and the message must say the same.
  void Apply(const ChatDelta& d, std::string* sse) {
    const std::map<int, int> open_before = calls_;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (auto found = open_before.find(t.index); found != open_before.end()) {
        if (found->second == open_) blocks_[open_].text += t.arguments;
      }
    }
    if (!d.reasoning.empty()) {
      const int i = Current(Kind::kThinking, sse);
      blocks_[i].text += d.reasoning;
      Delta(i, {{"type", "thinking_delta"}, {"thinking", d.reasoning}}, sse);
    }
    if (!d.content.empty()) {
      const int i = Current(Kind::kText, sse);
      blocks_[i].text += d.content;
      Delta(i, {{"type", "text_delta"}, {"text", d.content}}, sse);
    }
    for (const ToolCallDelta& t : d.tool_calls) {
      if (open_before.contains(t.index)) continue;
      auto found = calls_.find(t.index);  // opened by an earlier fragment of this delta
      const int i = found != calls_.end() ? found->second : Current(Kind::kToolUse, sse, &t);
      calls_[t.index] = i;
      if (i == open_) blocks_[i].text += t.arguments;  // sent whole when the block closes
    }
  }

  Json StopReason() const {
    switch (end_.finish) {
      case Finish::kStop:
        if (end_.stop_string) return "stop_sequence";
        return calls_.empty() ? "end_turn" : "tool_use";
      case Finish::kLength:
        return "max_tokens";
      default:
        return nullptr;
    }
  }
  Json StopSequence() const {
    return end_.finish == Finish::kStop && end_.stop_string ? Json(*end_.stop_string)
                                                            : Json(nullptr);
  }

  // The message object; `usage` null: as message_start announces it.
  Json Message(const UsageTotals* usage) const {
    Json content = Json::array();
    for (const Block& b : blocks_) content.push_back(BlockJson(b, false));
    const int64_t input =
        usage != nullptr ? usage->prompt : o_.response_base.value("input_tokens", 0);
    const int64_t cached = usage != nullptr ? usage->cached : 0;
    Json m = {{"id", o_.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", o_.model},
              {"content", std::move(content)},
              {"stop_reason", usage != nullptr ? StopReason() : Json(nullptr)},
              {"stop_sequence", usage != nullptr ? StopSequence() : Json(nullptr)},
              {"usage",
               {{"input_tokens", input - cached},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", cached},
                {"output_tokens", usage != nullptr ? usage->completion : 0}}}};
    // linfer's session (session_id): as chat completions' `session`, at the end.
    if (usage != nullptr && !o_.session.is_null()) m["session"] = SessionNote(&end_);
    return m;
  }

  ChatOutputParser parser_;
  std::vector<Block> blocks_;
  int open_ = -1;
  std::map<int, int> calls_;  // tool-call index → block
  ChoiceEnd end_;
};

}  // namespace

std::unique_ptr<Formatter> MakeMessagesFormatter(FormatOptions options) {
  return std::make_unique<MessagesFormatter>(std::move(options));
}

}  // namespace linfer::openai
