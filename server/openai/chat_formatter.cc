// The /v1/chat/completions formatter: deltas with role, content, reasoning_content and
// tool_calls; the non-streaming message; logprobs as {"content": [...]}.
#include <map>
#include <utility>
#include <vector>

#include "server/openai/responses.h"

namespace linfer::openai {
namespace {

class ChatFormatter : public Formatter {
 public:
  ChatFormatter(FormatOptions o, int choices) : Formatter(std::move(o)) {
    for (int i = 0; i < choices; ++i) {
      c_.push_back(
          std::make_unique<Choice>(o_.syntax, o_.start_in_reasoning, o_.parse_tools, &o_.tools));
      if (o_.first_tool_call_only) c_.back()->parser.KeepFirstToolCallOnly();
    }
  }

  void Event(int c, const TokenEvent& e, const Json& usage, std::string* sse) override {
    Choice& ch = *c_[c];
    Json lp = nullptr;
    ChatDelta d = Take(ch, e, &lp);
    if (!o_.stream) {
      Accumulate(ch, std::move(d));
      return;
    }
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array(
        {{{"index", c}, {"delta", Delta(ch, d)}, {"logprobs", lp}, {"finish_reason", nullptr}}});
    AddTokenIds(e.token, chunk);
    if (!usage.is_null()) chunk["usage"] = usage;
    *sse += SseData(chunk);
  }

  void EventAndEnd(int c, const TokenEvent& e, const ChoiceEnd& end, const Json& usage,
                   std::string* sse) override {
    if (!o_.stream) {
      Event(c, e, usage, sse);
      End(c, end, usage, sse);
      return;
    }
    Choice& ch = *c_[c];
    Json lp = nullptr;
    ChatDelta d = Take(ch, e, &lp);
    ch.end = end;
    d.Append(ch.parser.Finish(end.finish != Finish::kStop));
    *sse += SseData(FinishChunk(c, ch, d, lp, end, usage, e.token));
  }

  void End(int c, const ChoiceEnd& end, const Json& usage, std::string* sse) override {
    Choice& ch = *c_[c];
    ch.end = end;
    ChatDelta d = ch.parser.Finish(end.finish != Finish::kStop);
    if (!o_.stream) {
      Accumulate(ch, std::move(d));
      return;
    }
    *sse += SseData(FinishChunk(c, ch, d, nullptr, end, usage, -1));
  }

  Json Response(const UsageTotals& usage) override {
    Json j = Json::object();
    j["id"] = o_.id;
    j["object"] = "chat.completion";
    j["created"] = o_.created;
    j["model"] = o_.model;
    j["choices"] = Json::array();
    for (size_t i = 0; i < c_.size(); ++i) j["choices"].push_back(Message(*c_[i], i));
    j["usage"] = UsageJson(usage);
    if (o_.prompt_logprobs) j["prompt_logprobs"] = prompt_logprobs_;  // vLLM's, top level
    if (o_.token_ids) j["prompt_token_ids"] = PromptIds();
    if (o_.prompt_text) j["prompt_text"] = *o_.prompt_text;
    if (!o_.session.is_null()) j["session"] = SessionNote(c_.empty() ? nullptr : &c_[0]->end);
    return j;
  }

 private:
  struct Choice {
    Choice(ChatSyntax syntax, bool reasoning, bool tools, const Json* schemas)
        : parser(syntax, reasoning, tools, schemas) {}
    ChatOutputParser parser;
    bool role_sent = false;
    std::string content, reasoning;
    std::map<int, Json> calls;  // index -> {"id", "type", "function": {"name", "arguments"}}
    Json logprobs = Json::array();
    std::vector<int32_t> ids;  // return_token_ids, not streaming: the generated tokens
    ChoiceEnd end;
  };

  // A token event's delta (what the parser released) and logprobs; the prompt's logprobs kept.
  ChatDelta Take(Choice& ch, const TokenEvent& e, Json* lp) {
    if (o_.token_ids && e.token >= 0 && !o_.stream) ch.ids.push_back(e.token);
    if (o_.prompt_logprobs && !e.prompt_logprobs.empty()) {
      prompt_logprobs_ = VllmPromptLogprobs(o_, e.prompt_logprobs);
    }
    if (o_.logprobs && e.token >= 0) {
      Json entry = LogprobEntry(o_, e);
      if (!o_.stream) ch.logprobs.push_back(entry);
      *lp = {{"content", Json::array({std::move(entry)})}};
    }
    return ch.parser.Push(e.text);
  }

  // The prompt's ids (vLLM's return_token_ids; chat has one prompt).
  Json PromptIds() const {
    return o_.prompt_token_ids.empty() ? Json(nullptr) : Json(o_.prompt_token_ids.front());
  }

  // What a streamed chunk adds for vLLM's return_token_ids and return_prompt_text: its choice's
  // `token` (none: −1), and the prompt's ids and text with the stream's first chunk.
  void AddTokenIds(int32_t token, Json& chunk) {
    if (!std::exchange(first_sent_, true)) {
      if (o_.token_ids) chunk["prompt_token_ids"] = PromptIds();
      if (o_.prompt_text) chunk["prompt_text"] = *o_.prompt_text;
    }
    if (o_.token_ids) {
      chunk["choices"][0]["token_ids"] = token >= 0 ? Json::array({token}) : Json::array();
    }
  }

  // A choice's last chunk: its delta, finish and stop reasons, and the session.
  Json FinishChunk(int c, Choice& ch, const ChatDelta& d, Json lp, const ChoiceEnd& end,
                   const Json& usage, int32_t token) {
    Json chunk = ChunkBase();
    chunk["choices"] =
        Json::array({{{"index", c},
                      {"delta", Delta(ch, d)},
                      {"logprobs", std::move(lp)},
                      {"finish_reason", FinishReason(end, ch.parser.tool_calls() > 0)},
                      {"stop_reason", StopReason(end)}}});
    AddTokenIds(token, chunk);
    if (!usage.is_null()) chunk["usage"] = usage;
    if (!o_.session.is_null()) chunk["session"] = SessionNote(&end);
    return chunk;
  }

  // One streamed delta: the role on a choice's first chunk, then whatever the parser released.
  Json Delta(Choice& ch, const ChatDelta& d) {
    Json delta = Json::object();
    if (!ch.role_sent) {
      delta["role"] = "assistant";
      ch.role_sent = true;
    }
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty() || delta.contains("role")) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      std::map<int, Json> merged;
      for (const ToolCallDelta& t : d.tool_calls) Merge(merged, t);
      delta["tool_calls"] = Json::array();
      for (auto& [index, call] : merged) delta["tool_calls"].push_back(std::move(call));
    }
    return delta;
  }

  static void Merge(std::map<int, Json>& calls, const ToolCallDelta& t) {
    Json& call = calls[t.index];
    if (call.is_null()) call = {{"index", t.index}};
    if (!t.id.empty()) {
      call["id"] = t.id;
      call["type"] = "function";
    }
    Json& fn = call["function"];
    if (fn.is_null()) fn = Json::object();
    if (!t.name.empty()) fn["name"] = t.name;
    if (!t.id.empty() || !t.arguments.empty()) {
      fn["arguments"] = fn.value("arguments", std::string()) + t.arguments;
    }
  }

  static void Accumulate(Choice& ch, ChatDelta d) {
    ch.reasoning += d.reasoning;
    ch.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) Merge(ch.calls, t);
  }

  Json Message(Choice& ch, size_t index) const {
    Json m = {{"role", "assistant"}};
    // No text besides tool calls or reasoning: null (as vLLM's reasoning parsers give it).
    const bool only_other = !ch.calls.empty() || !ch.reasoning.empty();
    m["content"] = ch.content.empty() && only_other ? Json(nullptr) : Json(ch.content);
    if (o_.syntax.reasoning) {
      m["reasoning_content"] = ch.reasoning.empty() ? Json(nullptr) : Json(ch.reasoning);
    }
    m["tool_calls"] = Json::array();
    for (auto& [i, call] : ch.calls) {
      Json c = call;
      c.erase("index");
      m["tool_calls"].push_back(std::move(c));
    }
    Json choice = {{"index", index},
                   {"message", std::move(m)},
                   {"logprobs", o_.logprobs ? Json{{"content", ch.logprobs}} : Json(nullptr)},
                   {"finish_reason", FinishReason(ch.end, !ch.calls.empty())},
                   {"stop_reason", StopReason(ch.end)}};
    if (o_.token_ids) choice["token_ids"] = ch.ids;
    return choice;
  }

  std::vector<std::unique_ptr<Choice>> c_;
  Json prompt_logprobs_ = nullptr;
  bool first_sent_ = false;  // streaming: the first chunk has gone
};

}  // namespace

std::unique_ptr<Formatter> MakeChatFormatter(FormatOptions options, int choices) {
  return std::make_unique<ChatFormatter>(std::move(options), choices);
}

}  // namespace linfer::openai
