// OpenAiApi: the Responses API — POST /v1/responses, GET/DELETE /v1/responses/{id},
// GET /v1/responses/{id}/input_items, POST /v1/responses/input_tokens.
//
// A response with "store": true (the default) generates on a session of its own (id = the
// response id, in a namespace apart from the key's /v1/sessions) that the store keeps. A request
// with `previous_response_id` forks that session and appends only its input, rendered as the
// session rule of session_turns.h renders a new turn (the previous reply's closing tokens, the
// new messages, the generation prompt): the conversation is not prefilled again. It renders the
// whole stored conversation instead (with its own instructions, which OpenAI does not carry from
// turn to turn) when the previous response kept no state (evicted from the session tiers, the
// quota full) or the request changes the instructions or tools, which the state holds at its
// start. `usage.input_tokens_details.cached_tokens` says which happened.
#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/openai/api.h"
#include "server/openai/response_store_file.h"
#include "server/openai/responses_request.h"

namespace linfer::openai {
namespace {

constexpr size_t kMaxConversationMessages = 100000;

// Stored responses' sessions live in a namespace of their own per key: they do not show in the
// key's /v1/sessions or count against its session quota.
std::string SessionOwner(const std::string& owner) {
  return absl::StrCat("\x1fresponses\x1f", owner);
}

absl::Status NoResponse(absl::string_view field, absl::string_view id, bool store_off) {
  return absl::NotFoundError(absl::StrCat(
      field, field.empty() ? "" : ": ", "no stored response '", id.substr(0, 128), "' (",
      store_off ? "this server stores none: --stored_responses 0 or --stored_responses_mb 0"
                : "made with \"store\": false, deleted, pushed out of the store, or made with "
                  "another API key",
      ")"));
}

// A float setting as the client wrote it (0.8, not 0.800000011920929).
double Tidy(float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; }

}  // namespace

void OpenAiApi::DropSessionLater(const std::string& owner, const std::string& id) {
  if (id.empty()) return;
  auto drop = [engine = ctx_->engine, owner, id] {  // may run after the API is gone
    absl::Status st = engine->DeleteSession(id, owner);
    if (!st.ok() && !absl::IsNotFound(st)) {
      Log(LogLevel::kWarning, absl::StrCat("response session: ", st.ToString()));
    }
  };
  if (!ctx_->workers->Post(drop)) drop();
}

absl::Status OpenAiApi::CloseStoredResponses() {
  std::vector<OwnedResponse> all = responses_.Close();
  absl::Status saved;
  if (!responses_file_.empty() && all.empty()) {  // nothing to keep: no file (a failure to write
    std::error_code ec;                           // one would have lost nothing)
    std::filesystem::remove(responses_file_, ec);
  } else if (!responses_file_.empty()) {
    saved = SaveResponses(responses_file_, all);
    if (saved.ok()) {
      if (!all.empty()) {
        Log(LogLevel::kInfo,
            absl::StrCat("stored responses: ", all.size(), " written to ", responses_file_));
      }
      return saved;  // their states go to the disk tier with the other sessions
    }
    Log(LogLevel::kWarning, absl::StrCat("stored responses: ", saved.ToString()));
  }
  int sessions = 0;
  for (const auto& [owner, r] : all) {
    if (r->session_id.empty()) continue;
    absl::Status st = ctx_->engine->DeleteSession(r->session_id, SessionOwner(owner));
    sessions += st.ok();
  }
  if (sessions > 0) {
    Log(LogLevel::kInfo, absl::StrCat("stored responses: deleted ", sessions, " sessions"));
  }
  return saved;
}

void OpenAiApi::RestoreStoredResponses() {
  if (responses_file_.empty()) return;
  // The server's own file, as large as its store and the conversations its responses chain to
  // made it (those are not counted in the store): no size limit short of the memory to read it.
  absl::StatusOr<std::vector<OwnedResponse>> loaded =
      LoadResponses(responses_file_, std::numeric_limits<int64_t>::max());
  if (absl::IsNotFound(loaded.status())) return;
  if (!loaded.ok()) {
    // Moved aside, so that the next shutdown's file does not replace it: an operator may mend
    // it and put it back before a restart.
    const std::string aside =
        absl::StrCat(responses_file_, ".unreadable-", absl::ToUnixSeconds(absl::Now()));
    std::error_code ec;
    std::filesystem::rename(responses_file_, aside, ec);
    Log(LogLevel::kWarning, absl::StrCat("stored responses: ", loaded.status().ToString(), "; ",
                                         ec ? absl::StrCat("cannot move it aside (", ec.message(),
                                                           "): the next shutdown replaces it")
                                            : absl::StrCat("moved aside to ", aside)));
    return;
  }
  int with_state = 0;
  for (auto& [owner, r] : *loaded) {
    StoredResponse s = *r;
    if (!s.session_id.empty()) {
      // A stored response's state is the session named after it (CreateResponse), where the
      // reply left it; anything else is not its state (the session is dropped).
      absl::StatusOr<SessionInfo> info =
          ctx_->engine->GetSession(s.session_id, SessionOwner(owner));
      if (s.session_id != s.id || !info.ok() || info->position != s.position) {
        DropSessionLater(SessionOwner(owner), s.id);  // its own, if any: nothing will name it
        s.session_id.clear();
      }
    }
    with_state += !s.session_id.empty();
    for (const auto& [gone_owner, gone] : responses_.Put(owner, std::move(s))) {
      DropSessionLater(SessionOwner(gone_owner), gone->session_id);
    }
  }
  std::error_code ec;
  std::filesystem::remove(responses_file_, ec);
  Log(LogLevel::kInfo, absl::StrCat("stored responses: ", loaded->size(), " restored from ",
                                    responses_file_, " (", with_state, " with their state)"));
}

absl::StatusOr<std::string> OpenAiApi::ResponseSession(
    const std::string& owner, const std::string& keep,
    const std::function<absl::StatusOr<std::string>()>& make) {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::string> made = make();
    if (made.ok() || !absl::IsResourceExhausted(made.status()) || attempt == 8) return made;
    const std::string oldest = responses_.TakeOldestSession(owner, keep);
    if (oldest.empty()) return made;
    absl::Status st = ctx_->engine->DeleteSession(oldest, SessionOwner(owner));
    if (!st.ok() && !absl::IsNotFound(st)) return made;
  }
}

absl::StatusOr<OpenAiApi::ResponseTurn> OpenAiApi::ReadResponseRequest(const Exchange& x,
                                                                       const std::string& owner) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  ASSIGN_OR_RETURN(ResponsesRequest parsed, ParseResponsesRequest(body));
  RETURN_IF_ERROR(CheckModel(*ctx_, parsed.params.model));
  if (responses_.off()) {  // as "store": false, and said so
    parsed.store = false;
    parsed.echo["store"] = false;
  }
  if (chat_ == nullptr || !chat_->chat_template) {
    return absl::InvalidArgumentError(
        "input: this model has no chat template (serve it with --chat_template FILE); use "
        "/v1/completions");
  }
  ResponseTurn t;
  t.chat = parsed.chat;
  if ((parsed.params.format || t.chat.forced) && !t.chat.kwargs.contains("enable_thinking")) {
    t.chat.kwargs["enable_thinking"] = false;  // the grammar holds from the first token on
  }
  if (!parsed.previous_response_id.empty()) {
    t.prev = responses_.Get(owner, parsed.previous_response_id);
    if (t.prev == nullptr) {
      return NoResponse("previous_response_id", parsed.previous_response_id, responses_.off());
    }
    RETURN_IF_ERROR(CheckCallOutputs(parsed.input_items, ConversationMessages(t.prev->turn)));
    // The previous response's state holds its conversation with its instructions and tools at
    // the start; a system message belongs there too.
    t.continuable = !t.prev->session_id.empty() && t.prev->instructions == parsed.instructions &&
                    t.prev->tools == t.chat.tools && !HasSystemMessage(t.chat.messages);
  }
  t.rr = std::make_shared<const ResponsesRequest>(std::move(parsed));
  return t;
}

absl::StatusOr<std::string> OpenAiApi::ResponseText(const ResponseTurn& t, int64_t history) const {
  if (history > 0) {  // appended to the previous response's state
    absl::StatusOr<TurnText> turn = RenderTurn(*chat_, t.chat, history, std::nullopt);
    if (!turn.ok()) return ResponsesTerms(turn.status());
    return std::move(turn->text);
  }
  Json conversation = t.prev != nullptr ? ConversationMessages(t.prev->turn) : Json::array();
  for (const Json& m : t.chat.messages) conversation.push_back(m);
  if (conversation.size() > kMaxConversationMessages) {
    return absl::InvalidArgumentError(
        absl::StrCat("previous_response_id: the conversation has more than ",
                     kMaxConversationMessages, " messages"));
  }
  ChatRequest whole = t.chat;
  whole.messages = WithSystemFirst(t.rr->instructions, conversation);
  absl::StatusOr<TurnText> turn = RenderTurn(*chat_, whole, 0, std::nullopt);
  if (!turn.ok()) return ResponsesTerms(turn.status());
  return std::move(turn->text);
}

absl::Status OpenAiApi::CreateResponse(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(ResponseTurn t, ReadResponseRequest(x, owner));
  const std::shared_ptr<const ResponsesRequest>& rr = t.rr;
  const std::shared_ptr<const StoredResponse>& prev = t.prev;
  const ChatRequest& chat = t.chat;
  const CommonParams& p = rr->params;
  FormatOptions fo = Format(Api::kResponses, p);
  fo.id = NewItemId("resp_");
  fo.response_base = rr->echo;
  const std::string session_owner = SessionOwner(owner);

  // The state to continue: the previous response's, forked.
  std::string session;  // the session this response generates on ("": none)
  absl::Cleanup drop_session = [&] { DropSessionLater(session_owner, session); };
  int64_t history = 0;
  std::optional<int32_t> pending;
  if (t.continuable) {
    absl::StatusOr<std::string> fork = ResponseSession(owner, prev->id, [&] {
      return ctx_->engine->ForkSession(prev->session_id, rr->store ? fo.id : "", session_owner);
    });
    if (fork.ok()) {
      session = *fork;
      absl::StatusOr<SessionInfo> info = ctx_->engine->GetSession(session, session_owner);
      if (info.ok() && info->position == prev->position) {
        history = info->position;
        pending = prev->pending;
      } else {
        DropSessionLater(session_owner, session);
        session.clear();
      }
    }
  }
  ASSIGN_OR_RETURN(const std::string text, ResponseText(t, history));
  if (history == 0 && rr->store) {  // a fresh state for the whole conversation
    absl::StatusOr<std::string> made = ResponseSession(
        owner, "", [&] { return ctx_->engine->CreateSession(fo.id, session_owner); });
    if (made.ok()) {
      session = *made;
    } else {  // this response keeps no state; a continuation renders the conversation
      Log(LogLevel::kWarning,
          absl::StrCat("response ", fo.id, ": no session (", made.status().ToString(), ")"));
    }
  }
  absl::StatusOr<GenerateRequest> built =
      TurnRequest(p, chat, text, pending, session, session_owner, history, &fo);
  if (!built.ok()) return ResponsesTerms(built.status());
  GenerateRequest r = *std::move(built);
  fo.response_base["temperature"] = Tidy(r.sampling.temperature);  // the model's defaults too
  fo.response_base["top_p"] = Tidy(r.sampling.top_p);

  GenerationSpec spec = Spec(p, x->request(), owner);
  spec.owner = session_owner;
  spec.user_session = !session.empty();
  spec.stream_head_at_once = true;  // response.created before the prompt is computed
  auto outcome = std::make_shared<ChoiceOutcome>();
  const bool keep = rr->store && !session.empty();
  spec.on_done = [this, outcome, keep, session_owner, session](const ChoiceOutcome& o) {
    *outcome = o;
    if (!keep || !o.ok) DropSessionLater(session_owner, session);
  };
  if (rr->store) {
    fo.on_final = [this, owner, session_owner, rr, prev, session, outcome, tools = chat.tools,
                   id = fo.id](const Json& response) {
      StoredResponse s;
      s.id = id;
      s.response = response;
      s.input_items = rr->input_items;
      auto turn = std::make_shared<ConversationTurn>();
      turn->previous = prev != nullptr ? prev->turn : nullptr;
      turn->messages = rr->chat.messages;
      absl::Status st = ItemsToMessages(response["output"], "output", &turn->messages);
      if (!st.ok()) Log(LogLevel::kWarning, absl::StrCat("response ", id, ": ", st.ToString()));
      s.turn = std::move(turn);
      s.instructions = rr->instructions;
      s.tools = tools;
      if (outcome->ok && outcome->session_end) {
        s.session_id = session;
        s.position = outcome->session_end->position;
        s.pending = outcome->session_end->pending;
      }
      for (const auto& [gone_owner, gone] : responses_.Put(owner, std::move(s))) {
        DropSessionLater(SessionOwner(gone_owner), gone->session_id);  // any key's
      }
    };
  }
  std::move(drop_session).Cancel();  // from here on_done drops it
  spec.prompts.push_back(std::move(r));
  spec.history.push_back(history);
  std::unique_ptr<Formatter> fmt = MakeFormatter(std::move(fo), 1);
  Generation::Start({ctx_, &dispatcher_, &in_flight_}, x, std::move(spec), std::move(fmt));
  return absl::OkStatus();
}

// POST /v1/responses/input_tokens: the input tokens the same request to /v1/responses would
// count — the stored state's tokens plus the input appended to it where that request would
// continue the state, else the whole conversation rendered.
absl::Status OpenAiApi::CountResponseTokens(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(ResponseTurn t, ReadResponseRequest(x, owner));
  int64_t history = 0;
  if (t.continuable) {
    absl::StatusOr<SessionInfo> info =
        ctx_->engine->GetSession(t.prev->session_id, SessionOwner(owner));
    if (info.ok() && info->position == t.prev->position) history = t.prev->position;
  }
  ASSIGN_OR_RETURN(const std::string text, ResponseText(t, history));
  absl::StatusOr<std::vector<int32_t>> ids =
      PromptIds(text, history > 0 ? t.prev->pending : std::nullopt, "input");
  if (!ids.ok()) return ResponsesTerms(ids.status());
  Respond(x, {{"object", "response.input_tokens"},
              {"input_tokens", history + static_cast<int64_t>(ids->size())}});
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const StoredResponse>> OpenAiApi::PathResponse(
    const Exchange& x, const std::string& owner, int segment) {
  const std::vector<std::string> parts = absl::StrSplit(x->request().path, '/');
  const std::string& id = parts[parts.size() - 1 - segment];
  std::shared_ptr<const StoredResponse> r = responses_.Get(owner, id);
  if (r == nullptr) return NoResponse("", id, responses_.off());
  return r;
}

absl::Status OpenAiApi::GetResponse(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::shared_ptr<const StoredResponse> r, PathResponse(x, owner, 0));
  Respond(x, r->response);
  return absl::OkStatus();
}

absl::Status OpenAiApi::DeleteResponse(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::shared_ptr<const StoredResponse> r, PathResponse(x, owner, 0));
  if (responses_.Erase(owner, r->id) != nullptr) {
    DropSessionLater(SessionOwner(owner), r->session_id);
  }
  Respond(x, {{"id", r->id}, {"object", "response.deleted"}, {"deleted", true}});
  return absl::OkStatus();
}

// ?order=asc|desc (desc, OpenAI's default), ?limit=1..100 (20), ?after=ITEM_ID.
absl::Status OpenAiApi::ResponseInputItems(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(std::shared_ptr<const StoredResponse> r, PathResponse(x, owner, 1));
  const HttpRequest& request = x->request();
  const std::string order = request.Query("order");
  if (!order.empty() && order != "asc" && order != "desc") {
    return absl::InvalidArgumentError("order: expected \"asc\" or \"desc\"");
  }
  int limit = 20;
  if (const std::string l = request.Query("limit"); !l.empty()) {
    if (!absl::SimpleAtoi(l, &limit) || limit < 1 || limit > 100) {
      return absl::InvalidArgumentError("limit: expected an integer from 1 to 100");
    }
  }
  std::vector<const Json*> items;
  for (const Json& item : r->input_items) items.push_back(&item);
  if (order != "asc") std::reverse(items.begin(), items.end());
  size_t start = 0;
  if (const std::string after = request.Query("after"); !after.empty()) {
    while (start < items.size() && items[start]->value("id", Json()) != after) ++start;
    if (start == items.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("after: no input item '", after.substr(0, 128), "' in this response"));
    }
    ++start;
  }
  Json data = Json::array();
  for (size_t i = start; i < items.size() && data.size() < static_cast<size_t>(limit); ++i) {
    data.push_back(*items[i]);
  }
  const bool more = start + data.size() < items.size();
  Json out = {{"object", "list"},
              {"data", data},
              {"first_id", data.empty() ? Json(nullptr) : data.front().value("id", Json())},
              {"last_id", data.empty() ? Json(nullptr) : data.back().value("id", Json())},
              {"has_more", more}};
  Respond(x, out);
  return absl::OkStatus();
}

}  // namespace linfer::openai
