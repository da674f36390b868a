// OpenAI response bodies and SSE chunks for one request: completions ("text_completion") and chat
// ("chat.completion" / "chat.completion.chunk"), one chunk per token event, usage with
// prompt_tokens_details.cached_tokens, logprobs in each API's shape, and the linfer session note.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/request.h"
#include "models/tokenizer/tokenizer.h"
#include "server/http/http_server.h"
#include "server/openai/chat_output.h"
#include "server/openai/json_fields.h"
#include "server/openai/params.h"

namespace linfer::openai {

struct UsageTotals {
  int64_t prompt = 0, completion = 0, cached = 0;
};
Json UsageJson(const UsageTotals& usage);

// "data: <json>\n\n"
std::string SseData(const Json& payload);
// "event: <type>\ndata: <json>\n\n" (the Responses and Messages APIs' named events).
std::string SseEvent(absl::string_view type, const Json& payload);
inline constexpr absl::string_view kSseDone = "data: [DONE]\n\n";

// How a choice ended, for finish_reason / stop_reason.
struct ChoiceEnd {
  Finish finish = Finish::kNone;
  std::optional<int32_t> stop_token;
  std::optional<std::string> stop_string;
  // On a session: where it stands after the reply (TokenEvent::session_end).
  std::optional<TokenEvent::SessionEnd> session;
};

struct FormatOptions {
  Api api = Api::kCompletions;
  std::string id;  // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;
  std::string model;
  bool stream = false;
  // stream_options.include_usage: every chunk carries "usage" (null until the final one, as
  // OpenAI's chat and completions streams do).
  bool include_usage = false;
  bool logprobs = false;
  std::optional<int> prompt_logprobs;  // vLLM's prompt_logprobs: the alternatives per token
  const tokenizer::Tokenizer* tokenizer = nullptr;  // token strings for logprobs (may be null)
  // vLLM's return_tokens_as_token_ids: every token string of the logprobs is "token_id:N" (its
  // bytes those of that string), for tokens whose text does not identify them.
  bool tokens_as_ids = false;
  // vLLM's return_token_ids: the prompts' ids (prompt_token_ids, one list per prompt: what the
  // engine was given — on a session, what this turn appended) and each choice's generated ids
  // (token_ids: every token sampled, a stop token and a stop string's tokens included, as many
  // as usage counts). Completions put both on each choice; chat puts the prompt's at the top
  // level. Streams send a prompt's ids once (completions: a choice's first chunk; chat: the
  // stream's first) and each chunk's own tokens.
  bool token_ids = false;
  std::vector<std::vector<int32_t>> prompt_token_ids;
  // vLLM's return_prompt_text (chat): the rendered prompt (on a session, this turn's), at the top
  // level; a stream's first chunk.
  std::optional<std::string> prompt_text;
  // The vocabulary's raw bytes for logprobs' "bytes" (ConstraintMaker::TokenBytes; may be null).
  std::shared_ptr<const std::vector<std::optional<std::string>>> token_bytes;
  // Chat: reply parsing.
  ChatSyntax syntax;
  bool start_in_reasoning = false;
  bool parse_tools = false;
  bool first_tool_call_only = false;  // parallel_tool_calls false (ChatOutputParser)
  Json tools;                         // the request's tools (parameter types for XML tool calls)
  // Completions: echo.
  std::vector<std::string> echo;  // per prompt group; empty: no echo
  int n = 1;
  Json session = nullptr;  // {"id", ...} when a session was used
  // Responses API: the response object's echoed request settings, and what runs with the
  // finished response object (completed or incomplete, not failed) before it is sent.
  Json response_base = Json::object();
  std::function<void(const Json& response)> on_final;
};

// Per-choice accumulation and chunk formatting. Not thread-safe (one dispatcher thread).
class Formatter {
 public:
  virtual ~Formatter() = default;
  // A token event (or a final event's token and flushed text) of choice `c`. Streaming: appends
  // the SSE chunk for it to `sse` (one chunk per event).
  virtual void Event(int c, const TokenEvent& e, const Json& usage, std::string* sse) = 0;
  // Choice `c` ended (not with an error): streaming appends the finish chunk.
  virtual void End(int c, const ChoiceEnd& end, const Json& usage, std::string* sse) = 0;
  // A final event with a token or text, then the end: Event then End here; the OpenAI formatters
  // put the finish on the last token's chunk instead, as vLLM does (a separate empty chunk gave
  // `vllm bench` one near-zero inter-token latency per request).
  virtual void EventAndEnd(int c, const TokenEvent& e, const ChoiceEnd& end, const Json& usage,
                           std::string* sse) {
    Event(c, e, usage, sse);
    End(c, end, usage, sse);
  }
  // Non-streaming: the whole response.
  virtual Json Response(const UsageTotals& usage) = 0;
  // Streaming: what precedes the first event's chunk (nothing here).
  virtual std::string StreamHead() { return ""; }
  // Streaming: the stream's last bytes once every choice has ended (`error` when one failed):
  // here an error chunk, the usage chunk when `include_usage` (with the session note, `end` its
  // first choice's end: null when it has none), then "data: [DONE]".
  virtual void StreamTail(const absl::Status& error, const UsageTotals& usage, bool include_usage,
                          const ChoiceEnd* end, std::string* sse);
  // A failure before anything was sent, as the API shapes errors (here OpenAI's).
  virtual HttpResponse ErrorResponse(const absl::Status& status) const;
  const FormatOptions& options() const { return o_; }

 protected:
  explicit Formatter(FormatOptions o) : o_(std::move(o)) {}
  Json ChunkBase() const;
  // The session note ({"id", "history_tokens", …}; null without a session), with the session's
  // "tokens" after the reply once `end` says.
  Json SessionNote(const ChoiceEnd* end) const;
  FormatOptions o_;
};

std::unique_ptr<Formatter> MakeFormatter(FormatOptions options, int choices);

// The finish_reason ("stop", "length", "tool_calls", "abort") and vLLM's stop_reason.
std::string FinishReason(const ChoiceEnd& end, bool tool_calls);
Json StopReason(const ChoiceEnd& end);

// A token's text and bytes for logprobs ("token_id:N" without a tokenizer). The text is the token
// decoded alone (U+FFFD for part of a UTF-8 character, as vLLM writes it); the bytes are the
// token's raw bytes where o.token_bytes knows them (OpenAI's convention: a client joins them into
// the characters split across tokens), else the text's.
struct TokenText {
  std::string text;
  std::vector<int> bytes;
};
// `as_ids`: o.tokens_as_ids applies (off: the token's text whatever the request asked, for text
// offsets and vLLM's prompt logprobs).
TokenText TokenString(const FormatOptions& o, int32_t id, bool as_ids = true);

// vLLM's prompt_logprobs of a response: null for the first prompt token, then per token
// {"<id>": {"logprob", "rank", "decoded_token"}} for the token itself and the o.prompt_logprobs
// most likely there (ranks 1, 2, …).
Json VllmPromptLogprobs(const FormatOptions& o, const std::vector<PromptLogprob>& entries);

// A token's logprob entry as chat completions and the Responses API write it: {"token",
// "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}.
Json LogprobEntry(const FormatOptions& o, const TokenEvent& e);

}  // namespace linfer::openai
