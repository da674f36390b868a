// Shared response pieces and the /v1/completions formatter (chat is in chat_formatter.cc).
#include "server/openai/responses.h"

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

TokenText TokenString(const tokenizer::Tokenizer* tokenizer, int32_t id) {
  TokenText t;
  if (tokenizer == nullptr) {
    t.text = absl::StrCat("token_id:", id);
  } else {
    absl::StatusOr<std::string> s = tokenizer->Decode({id}, false);
    t.text = s.ok() ? *std::move(s) : absl::StrCat("token_id:", id);
  }
  for (unsigned char c : t.text) t.bytes.push_back(c);
  return t;
}

Json LogprobEntry(const tokenizer::Tokenizer* tokenizer, const TokenEvent& e) {
  const TokenText t = TokenString(tokenizer, e.token);
  Json top = Json::array();
  for (const auto& [id, p] : e.top_logprobs) {
    const TokenText a = TokenString(tokenizer, id);
    top.push_back({{"token", a.text}, {"logprob", p}, {"bytes", a.bytes}});
  }
  return {{"token", t.text}, {"logprob", e.logprob}, {"bytes", t.bytes}, {"top_logprobs", top}};
}

Json Formatter::ChunkBase() const {
  Json j = Json::object();
  j["id"] = o_.id;
  j["object"] = o_.api == Api::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = o_.created;
  j["model"] = o_.model;
  return j;
}

HttpResponse Formatter::ErrorResponse(const absl::Status& status) const {
  return ::linfer::ErrorResponse(status);
}

void Formatter::StreamTail(const absl::Status& error, const UsageTotals& usage, bool include_usage,
                           std::string* sse) {
  if (!error.ok()) {
    std::string body = ::linfer::ErrorResponse(error).body;
    while (!body.empty() && absl::ascii_isspace(body.back())) body.pop_back();
    absl::StrAppend(sse, "data: ", body, "\n\n");
  }
  if (include_usage) {
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array();
    chunk["usage"] = UsageJson(usage);
    if (!o_.session.is_null()) chunk["session"] = o_.session;
    *sse += SseData(chunk);
  }
  absl::StrAppend(sse, kSseDone);
}

namespace {

class CompletionFormatter : public Formatter {
 public:
  CompletionFormatter(FormatOptions o, int choices) : Formatter(std::move(o)), c_(choices) {}

  void Event(int c, const TokenEvent& e, const Json& usage, std::string* sse) override {
    Choice& ch = c_[c];
    std::string text = e.text;
    if (!ch.started && !o_.echo.empty()) text = o_.echo[c / o_.n] + text;
    ch.started = true;
    const int64_t offset = static_cast<int64_t>(ch.text.size());
    ch.text += text;
    Json lp = nullptr;
    if (o_.logprobs && e.token >= 0) {
      lp = {{"tokens", Json::array()},
            {"token_logprobs", Json::array()},
            {"top_logprobs", Json::array()},
            {"text_offset", Json::array()}};
      AddLogprob(e, offset, lp);
      if (!o_.stream) AddLogprob(e, offset, ch.logprobs);
    }
    if (!o_.stream) return;
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array({{{"index", c},
                                     {"text", text},
                                     {"logprobs", lp},
                                     {"finish_reason", nullptr},
                                     {"stop_reason", nullptr}}});
    if (!usage.is_null()) chunk["usage"] = usage;
    *sse += SseData(chunk);
  }

  void End(int c, const ChoiceEnd& end, const Json& usage, std::string* sse) override {
    c_[c].end = end;
    if (!o_.stream) return;
    Json chunk = ChunkBase();
    chunk["choices"] = Json::array({{{"index", c},
                                     {"text", ""},
                                     {"logprobs", nullptr},
                                     {"finish_reason", FinishReason(end, false)},
                                     {"stop_reason", StopReason(end)}}});
    if (!usage.is_null()) chunk["usage"] = usage;
    if (!o_.session.is_null()) chunk["session"] = o_.session;
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
    }
    j["usage"] = UsageJson(usage);
    if (!o_.session.is_null()) j["session"] = o_.session;
    return j;
  }

 private:
  struct Choice {
    bool started = false;
    std::string text;
    Json logprobs = {{"tokens", Json::array()},
                     {"token_logprobs", Json::array()},
                     {"top_logprobs", Json::array()},
                     {"text_offset", Json::array()}};
    ChoiceEnd end;
  };

  void AddLogprob(const TokenEvent& e, int64_t offset, Json& lp) const {
    lp["tokens"].push_back(TokenString(o_.tokenizer, e.token).text);
    lp["token_logprobs"].push_back(e.logprob);
    Json top = Json::object();
    for (const auto& [id, p] : e.top_logprobs) top[TokenString(o_.tokenizer, id).text] = p;
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
