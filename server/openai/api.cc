// OpenAiApi: routes, authentication, /v1/models, /tokenize, /detokenize and /v1/sessions.
// Generation endpoints are in api_generate.cc.
#include "server/openai/api.h"

#include <climits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/http_status.h"
#include "server/openai/chat_request.h"
#include "server/openai/messages_api.h"

namespace linfer::openai {
namespace {

Json SessionJson(const SessionInfo& s) {
  return {{"id", s.id},
          {"object", "session"},
          {"tier", std::string(TierName(s.tier))},
          {"tokens", s.position},
          {"busy", s.busy},
          {"turns", s.turns},
          {"created", absl::ToUnixSeconds(s.created)},
          {"last_used", absl::ToUnixSeconds(s.last_used)}};
}

// The session id in the path: /v1/sessions/{id}[/fork].
absl::StatusOr<std::string> PathSession(const HttpRequest& request) {
  const std::vector<std::string> parts = absl::StrSplit(request.path, '/');
  std::string id = parts.size() > 3 ? parts[3] : "";
  RETURN_IF_ERROR(SessionStore::ValidateId(id, "the path's session id"));
  return id;
}

// An optional "session_id" of a JSON body (none: "").
absl::StatusOr<std::string> BodySession(const HttpRequest& request) {
  if (request.body.empty()) return "";
  ASSIGN_OR_RETURN(Json body, ParseBody(request.body));
  ASSIGN_OR_RETURN(std::optional<std::string> given, Fields(body).String("session_id"));
  if (given && !given->empty()) RETURN_IF_ERROR(SessionStore::ValidateId(*given));
  return given.value_or("");
}

}  // namespace

OpenAiApi::OpenAiApi(ServiceContext* ctx, std::shared_ptr<const ChatSetup> chat,
                     size_t stored_responses, int64_t stored_responses_bytes)
    : ctx_(ctx),
      chat_(std::move(chat)),
      responses_(stored_responses, stored_responses_bytes),
      responses_file_(ctx->engine->options().tiers.disk_dir.empty()
                          ? ""
                          : ctx->engine->options().tiers.disk_dir + "/responses.json"),
      created_(absl::ToUnixSeconds(absl::Now())) {}

void OpenAiApi::Register(HttpServer& http) {
  auto route = [&](const char* method, const std::string& path, bool refuse_draining,
                   absl::Status (OpenAiApi::*fn)(const Exchange&, const std::string&)) {
    http.Route(method, path, [this, refuse_draining, fn](Exchange x) {
      Guarded(x, refuse_draining, [&](const std::string& owner) { return (this->*fn)(x, owner); });
    });
  };
  auto models = [this](Exchange x) {
    Guarded(x, false, [&](const std::string&) { return Models(x); });
  };
  http.Route("GET", "/v1/models", models);
  http.Route("GET", "/v1/models/" + ctx_->model_name, models);
  http.Route("GET", "/v1/models/*", models);  // another name: 404 naming it
  route("POST", "/v1/completions", true, &OpenAiApi::Completions);
  route("POST", "/v1/chat/completions", true, &OpenAiApi::Chat);
  route("POST", "/tokenize", true, &OpenAiApi::Tokenize);
  http.Route("POST", "/detokenize", [this](Exchange x) {
    Guarded(x, true, [&](const std::string&) { return Detokenize(x); });
  });
  for (auto [path, fn] :
       {std::make_pair("/v1/messages", &OpenAiApi::CreateMessage),
        std::make_pair("/v1/messages/count_tokens", &OpenAiApi::CountMessageTokens)}) {
    http.Route("POST", path, [this, fn = fn](Exchange x) {
      Guarded(
          x, true, [&](const std::string& owner) { return (this->*fn)(x, owner); }, true);
    });
  }
  route("POST", "/v1/responses", true, &OpenAiApi::CreateResponse);
  route("POST", "/v1/responses/input_tokens", true, &OpenAiApi::CountResponseTokens);
  route("GET", "/v1/responses/*", false, &OpenAiApi::GetResponse);
  route("DELETE", "/v1/responses/*", false, &OpenAiApi::DeleteResponse);
  route("GET", "/v1/responses/*/input_items", false, &OpenAiApi::ResponseInputItems);
  route("POST", "/v1/sessions", true, &OpenAiApi::CreateSession);
  route("GET", "/v1/sessions", false, &OpenAiApi::ListSessions);
  route("DELETE", "/v1/sessions", false, &OpenAiApi::DeleteSession);
  route("GET", "/v1/sessions/*", false, &OpenAiApi::GetSession);
  route("DELETE", "/v1/sessions/*", false, &OpenAiApi::DeleteSession);
  route("POST", "/v1/sessions/*/fork", true, &OpenAiApi::ForkSession);
}

void OpenAiApi::Guarded(const Exchange& x, bool refuse_draining,
                        const std::function<absl::Status(const std::string&)>& body,
                        bool anthropic) {
  std::string authorization = x->request().Header("authorization");
  if (const std::string key = x->request().Header("x-api-key"); anthropic && !key.empty()) {
    authorization = absl::StrCat("Bearer ", key);
  }
  absl::StatusOr<std::string> owner = ctx_->keys->OwnerFor(authorization);
  absl::Status st = owner.status();
  if (st.ok() && refuse_draining && ctx_->draining) {
    st = absl::UnavailableError("the server is draining; retry on another replica");
  }
  if (st.ok()) {
    // A JSON access that throws is a bug, but must cost this request only, not the server.
    try {
      st = body(*owner);
    } catch (const std::exception& e) {
      Log(LogLevel::kError, absl::StrCat("HTTP ", x->request().method, " ", x->request().path,
                                         ": uncaught exception: ", e.what()));
      st = absl::InternalError(absl::StrCat("internal error: ", e.what()));
    }
  }
  if (st.ok()) return;
  if (st.code() != absl::StatusCode::kUnauthenticated) ctx_->metrics->ObserveError(st.code());
  HttpResponse r = anthropic ? AnthropicErrorResponse(st) : ErrorResponse(st);
  if (st.code() == absl::StatusCode::kUnauthenticated) {
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  x->Respond(std::move(r));
}

void OpenAiApi::Respond(const Exchange& x, const Json& body) const {
  HttpResponse r;
  r.body = Dump(body);
  x->Respond(std::move(r));
}

absl::Status OpenAiApi::Models(const Exchange& x) {
  Json model = {{"id", ctx_->model_name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "linfer"},
                {"root", ctx_->model_name},
                {"parent", nullptr},
                {"max_model_len", ctx_->engine->options().max_model_len}};
  const std::string& path = x->request().path;
  if (path == "/v1/models") {
    Respond(x, {{"object", "list"}, {"data", Json::array({model})}});
    return absl::OkStatus();
  }
  if (path != "/v1/models/" + ctx_->model_name) {
    return absl::NotFoundError(absl::StrCat("The model '", path.substr(strlen("/v1/models/")),
                                            "' does not exist; this server serves '",
                                            ctx_->model_name, "'"));
  }
  Respond(x, model);
  return absl::OkStatus();
}

absl::Status OpenAiApi::Tokenize(const Exchange& x, const std::string&) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  Fields f(body);
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model"));
  RETURN_IF_ERROR(CheckModel(*ctx_, model.value_or("")));
  ASSIGN_OR_RETURN(std::optional<bool> special, f.Bool("add_special_tokens"));
  ASSIGN_OR_RETURN(std::optional<bool> strs, f.Bool("return_token_strs"));
  std::string text;
  if (f.Get("messages") != nullptr) {
    if (f.Get("prompt") != nullptr) {
      return absl::InvalidArgumentError("prompt: give prompt or messages, not both");
    }
    ASSIGN_OR_RETURN(ChatRequest chat, ParseChatRequest(body));
    if (chat_ == nullptr) return absl::InvalidArgumentError("messages: no chat template");
    ASSIGN_OR_RETURN(TurnText turn, RenderTurn(*chat_, chat, 0, std::nullopt));
    text = std::move(turn.text);
    special = special.value_or(false);
  } else {
    ASSIGN_OR_RETURN(std::optional<std::string> prompt, f.String("prompt"));
    if (!prompt) return absl::InvalidArgumentError("prompt: give prompt (a string) or messages");
    text = *std::move(prompt);
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   TokenizeText(*ctx_, text, special.value_or(true), "prompt"));
  Json out = {{"count", ids.size()},
              {"max_model_len", ctx_->engine->options().max_model_len},
              {"tokens", ids},
              {"token_strs", nullptr}};
  if (strs.value_or(false)) {
    out["token_strs"] = Json::array();
    for (int32_t id : ids) {
      const std::string* s = ctx_->tokenizer->IdToToken(id);
      out["token_strs"].push_back(s != nullptr ? *s : std::string());
    }
  }
  Respond(x, out);
  return absl::OkStatus();
}

absl::Status OpenAiApi::Detokenize(const Exchange& x) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  Fields f(body);
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model"));
  RETURN_IF_ERROR(CheckModel(*ctx_, model.value_or("")));
  if (ctx_->tokenizer == nullptr) return absl::InvalidArgumentError("this model has no tokenizer");
  ASSIGN_OR_RETURN(const Json* tokens, f.Array("tokens"));
  if (tokens == nullptr) return absl::InvalidArgumentError("tokens: give an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    const std::optional<int64_t> id = AsInt64(t);
    if (!id || *id < 0 || *id > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("tokens[", i, "]: expected a token id"));
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  RETURN_IF_ERROR(CheckTokenIds(ids, ctx_->engine->model().vocab_size(), "tokens"));
  ASSIGN_OR_RETURN(std::string text, ctx_->tokenizer->Decode(ids, false));
  Respond(x, {{"prompt", text}});
  return absl::OkStatus();
}

absl::Status OpenAiApi::CreateSession(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::string id, BodySession(x->request()));
  SessionInfo info;  // described in the same engine task (a delete could come in between)
  ASSIGN_OR_RETURN(std::string created, ctx_->engine->CreateSession(id, owner, &info));
  turns_.Erase(owner, created);
  Respond(x, SessionJson(info));
  return absl::OkStatus();
}

absl::Status OpenAiApi::ListSessions(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::vector<SessionInfo> list, ctx_->engine->ListSessions(owner));
  Json data = Json::array();
  for (const SessionInfo& s : list) data.push_back(SessionJson(s));
  Respond(x, {{"object", "list"}, {"data", std::move(data)}});
  return absl::OkStatus();
}

absl::Status OpenAiApi::DeleteSession(const Exchange& x, const std::string& owner) {
  std::string id;
  if (x->request().path != "/v1/sessions") {  // DELETE /v1/sessions/{id}
    ASSIGN_OR_RETURN(id, PathSession(x->request()));
  } else {
    id = x->request().Query("session_id");
    if (id.empty()) {
      ASSIGN_OR_RETURN(id, BodySession(x->request()));
    } else {
      RETURN_IF_ERROR(SessionStore::ValidateId(id));
    }
    if (id.empty()) {
      return absl::InvalidArgumentError(
          "session_id: give it in the path (/v1/sessions/{id}), the query or the JSON body");
    }
  }
  RETURN_IF_ERROR(ctx_->engine->DeleteSession(id, owner));
  turns_.Erase(owner, id);
  Respond(x, {{"id", id}, {"object", "session.deleted"}, {"deleted", true}});
  return absl::OkStatus();
}

absl::Status OpenAiApi::GetSession(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::string id, PathSession(x->request()));
  ASSIGN_OR_RETURN(SessionInfo info, ctx_->engine->GetSession(id, owner));
  Respond(x, SessionJson(info));
  return absl::OkStatus();
}

// POST /v1/sessions/{id}/fork, body {"session_id": new id} or none (a fresh id): a new session
// holding the source's state; a chat session's fork continues the same conversation (its record
// of the messages goes with it).
absl::Status OpenAiApi::ForkSession(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::string src, PathSession(x->request()));
  ASSIGN_OR_RETURN(std::string dst, BodySession(x->request()));
  SessionInfo info;
  ASSIGN_OR_RETURN(std::string made, ctx_->engine->ForkSession(src, dst, owner, &info));
  if (std::optional<TurnRecord> record = turns_.Get(owner, src);
      record && record->position == info.position) {
    turns_.Put(owner, made, *std::move(record));
  } else {
    turns_.Erase(owner, made);
  }
  Respond(x, SessionJson(info));
  return absl::OkStatus();
}

}  // namespace linfer::openai
