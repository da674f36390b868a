// Shared response pieces and the /v1/completions formatter (chat is in chat_formatter.cc).
#include "server/openai/responses.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/http_status.h"

namespace linfer::openai {

std::unique_ptr<Formatter> MakeChatFormatter(FormatOptions options, int choices);
std::unique_ptr<Formatter> MakeResponsesFormatter(FormatOptions options);
std::unique_ptr<Formatter> MakeMessagesFormatter(FormatOptions options);

Json UsageJson(const UsageTotals& u) {
  Json j = Json::object();
  j["prompt_tokens"] = u.prompt;
  j["completion_tokens"] = u.completion;
  j["total_tokens"] = u.prompt + u.completion;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached}};
  return j;
}

std::string SseData(const Json& payload) { return absl::StrCat("data: ", Dump(payload), "\n\n"); }

std::string SseEvent(absl::string_view type, const Json& payload) {
  return absl::StrCat("event: ", type, "\n", SseData(payload));
}

std::string FinishReason(const ChoiceEnd& end, bool tool_calls) {
  switch (end.finish) {
    case Finish::kStop:
      return tool_calls ? "tool_calls" : "stop";
    case Finish::kLength:
      return "length";
    default:
      return "abort";
  }
}

Json StopReason(const ChoiceEnd& end) {
  if (end.stop_string) return *end.stop_string;
  if (end.stop_token) return *end.stop_token;
  return nullptr;
}

TokenText TokenString(const FormatOptions& o, int32_t id, bool as_ids) {
  TokenText t;
  if (as_ids && o.tokens_as_ids) {
    t.text = absl::StrCat("token_id:", id);
    t.bytes.assign(t.text.begin(), t.text.end());
    return t;
  }
  if (o.tokenizer == nullptr) {
    t.text = absl::StrCat("token_id:", id);
  } else {
    absl::StatusOr<std::string> s = o.tokenizer->Decode({id}, false);
    t.text = s.ok() ? *std::move(s) : absl::StrCat("token_id:", id);
  }
  const std::optional<std::string>* raw =
      o.token_bytes != nullptr && id >= 0 && static_cast<size_t>(id) < o.token_bytes->size()
          ? &(*o.token_bytes)[static_cast<size_t>(id)]
          : nullptr;
  for (unsigned char c : raw != nullptr && raw->has_value() ? **raw : t.text) {
    t.bytes.push_back(c);
  }
  return t;
}

Json LogprobEntry(const FormatOptions& o, const TokenEvent& e) {
  const TokenText t = TokenString(o, e.token);
  Json top = Json::array();
  for (const auto& [id, p] : e.top_logprobs) {
    const TokenText a = TokenString(o, id);
    top.push_back({{"token", a.text}, {"logprob", p}, {"bytes", a.bytes}});
  }
  return {{"token", t.text}, {"logprob", e.logprob}, {"bytes", t.bytes}, {"top_logprobs", top}};
}

Json VllmPromptLogprobs(const FormatOptions& o, const std::vector<PromptLogprob>& entries) {
  Json out = Json::array();
  for (const PromptLogprob& p : entries) {
    if (!p.logprob) {
      out.push_back(nullptr);
      continue;
    }
    Json at = Json::object();
    at[std::to_string(p.token)] = {{"logprob", *p.logprob},
                                   {"rank", p.rank},
                                   {"decoded_token", TokenString(o, p.token, false).text}};
    const size_t n =
        std::min(p.top_logprobs.size(), static_cast<size_t>(o.prompt_logprobs.value_or(0)));
    for (size_t i = 0; i < n; ++i) {
      const auto& [id, v] = p.top_logprobs[i];
      if (id == p.token) continue;  // its own entry, with its rank
      at[std::to_string(id)] = {{"logprob", v},
                                {"rank", static_cast<int64_t>(i) + 1},
                                {"decoded_token", TokenString(o, id, false).text}};
    }
    out.push_back(std::move(at));
  }
  return out;
}

Json Formatter::ChunkBase() const {
  Json j = Json::object();
  j["id"] = o_.id;
  j["object"] = o_.api == Api::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = o_.created;
  j["model"] = o_.model;
  if (o_.include_usage) j["usage"] = nullptr;  // the final chunk's replaces it
  return j;
}

HttpResponse Formatter::ErrorResponse(const absl::Status& status) const {
  return ::linfer::ErrorResponse(status);
}

Json Formatter::SessionNote(const ChoiceEnd* end) const {
  Json note = o_.session;
  if (!note.is_null() && end != nullptr && end->session) {
    note["tokens"] = end->session->position;
  }
  return note;
}

void Formatter::StreamTail(const absl::Status& error, const UsageTotals& usage, bool include_usage,
                           const ChoiceEnd* end, std::string* sse) {
  if (!error.ok()) {
    std::string body = ::linfer::ErrorResponse(error).body;
    while (!body.empty() && absl::ascii_isspace(body.back())) body.pop_back();
    absl::StrAppend(sse, "data: ", body, "\n\n");
  }
  if (include_usage) {
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array();
    chunk["usage"] = UsageJson(usage);
    if (!o_.session.is_null()) chunk["session"] = SessionNote(end);
    *sse += SseData(chunk);
  }
  absl::StrAppend(sse, kSseDone);
}

namespace {

// UTF-8 code points (bytes that do not continue a character).
int64_t CodePoints(absl::string_view s) {
  int64_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

class CompletionFormatter : public Formatter {
 public:
  CompletionFormatter(FormatOptions o, int choices) : Formatter(std::move(o)), c_(choices) {}

  void Event(int c, const TokenEvent& e, const Json& usage, std::string* sse) override {
    Json chunk = EventChunk(c, e, usage);
    if (!chunk.is_null()) *sse += SseData(chunk);
  }

  void EventAndEnd(int c, const TokenEvent& e, const ChoiceEnd& end, const Json& usage,
                   std::string* sse) override {
    Json chunk = EventChunk(c, e, usage);
    c_[c].end = end;
    if (chunk.is_null()) return;
    Finished(chunk, end);
    *sse += SseData(chunk);
  }

  void End(int c, const ChoiceEnd& end, const Json& usage, std::string* sse) override {
    c_[c].end = end;
    if (!o_.stream) return;
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array({{{"index", c},
                                     {"text", ""},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr},
                                     {"stop_reason", nullptr}}});
    AddTokenIds(c, -1, chunk["choices"][0]);
    if (!usage.is_null()) chunk["usage"] = usage;
    Finished(chunk, end);
    *sse += SseData(chunk);
  }

  Json Response(const UsageTotals& usage) override {
    Json j = Json::object();
    j["id"] = o_.id;
    j["object"] = "text_completion";
    j["created"] = o_.created;
    j["model"] = o_.model;
    j["choices"] = Json::array();
    for (size_t i = 0; i < c_.size(); ++i) {
      j["choices"].push_back({{"index", i},
                              {"text", c_[i].text},
                              {"logprobs", o_.logprobs ? c_[i].logprobs : Json(nullptr)},
                              {"finish_reason", FinishReason(c_[i].end, false)},
                              {"stop_reason", StopReason(c_[i].end)}});
      if (o_.prompt_logprobs) j["choices"].back()["prompt_logprobs"] = c_[i].prompt_logprobs;
      if (o_.token_ids) {
        j["choices"].back()["prompt_token_ids"] = PromptIds(static_cast<int>(i));
        j["choices"].back()["token_ids"] = c_[i].ids;
      }
    }
    j["usage"] = UsageJson(usage);
    if (!o_.session.is_null()) j["session"] = SessionNote(c_.empty() ? nullptr : &c_[0].end);
    return j;
  }

 private:
  // A streamed chunk's choice ends: its finish and stop reasons, and the session.
  void Finished(Json& chunk, const ChoiceEnd& end) const {
    chunk["choices"][0]["finish_reason"] = FinishReason(end, false);
    chunk["choices"][0]["stop_reason"] = StopReason(end);
    if (!o_.session.is_null()) chunk["session"] = SessionNote(&end);
  }

  // Choice `c`'s prompt ids (vLLM's return_token_ids).
  Json PromptIds(int c) const {
    const size_t group = static_cast<size_t>(c / o_.n);
    return group < o_.prompt_token_ids.size() ? Json(o_.prompt_token_ids[group]) : Json(nullptr);
  }

  // A streamed chunk's token ids (vLLM's return_token_ids): `token` (none: −1), and the prompt's
  // with the choice's first chunk.
  void AddTokenIds(int c, int32_t token, Json& choice) {
    if (!o_.token_ids) return;
    if (!std::exchange(c_[c].prompt_ids_sent, true)) choice["prompt_token_ids"] = PromptIds(c);
    choice["token_ids"] = token >= 0 ? Json::array({token}) : Json::array();
  }

  // The event's chunk (null when not streaming: the choice accumulates it).
  Json EventChunk(int c, const TokenEvent& e, const Json& usage) {
    Choice& ch = c_[c];
    if (o_.token_ids && e.token >= 0 && !o_.stream) ch.ids.push_back(e.token);
    std::string text = e.text;
    if (!ch.started && !o_.echo.empty()) text = o_.echo[c / o_.n] + text;
    ch.started = true;
    // The token's own text starts after anything echoed before it (with the prompt's logprobs,
    // after their tokens' texts: a special token's text is in those but not in the echo).
    if (!e.prompt_logprobs.empty() && o_.prompt_logprobs) {
      ch.prompt_logprobs = VllmPromptLogprobs(o_, e.prompt_logprobs);
    }
    // Offsets count characters (code points), as Python's len() and OpenAI's API.
    const int64_t before = CodePoints(text) - CodePoints(e.text);  // the echo's
    if (!e.prompt_logprobs.empty() && !o_.echo.empty() && o_.logprobs) {
      int64_t tokens_text = 0;
      for (const PromptLogprob& p : e.prompt_logprobs) {
        tokens_text += CodePoints(TokenString(o_, p.token, false).text);
      }
      ch.offset_shift = tokens_text - before;
    }
    const int64_t offset = ch.chars + before + ch.offset_shift;
    ch.text += text;
    ch.chars += CodePoints(text);
    Json lp = nullptr;
    const bool echoed = !o_.echo.empty() && !e.prompt_logprobs.empty();
    if (o_.logprobs && (e.token >= 0 || echoed)) {
      Json& into = o_.stream ? lp : ch.logprobs;  // a chunk's, or the choice's until it ends
      if (o_.stream) {
        lp = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
      }
      if (echoed) AddPromptLogprobs(e, into);  // the prompt's tokens first
      if (e.token >= 0) AddLogprob(e, offset, into);
    }
    if (!o_.stream) return nullptr;
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array({{{"index", c},
                                     {"text", text},
                                     {"logprobs", lp},
                                     {"finish_reason", nullptr},
                                     {"stop_reason", nullptr}}});
    AddTokenIds(c, e.token, chunk["choices"][0]);
    if (!usage.is_null()) chunk["usage"] = usage;
    return chunk;
  }

  struct Choice {
    bool started = false;
    std::string text;
    int64_t chars = 0;               // code points of `text`
    Json prompt_logprobs = nullptr;  // vLLM's prompt_logprobs
    int64_t offset_shift = 0;        // the echoed prompt tokens' texts' length less the echo's
    std::vector<int32_t> ids;        // return_token_ids, not streaming: the generated tokens
    bool prompt_ids_sent = false;    // return_token_ids, streaming
    Json logprobs = {{"tokens", Json::array()},
                     {"token_logprobs", Json::array()},
                     {"top_logprobs", Json::array()},
                     {"text_offset", Json::array()}};
    ChoiceEnd end;
  };

  // The echoed prompt's entries (the first token's logprob and top_logprobs null, as OpenAI's);
  // offsets count the tokens' texts from the start of the echo.
  void AddPromptLogprobs(const TokenEvent& e, Json& lp) const {
    int64_t offset = 0;
    for (const PromptLogprob& p : e.prompt_logprobs) {
      const std::string text = TokenString(o_, p.token).text;
      lp["tokens"].push_back(text);
      lp["token_logprobs"].push_back(p.logprob ? Json(*p.logprob) : Json(nullptr));
      Json top = nullptr;
      if (p.logprob) {
        top = Json::object();
        for (const auto& [id, v] : p.top_logprobs) top[TokenString(o_, id).text] = v;
        if (!top.contains(text)) top[text] = *p.logprob;  // the token itself, as OpenAI's
      }
      lp["top_logprobs"].push_back(std::move(top));
      lp["text_offset"].push_back(offset);
      offset += CodePoints(o_.tokens_as_ids ? TokenString(o_, p.token, false).text : text);
    }
  }

  // top_logprobs holds the sampled token too ("up to logprobs + 1 elements", as OpenAI's API and
  // vLLM).
  void AddLogprob(const TokenEvent& e, int64_t offset, Json& lp) const {
    const std::string text = TokenString(o_, e.token).text;
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(e.logprob);
    Json top = Json::object();
    for (const auto& [id, p] : e.top_logprobs) top[TokenString(o_, id).text] = p;
    if (!top.contains(text)) top[text] = e.logprob;
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(offset);
  }

  std::vector<Choice> c_;
};

}  // namespace

std::unique_ptr<Formatter> MakeFormatter(FormatOptions options, int choices) {
  if (options.api == Api::kChat) return MakeChatFormatter(std::move(options), choices);
  if (options.api == Api::kResponses) return MakeResponsesFormatter(std::move(options));
  if (options.api == Api::kMessages) return MakeMessagesFormatter(std::move(options));
  return std::make_unique<CompletionFormatter>(std::move(options), choices);
}

}  // namespace linfer::openai
