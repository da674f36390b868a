// The /v1/responses formatter: one reply split (by ChatOutputParser) into output items —
// "reasoning", "message" (one output_text part) and "function_call" — and, streaming, the
// Responses API's named events, each `event: TYPE` + `data: {"type", "sequence_number", ...}`:
//
//   response.created, response.in_progress                            (StreamHead)
//   per item: response.output_item.added
//     reasoning: content_part.added, reasoning_text.delta*, reasoning_text.done, content_part.done
//     message:   content_part.added, output_text.delta* (with logprobs), output_text.done,
//                content_part.done
//     call:      function_call_arguments.delta*, function_call_arguments.done
//   response.output_item.done
//   response.completed | response.incomplete (max_output_tokens) | response.failed   (StreamTail)
//
// No "data: [DONE]". Items open in the order the reply writes them; an item closes when the next
// one opens or the reply ends.
#include <map>

#include "server/http_status.h"
#include "server/openai/responses.h"
#include "server/openai/responses_request.h"

namespace linfer::openai {
namespace {

class ResponsesFormatter : public Formatter {
 public:
  explicit ResponsesFormatter(FormatOptions o)
      : Formatter(std::move(o)),
        parser_(o_.syntax, o_.start_in_reasoning, o_.parse_tools, &o_.tools) {
    if (o_.first_tool_call_only) parser_.KeepFirstToolCallOnly();
  }

  // Sent when the stream starts, after the first events were formatted: it takes the sequence
  // numbers kept for it.
  std::string StreamHead() override {
    std::string sse;
    Json r = Object("in_progress", nullptr);
    r["output"] = Json::array();  // the events formatted before this one add the items
    int64_t next = 0;
    Emit("response.created", {{"response", r}}, &sse, &next);
    Emit("response.in_progress", {{"response", r}}, &sse, &next);
    return sse;
  }

  void Event(int, const TokenEvent& e, const Json&, std::string* sse) override {
    const bool reasoning_before = parser_.in_reasoning();
    ChatDelta d = parser_.Push(e.text);
    if (e.token >= 0) {
      if (reasoning_before || parser_.in_reasoning()) {
        ++reasoning_tokens_;
      } else if (o_.logprobs) {
        pending_logprobs_.push_back(LogprobEntry(o_, e));
      }
    }
    Apply(d, o_.stream ? sse : nullptr);
  }

  void End(int, const ChoiceEnd& end, const Json&, std::string* sse) override {
    end_ = end;
    Apply(parser_.Finish(end.finish != Finish::kStop), o_.stream ? sse : nullptr);
    CloseAll(o_.stream ? sse : nullptr, end.finish == Finish::kStop ? "completed" : "incomplete");
  }

  HttpResponse ErrorResponse(const absl::Status& status) const override {
    return ::linfer::ErrorResponse(ResponsesTerms(status));
  }

  Json Response(const UsageTotals& usage) override {
    Json r = Final(usage);
    if (o_.on_final) o_.on_final(r);
    return r;
  }

  void StreamTail(const absl::Status& error, const UsageTotals& usage, bool, const ChoiceEnd*,
                  std::string* sse) override {
    if (!error.ok()) {
      CloseAll(sse, "incomplete");
      Json r = Object("failed", UsageObject(usage));
      r["error"] = {{"code", ErrorCode(error)},
                    {"message", std::string(ResponsesTerms(error).message())}};
      Emit("response.failed", {{"response", std::move(r)}}, sse);
      return;
    }
    Json r = Final(usage);
    if (o_.on_final) o_.on_final(r);
    const std::string type = r["status"] == "completed"    ? "response.completed"
                             : r["status"] == "incomplete" ? "response.incomplete"
                                                           : "response.failed";
    Emit(type, {{"response", std::move(r)}}, sse);
  }

 private:
  enum class Kind { kReasoning, kMessage, kCall };
  struct Item {
    Kind kind;
    std::string id;
    bool done = false;
    std::string status = "completed";  // once done: "incomplete" when the reply was cut in it
    std::string text;                  // reasoning or message text; a call's arguments
    Json logprobs = Json::array();
    std::string call_id, name;
  };

  static std::string ErrorCode(const absl::Status& s) {
    switch (s.code()) {
      case absl::StatusCode::kInvalidArgument:
        return "invalid_prompt";
      case absl::StatusCode::kResourceExhausted:
        return "rate_limit_exceeded";
      default:
        return "server_error";
    }
  }

  void Emit(const std::string& type, const Json& fields, std::string* sse,
            int64_t* sequence = nullptr) {
    if (sse == nullptr) return;
    Json e = {{"type", type}, {"sequence_number", (*(sequence ? sequence : &sequence_))++}};
    for (const auto& [k, v] : fields.items()) e[k] = v;
    *sse += SseEvent(type, e);
  }

  Json Part(const Item& it) const {
    if (it.kind == Kind::kReasoning) return {{"type", "reasoning_text"}, {"text", it.text}};
    return {{"type", "output_text"},
            {"text", it.text},
            {"annotations", Json::array()},
            {"logprobs", it.logprobs}};
  }

  // The item as output lists it; `added`: as response.output_item.added announces it (empty).
  Json ItemJson(const Item& it, bool added) const {
    const std::string& status = added ? std::string("in_progress") : it.status;
    switch (it.kind) {
      case Kind::kReasoning:
        return {{"type", "reasoning"},
                {"id", it.id},
                {"summary", Json::array()},
                {"content", added ? Json::array() : Json::array({Part(it)})},
                {"status", status}};
      case Kind::kMessage:
        return {{"type", "message"},
                {"id", it.id},
                {"status", status},
                {"role", "assistant"},
                {"content", added ? Json::array() : Json::array({Part(it)})}};
      case Kind::kCall:
        return {{"type", "function_call"},
                {"id", it.id},
                {"call_id", it.call_id},
                {"name", it.name},
                {"arguments", added ? std::string() : it.text},
                {"status", status}};
    }
    return nullptr;
  }

  // A call's `call_id` and `name` come with its first fragment, before it is announced.
  int Open(Kind kind, std::string* sse, const ToolCallDelta* call = nullptr) {
    // Tokens not yet released as message text, when a call or reasoning opens, were its text.
    if (kind != Kind::kMessage) pending_logprobs_ = Json::array();
    CloseAll(sse);
    Item it;
    it.kind = kind;
    if (call != nullptr) {
      it.call_id = call->id;
      it.name = call->name;
    }
    it.id = NewItemId(kind == Kind::kReasoning ? "rs_" : kind == Kind::kMessage ? "msg_" : "fc_");
    items_.push_back(std::move(it));
    const int index = static_cast<int>(items_.size()) - 1;
    Emit("response.output_item.added",
         {{"output_index", index}, {"item", ItemJson(items_.back(), true)}}, sse);
    if (kind != Kind::kCall) {
      Item empty = items_.back();
      Emit("response.content_part.added",
           {{"item_id", empty.id},
            {"output_index", index},
            {"content_index", 0},
            {"part", Part(empty)}},
           sse);
    }
    return index;
  }

  void Close(int index, std::string* sse, const std::string& status) {
    Item& it = items_[index];
    if (it.done) return;
    it.done = true;
    it.status = status;
    const Json where = {{"item_id", it.id}, {"output_index", index}};
    auto with = [&](Json extra) {
      Json j = where;
      for (const auto& [k, v] : extra.items()) j[k] = v;
      return j;
    };
    switch (it.kind) {
      case Kind::kReasoning:
        Emit("response.reasoning_text.done", with({{"content_index", 0}, {"text", it.text}}), sse);
        Emit("response.content_part.done", with({{"content_index", 0}, {"part", Part(it)}}), sse);
        break;
      case Kind::kMessage:
        for (Json& lp : pending_logprobs_) it.logprobs.push_back(std::move(lp));
        pending_logprobs_.clear();
        Emit("response.output_text.done",
             with({{"content_index", 0}, {"text", it.text}, {"logprobs", it.logprobs}}), sse);
        Emit("response.content_part.done", with({{"content_index", 0}, {"part", Part(it)}}), sse);
        break;
      case Kind::kCall:
        Emit("response.function_call_arguments.done",
             with({{"name", it.name}, {"arguments", it.text}}), sse);
        break;
    }
    Emit("response.output_item.done", {{"output_index", index}, {"item", ItemJson(it, false)}},
         sse);
  }

  // Items end "completed" when the next opens; at the reply's end, as the reply ended.
  void CloseAll(std::string* sse, const std::string& status = "completed") {
    for (size_t i = 0; i < items_.size(); ++i) Close(static_cast<int>(i), sse, status);
  }

  // The open item of `kind` (the last item, not yet closed), else a new one.
  int Current(Kind kind, std::string* sse) {
    if (!items_.empty() && items_.back().kind == kind && !items_.back().done) {
      return static_cast<int>(items_.size()) - 1;
    }
    return Open(kind, sse);
  }

  // A tool-call fragment: arguments for the call's item (opened with its first fragment). A
  // closed item takes no more (its done events are out, and output must say what they said).
  void ApplyCall(const ToolCallDelta& t, std::string* sse) {
    auto found = calls_.find(t.index);
    int i = 0;
    if (found == calls_.end()) {
      i = Open(Kind::kCall, sse, &t);
      calls_[t.index] = i;
    } else {
      i = found->second;
    }
    Item& it = items_[i];
    if (it.done) return;
    if (!t.id.empty()) it.call_id = t.id;
    if (!t.name.empty()) it.name = t.name;
    if (t.arguments.empty()) return;
    it.text += t.arguments;
    Emit("response.function_call_arguments.delta",
         {{"item_id", it.id}, {"output_index", i}, {"delta", t.arguments}}, sse);
  }

  // A delta's fragments of calls already open come first (they continue them: text or reasoning
  // opening first would close them), then its reasoning and text, then new calls.
  void Apply(const ChatDelta& d, std::string* sse) {
    const std::map<int, int> open_before = calls_;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (open_before.contains(t.index)) ApplyCall(t, sse);
    }
    if (!d.reasoning.empty()) {
      const int i = Current(Kind::kReasoning, sse);
      items_[i].text += d.reasoning;
      Emit("response.reasoning_text.delta",
           {{"item_id", items_[i].id},
            {"output_index", i},
            {"content_index", 0},
            {"delta", d.reasoning}},
           sse);
    }
    if (!d.content.empty()) {
      const int i = Current(Kind::kMessage, sse);
      items_[i].text += d.content;
      Json lp = Json::array();
      for (Json& e : pending_logprobs_) lp.push_back(std::move(e));
      pending_logprobs_.clear();
      for (const Json& e : lp) items_[i].logprobs.push_back(e);
      Emit("response.output_text.delta",
           {{"item_id", items_[i].id},
            {"output_index", i},
            {"content_index", 0},
            {"delta", d.content},
            {"logprobs", std::move(lp)}},
           sse);
    }
    for (const ToolCallDelta& t : d.tool_calls) {
      if (!open_before.contains(t.index)) ApplyCall(t, sse);
    }
  }

  Json UsageObject(const UsageTotals& u) const {
    return {{"input_tokens", u.prompt},
            {"input_tokens_details", {{"cached_tokens", u.cached}}},
            {"output_tokens", u.completion},
            {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
            {"total_tokens", u.prompt + u.completion}};
  }

  // The response object: id, status and the echoed request settings, then output and usage.
  Json Object(const std::string& status, Json usage) const {
    Json r = {{"id", o_.id},      {"object", "response"}, {"created_at", o_.created},
              {"status", status}, {"error", nullptr},     {"incomplete_details", nullptr},
              {"model", o_.model}};
    for (const auto& [k, v] : o_.response_base.items()) r[k] = v;
    r["output"] = Json::array();
    for (const Item& it : items_) {
      if (it.done) r["output"].push_back(ItemJson(it, false));
    }
    r["usage"] = std::move(usage);
    return r;
  }

  // completed (a stop token or string), incomplete (max_output_tokens), else failed with an
  // error saying why (the request's deadline passed; it was cancelled: the client went away or
  // the server stopped).
  Json Final(const UsageTotals& usage) const {
    const Finish f = end_.finish;
    const std::string status = f == Finish::kStop     ? "completed"
                               : f == Finish::kLength ? "incomplete"
                                                      : "failed";
    Json r = Object(status, UsageObject(usage));
    if (f == Finish::kLength) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (status == "failed") {
      r["error"] =
          f == Finish::kDeadline
              ? Json{{"code", "deadline_exceeded"}, {"message", "the request's deadline passed"}}
              : Json{{"code", "cancelled"}, {"message", "the request was cancelled"}};
    }
    return r;
  }

  ChatOutputParser parser_;
  std::vector<Item> items_;
  std::map<int, int> calls_;               // tool-call index → item
  Json pending_logprobs_ = Json::array();  // tokens whose text the parser has not released yet
  int64_t reasoning_tokens_ = 0;
  int64_t sequence_ = 2;  // 0 and 1: the head's
  ChoiceEnd end_;
};

}  // namespace

std::unique_ptr<Formatter> MakeResponsesFormatter(FormatOptions options) {
  return std::make_unique<ResponsesFormatter>(std::move(options));
}

}  // namespace linfer::openai
