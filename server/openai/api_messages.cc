// OpenAiApi: Anthropic's Messages API — POST /v1/messages and /v1/messages/count_tokens. A
// request is a whole conversation (the API keeps no state); the prefix cache reuses a saved state
// when the rendered conversation extends one. A final assistant message is continued. With
// linfer's session_id (or x-session-id) a request is a turn on that session, as on chat
// completions: the messages after those the session already holds are appended to its state.
// Authentication takes the `x-api-key` header as well as `Authorization: Bearer`.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/http_status.h"
#include "server/openai/api.h"
#include "server/openai/messages_api.h"
#include "server/openai/messages_request.h"
#include "server/openai/responses_request.h"

namespace linfer::openai {

std::string AnthropicErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 409:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 503:
    case 529:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return http_status >= 400 && http_status < 500 ? "invalid_request_error" : "api_error";
  }
}

HttpResponse AnthropicError(int http_status, absl::string_view message) {
  HttpResponse r;
  r.status = http_status;
  r.body =
      Dump({{"type", "error"},
            {"error",
             {{"type", AnthropicErrorType(http_status)}, {"message", std::string(message)}}}}) +
      "\n";
  return r;
}

HttpResponse AnthropicErrorResponse(const absl::Status& status) {
  return AnthropicError(
      status.code() == absl::StatusCode::kResourceExhausted ? 529 : HttpStatusFor(status.code()),
      status.message());
}

namespace {

// The conversation's text. A final assistant message is a prefill the reply continues (the API's
// convention): the conversation is rendered without the generation prompt and cut after that
// message's text.
absl::StatusOr<std::string> RenderMessages(const ChatSetup& setup, const MessagesRequest& mr) {
  const ChatRequest& chat = mr.chat;
  if (chat.messages.empty()) return absl::InvalidArgumentError("messages: none to render");
  const Json& last = chat.messages.back();
  if (last.value("role", Json()) != "assistant") {
    ASSIGN_OR_RETURN(TurnText turn, RenderTurn(setup, chat, 0, std::nullopt));
    return turn.text;
  }
  ASSIGN_OR_RETURN(std::string text, RenderChat(setup, chat, chat.messages, false));
  return CutAfterFinalMessage(text, chat.messages, mr.final_message);
}

}  // namespace

absl::Status OpenAiApi::CreateMessage(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  ASSIGN_OR_RETURN(MessagesRequest mr, ParseMessagesRequest(body, false, x->request()));
  // Anthropic's clients send a thinking budget whatever the model: one without a reasoning block
  // has nothing to cut.
  if (chat_ == nullptr || !chat_->syntax.reasoning) mr.params.thinking_budget.reset();
  const CommonParams& p = mr.params;
  RETURN_IF_ERROR(CheckModel(*ctx_, p.model));
  if (chat_ == nullptr || !chat_->chat_template) {
    return absl::InvalidArgumentError(
        "messages: this model has no chat template (serve it with --chat_template FILE)");
  }
  FormatOptions fo = Format(Api::kMessages, p);
  fo.id = NewItemId("msg_");
  GenerationSpec spec = Spec(p, x->request(), owner);
  int64_t history = 0;
  GenerateRequest r;
  if (p.session_id.empty()) {
    ASSIGN_OR_RETURN(std::string text, RenderMessages(*chat_, mr));
    ASSIGN_OR_RETURN(r, TurnRequest(p, mr.chat, text, std::nullopt, "", owner, 0, &fo));
  } else {
    if (mr.chat.messages.back().value("role", Json()) == "assistant") {
      // The session's record would hold the prefill and the reply as two messages.
      return FieldError(mr.final_message,
                        "an assistant message to continue is not supported with session_id "
                        "(continue the session with a user message instead)");
    }
    ASSIGN_OR_RETURN(history, OpenSession(p, owner));
    std::optional<TurnRecord> record = turns_.Get(owner, p.session_id);
    if (record && record->position != history) record.reset();  // changed elsewhere
    auto chat = std::make_shared<const ChatRequest>(mr.chat);
    if (record && RepeatsOnlySystem(*chat, *record)) {  // the session's own first message
      auto rest = std::make_shared<ChatRequest>(*chat);
      rest->messages.erase(rest->messages.begin());
      rest->message_fields.erase(rest->message_fields.begin());
      chat = std::move(rest);
    }
    ASSIGN_OR_RETURN(TurnText turn, RenderTurn(*chat_, *chat, history, record));
    ASSIGN_OR_RETURN(r, TurnRequest(p, *chat, turn.text, record ? record->pending : std::nullopt,
                                    p.session_id, owner, history, &fo));
    RecordSessionTurn(p, owner, history, chat, turn, record, r.prompt.size(), &fo, &spec);
  }
  // The whole conversation: with a session its history counts (cache_read_input_tokens).
  fo.response_base["input_tokens"] = history + static_cast<int64_t>(r.prompt.size());
  spec.stream_head_at_once = true;  // message_start before the prompt is computed
  spec.prompts.push_back(std::move(r));
  spec.history.push_back(history);
  std::unique_ptr<Formatter> fmt = MakeFormatter(std::move(fo), 1);
  Generation::Start({ctx_, &dispatcher_, &in_flight_}, x, std::move(spec), std::move(fmt));
  return absl::OkStatus();
}

absl::Status OpenAiApi::CountMessageTokens(const Exchange& x, const std::string&) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  if (!x->request().Header("x-session-id").empty()) {  // as the body's session_id
    return absl::InvalidArgumentError(
        "x-session-id: count_tokens counts a whole conversation: not supported with a session");
  }
  ASSIGN_OR_RETURN(MessagesRequest mr, ParseMessagesRequest(body, /*count_only=*/true));
  RETURN_IF_ERROR(CheckModel(*ctx_, mr.params.model));
  if (chat_ == nullptr || !chat_->chat_template) {
    return absl::InvalidArgumentError(
        "messages: this model has no chat template (serve it with --chat_template FILE)");
  }
  ASSIGN_OR_RETURN(std::string text, RenderMessages(*chat_, mr));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenizeText(*ctx_, text, false, "messages"));
  Respond(x, {{"input_tokens", ids.size()}});
  return absl::OkStatus();
}

}  // namespace linfer::openai
