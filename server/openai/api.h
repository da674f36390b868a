// The OpenAI-compatible HTTP API on the server's HTTP port: GET /v1/models (and
// /v1/models/<name>), POST /v1/completions, POST /v1/chat/completions (stream false/true), vLLM's
// POST /tokenize and /detokenize, Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens), the Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items, POST /v1/responses/input_tokens), and
// linfer's sessions (POST/GET/DELETE /v1/sessions, GET/DELETE /v1/sessions/{id}, POST
// /v1/sessions/{id}/fork; generation requests name one with `session_id` or the `x-session-id`
// header). Authentication is the gRPC API's: `Authorization: Bearer KEY` maps
// to an owner whose sessions only it sees.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/http_server.h"
#include "server/openai/chat_setup.h"
#include "server/openai/dispatcher.h"
#include "server/openai/generation.h"
#include "server/openai/params.h"
#include "server/openai/response_store.h"
#include "server/openai/responses_request.h"
#include "server/openai/session_turns.h"
#include "server/openai/structured_output.h"
#include "server/service_context.h"

namespace linfer::openai {

class OpenAiApi {
 public:
  // `chat` may be null (then only completions). Both must outlive the API. `stored_responses`
  // and `stored_responses_bytes`: how many /v1/responses results, and about how many bytes of
  // their JSON, are kept for retrieval and continuation (all keys).
  OpenAiApi(ServiceContext* ctx, std::shared_ptr<const ChatSetup> chat,
            size_t stored_responses = 4096, int64_t stored_responses_bytes = int64_t{1} << 30);
  void Register(HttpServer& http);
  // Waits for generations in flight (graceful drain); true when none is left.
  bool WaitIdle(absl::Time deadline) { return in_flight_.WaitIdle(deadline); }
  // At a drain: with a session disk directory, writes the stored responses to
  // DIR/responses.json (their states go to the disk tier with every session); without one,
  // deletes their states (the store lives in memory: nothing could name them after a restart).
  // The error when writing the file failed (logged; their states are deleted then).
  absl::Status CloseStoredResponses();
  // At start-up: the responses a drain wrote, with the states the disk tier still holds; the
  // file is removed once read (a file that does not read is moved aside, with a log line).
  void RestoreStoredResponses();
  // How many responses are stored, and the bytes of their JSON (for /metrics).
  std::pair<int64_t, int64_t> StoredResponsesSize() { return responses_.Size(); }

 private:
  using Exchange = std::shared_ptr<HttpExchange>;
  // Runs `body(owner)` after authentication (401) and, when `refuse_draining`, the drain check
  // (503); an error status becomes the OpenAI error response, or with `anthropic` Anthropic's
  // (whose clients send the key as `x-api-key`).
  void Guarded(const Exchange& x, bool refuse_draining,
               const std::function<absl::Status(const std::string& owner)>& body,
               bool anthropic = false);
  absl::Status Models(const Exchange& x);
  absl::Status Completions(const Exchange& x, const std::string& owner);
  absl::Status Chat(const Exchange& x, const std::string& owner);
  absl::Status Tokenize(const Exchange& x, const std::string& owner);
  absl::Status Detokenize(const Exchange& x);
  absl::Status CreateSession(const Exchange& x, const std::string& owner);
  absl::Status ListSessions(const Exchange& x, const std::string& owner);
  absl::Status DeleteSession(const Exchange& x, const std::string& owner);
  absl::Status GetSession(const Exchange& x, const std::string& owner);
  absl::Status ForkSession(const Exchange& x, const std::string& owner);
  absl::Status CreateMessage(const Exchange& x, const std::string& owner);
  absl::Status CountMessageTokens(const Exchange& x, const std::string& owner);
  // A /v1/responses body read, with the stored response it continues.
  struct ResponseTurn {
    std::shared_ptr<const ResponsesRequest> rr;
    ChatRequest chat;  // rr->chat, enable_thinking off under an output format
    std::shared_ptr<const StoredResponse> prev;  // previous_response_id's, or null
    bool continuable = false;  // prev's state can take the input appended (see api_responses.cc)
  };
  absl::StatusOr<ResponseTurn> ReadResponseRequest(const Exchange& x, const std::string& owner);
  // The text to compute: the input appended to the previous response's state of `history`
  // tokens, or (history 0) the whole conversation with the instructions first.
  absl::StatusOr<std::string> ResponseText(const ResponseTurn& t, int64_t history) const;
  absl::Status CreateResponse(const Exchange& x, const std::string& owner);
  absl::Status GetResponse(const Exchange& x, const std::string& owner);
  absl::Status DeleteResponse(const Exchange& x, const std::string& owner);
  absl::Status ResponseInputItems(const Exchange& x, const std::string& owner);
  absl::Status CountResponseTokens(const Exchange& x, const std::string& owner);
  // The stored response the path's id segment (`segment` from the end) names, or NotFound.
  absl::StatusOr<std::shared_ptr<const StoredResponse>> PathResponse(const Exchange& x,
                                                                     const std::string& owner,
                                                                     int segment);
  // Runs `make` (a fork or creation of a session in `owner`'s responses namespace); while the
  // namespace's quota refuses it, takes the state of the owner's least recently used stored
  // response (not `keep`'s) and tries again.
  absl::StatusOr<std::string> ResponseSession(
      const std::string& owner, const std::string& keep,
      const std::function<absl::StatusOr<std::string>()>& make);
  // Deletes a session of the responses' namespace off the calling thread.
  void DropSessionLater(const std::string& owner, const std::string& id);

  // The session's token count; NotFound unless it exists (or `create` makes it).
  absl::StatusOr<int64_t> OpenSession(const CommonParams& p, const std::string& owner);
  // Caps max_tokens, when the client left it unset, to what the context has room for; a
  // min_tokens above that default is refused, as vLLM does.
  absl::Status DefaultMaxTokens(Api api, const CommonParams& p, int64_t history,
                                GenerateRequest* r) const;
  GenerationSpec Spec(const CommonParams& p, const HttpRequest& request,
                      const std::string& owner) const;
  FormatOptions Format(Api api, const CommonParams& p) const;
  // `text` tokenized (the tokenizer's special tokens added only when asked: the template writes
  // them), less its first token when that is the end-of-turn token `pending` in the session's
  // state. `field` names the input in errors.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const std::string& text,
                                                 std::optional<int32_t> pending,
                                                 absl::string_view field,
                                                 bool add_special_tokens = false) const;
  // vLLM's thinking_token_budget (p.thinking_budget): r's constraint (or none) wrapped in a
  // structured::ThinkingBudget that closes the reasoning block after that many tokens;
  // `open_prompt`: the prompt text when it opened the block (what it wrote after "<think>"
  // counts), else "". InvalidArgument for a model without one.
  absl::Status ApplyThinkingBudget(const CommonParams& p, const std::string& open_prompt,
                                   GenerateRequest* r) const;
  // A chat turn's engine request: `text` (the rendered turn) tokenized, less the end-of-turn
  // token `pending` in the session's state; sampling, limits and output format from `p`; the
  // reply's parsing set in `fo` (whose api names the fields in errors).
  absl::StatusOr<GenerateRequest> TurnRequest(const CommonParams& p, const ChatRequest& chat,
                                              const std::string& text,
                                              std::optional<int32_t> pending,
                                              const std::string& session_id,
                                              const std::string& owner, int64_t history,
                                              FormatOptions* fo) const;
  // A chat turn on the client's session p.session_id (chat completions, Messages): the reply's
  // `session` note in `fo`, and the turn recorded when it ends with a reply (`spec` on_done).
  void RecordSessionTurn(const CommonParams& p, const std::string& owner, int64_t history,
                         std::shared_ptr<const ChatRequest> chat, const TurnText& turn,
                         const std::optional<TurnRecord>& record, size_t new_tokens,
                         FormatOptions* fo, GenerationSpec* spec);
  void Respond(const Exchange& x, const Json& body) const;

  ServiceContext* ctx_;
  std::shared_ptr<const ChatSetup> chat_;
  InFlight in_flight_;
  SessionTurns turns_;
  ResponseStore responses_;
  std::string responses_file_;  // "" without a session disk directory
  const int64_t created_;       // unix seconds: /v1/models "created"
  // Last: destroyed first, running what is queued (generations ending) while the rest lives.
  Dispatcher dispatcher_;
};

}  // namespace linfer::openai
