// OpenAiApi: POST /v1/completions and POST /v1/chat/completions (request preparation on the HTTP
// worker; the generation itself is asynchronous, see generation.h).
#include <algorithm>
#include <climits>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/structured/text_grammar.h"
#include "engine/structured/thinking_budget.h"
#include "server/openai/api.h"
#include "server/openai/chat_request.h"

namespace linfer::openai {
namespace {

std::string NewId(absl::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s%016x%016x", prefix, rng(), rng());
}

// A header value that is safe to echo: printable ASCII, bounded.
std::string SafeHeader(const std::string& v) {
  std::string out;
  for (char c : v.substr(0, 128)) {
    if (absl::ascii_isprint(static_cast<unsigned char>(c))) out += c;
  }
  return out;
}

// The request's settings; the prompt is the caller's to fill.
RequestInput Input(const CommonParams& p, const std::string& session_id, const std::string& owner,
                   std::optional<int64_t> history) {
  RequestInput in;
  in.session_id = session_id;
  in.owner = owner;
  in.sampling = p.sampling;
  in.stop = p.stop;
  in.given = p.given;
  in.priority = p.priority;
  in.cache_salt = p.cache_salt;
  in.bad_words = p.bad_words;
  in.history = history;
  in.truncate_prompt_tokens = p.truncate_prompt_tokens;
  in.truncate_keeps_start = p.truncate_keeps_start;
  return in;
}

// The engine's context-length check, made on the request as the client sent it (with n > 1 the
// engine sees a prefill and one token per choice; a stream whose head goes out at once, the
// Responses API's, would otherwise open with 200 and then fail).
absl::Status CheckContextLength(const Engine& engine, int64_t history, const GenerateRequest& r) {
  const int64_t max_model_len = engine.options().max_model_len;
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (history + prompt + r.stop.max_tokens <= max_model_len) return absl::OkStatus();
  return ContextLengthError(max_model_len, history, prompt, r.stop.max_tokens);
}

// return_token_ids on completions repeats each prompt's ids on every choice of it: a bound on
// that response (n 128 × 256 prompts of a 32 MB body would be gigabytes).
absl::Status CheckPromptIdsInResponse(const FormatOptions& fo, int n) {
  int64_t ids = 0;
  for (const std::vector<int32_t>& prompt : fo.prompt_token_ids) {
    ids += static_cast<int64_t>(prompt.size()) * n;
  }
  if (ids <= kMaxResponsePromptIds) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("return_token_ids: the response would repeat ", ids,
                   " prompt token ids (each prompt's on ", "each of its n choices); at most ",
                   kMaxResponsePromptIds, ": lower n or send fewer prompts"));
}

}  // namespace

absl::StatusOr<int64_t> OpenAiApi::OpenSession(const CommonParams& p, const std::string& owner) {
  if (p.n > 1) {
    return absl::InvalidArgumentError("n: must be 1 when a session is used");
  }
  absl::StatusOr<int64_t> history = SessionHistory(*ctx_, p.session_id, owner);
  if (history.ok() || !absl::IsNotFound(history.status()) || !p.create_session) return history;
  absl::StatusOr<std::string> made = ctx_->engine->CreateSession(p.session_id, owner);
  if (!made.ok() && !absl::IsAlreadyExists(made.status())) return made.status();
  turns_.Erase(owner, p.session_id);
  return SessionHistory(*ctx_, p.session_id, owner);
}

absl::Status OpenAiApi::DefaultMaxTokens(Api api, const CommonParams& p, int64_t history,
                                         GenerateRequest* r) const {
  if (p.given.max_tokens) return absl::OkStatus();
  const EngineOptions& eo = ctx_->engine->options();
  const int64_t room =
      std::max<int64_t>(1, eo.max_model_len - history - static_cast<int64_t>(r->prompt.size()));
  int64_t limit = std::min<int64_t>(room, eo.max_new_tokens);
  if (api == Api::kCompletions || ctx_->defaults.max_new_tokens) {
    limit = std::min<int64_t>(limit, r->stop.max_tokens);  // 16, or generation_config's
  }
  r->stop.max_tokens = static_cast<int>(limit);
  if (p.min_tokens > limit) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens (", p.min_tokens,
                                                   ") must be at most max_tokens (", limit,
                                                   ", its default here: give max_tokens)"));
  }
  return absl::OkStatus();
}

GenerationSpec OpenAiApi::Spec(const CommonParams& p, const HttpRequest& request,
                               const std::string& owner) const {
  GenerationSpec s;
  s.n = p.n;
  s.min_tokens = p.min_tokens;
  s.max_tokens_given = p.given.max_tokens;
  s.stream = p.stream;
  s.include_usage = p.include_usage;
  s.continuous_usage = p.continuous_usage;
  s.owner = owner;
  s.user_session = !p.session_id.empty();
  if (const std::string rid = SafeHeader(request.Header("x-request-id")); !rid.empty()) {
    s.headers.emplace_back("x-request-id", rid);
  }
  if (s.user_session) s.headers.emplace_back("x-session-id", p.session_id);
  return s;
}

FormatOptions OpenAiApi::Format(Api api, const CommonParams& p) const {
  FormatOptions o;
  o.api = api;
  const char* prefix = api == Api::kChat ? "chatcmpl-" : "cmpl-";
  o.id = p.request_id.empty() ? NewId(prefix) : absl::StrCat(prefix, p.request_id);
  o.created = absl::ToUnixSeconds(absl::Now());
  o.model = ctx_->model_name;
  o.stream = p.stream;
  o.include_usage = p.stream && p.include_usage;
  o.prompt_logprobs = p.prompt_logprobs;
  o.logprobs = p.logprobs;
  o.tokens_as_ids = p.tokens_as_ids;
  o.token_ids = p.return_token_ids;
  o.tokenizer = ctx_->tokenizer;
  if (p.logprobs || p.prompt_logprobs) {
    o.token_bytes = ctx_->constraints.TokenBytes(*ctx_->engine, ctx_->tokenizer);
  }
  o.n = p.n;
  return o;
}

absl::Status OpenAiApi::Completions(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  ASSIGN_OR_RETURN(CommonParams p, ParseCommonParams(body, Api::kCompletions, x->request()));
  ASSIGN_OR_RETURN(std::vector<PromptInput> prompts, ParsePrompts(body));
  RETURN_IF_ERROR(CheckModel(*ctx_, p.model));
  // One request's sequences (n for each prompt) take at most a quarter of the waiting queue: 256
  // prompts × n 128 (32,768 sequences, hours of work) filled it, and every other client got 429.
  const int64_t sequences = static_cast<int64_t>(p.n) * static_cast<int64_t>(prompts.size());
  const int64_t most = std::max<int64_t>(kMaxN, ctx_->engine->options().max_waiting / 4);
  if (sequences > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n (", p.n, ") × ", prompts.size(), " prompts asks for ", sequences,
        " sequences; this server takes at most ", most,
        " in one request (a quarter of --max_waiting, at least 128): send fewer prompts per "
        "request"));
  }
  std::optional<int64_t> history;
  if (!p.session_id.empty()) {
    if (prompts.size() > 1) return absl::InvalidArgumentError("prompt: one prompt with a session");
    ASSIGN_OR_RETURN(history, OpenSession(p, owner));
  }
  GenerationSpec spec = Spec(p, x->request(), owner);
  FormatOptions fo = Format(Api::kCompletions, p);
  std::vector<std::vector<int32_t>> bad_words;  // tokenized once for every prompt
  RETURN_IF_ERROR(TokenizeBadWords(*ctx_, p.bad_words, &bad_words));
  for (PromptInput& prompt : prompts) {
    const std::string echo = prompt.kind == PromptInput::Kind::kText ? prompt.text : "";
    RequestInput in = Input(p, p.session_id, owner, history);
    in.bad_words.clear();
    in.sampling.bad_words_ids = bad_words;
    in.prompt = std::move(prompt);
    if (p.add_special_tokens) in.prompt.add_special_tokens = p.add_special_tokens;
    ASSIGN_OR_RETURN(GenerateRequest r, BuildRequest(*ctx_, std::move(in)));
    RETURN_IF_ERROR(DefaultMaxTokens(Api::kCompletions, p, history.value_or(0), &r));
    RETURN_IF_ERROR(CheckContextLength(*ctx_->engine, history.value_or(0), r));
    if (p.echo && p.logprobs) r.prompt_logprobs = p.top_logprobs;
    if (p.prompt_logprobs) r.prompt_logprobs = *p.prompt_logprobs;
    if (p.format) {
      ASSIGN_OR_RETURN(r.constraint,
                       ctx_->constraints.Make(*ctx_->engine, ctx_->tokenizer, p.format));
    }
    if (p.thinking_budget) {  // the prompt's own text says whether it opened the block
      absl::StatusOr<std::string> text = ctx_->tokenizer != nullptr
                                             ? ctx_->tokenizer->Decode(r.prompt, false)
                                             : absl::StatusOr<std::string>(std::string());
      const bool inside = text.ok() && PromptOpensReasoning(*text);
      if (inside && p.format) {  // completions hold the format from the first token
        return absl::InvalidArgumentError(
            "thinking_token_budget: not with response_format when the prompt opens a <think> "
            "block (on /v1/completions the format holds from the output's first token; chat "
            "completions put it after the reasoning)");
      }
      RETURN_IF_ERROR(ApplyThinkingBudget(p, inside ? *text : "", &r));
    }
    if (p.echo) {
      absl::StatusOr<std::string> text = ctx_->tokenizer != nullptr
                                             ? ctx_->tokenizer->Decode(r.prompt, false)
                                             : absl::StatusOr<std::string>(std::string());
      fo.echo.push_back(echo.empty() && text.ok() ? *text : echo);
    }
    if (fo.token_ids) fo.prompt_token_ids.push_back(r.prompt);
    spec.prompts.push_back(std::move(r));
    spec.history.push_back(history.value_or(0));
  }
  RETURN_IF_ERROR(CheckPromptIdsInResponse(fo, p.n));
  if (history) fo.session = {{"id", p.session_id}, {"history_tokens", *history}};
  std::unique_ptr<Formatter> fmt = MakeFormatter(std::move(fo), p.n * spec.prompts.size());
  Generation::Start({ctx_, &dispatcher_, &in_flight_}, x, std::move(spec), std::move(fmt));
  return absl::OkStatus();
}

absl::Status OpenAiApi::Chat(const Exchange& x, const std::string& owner) {
  ASSIGN_OR_RETURN(Json body, ParseBody(x->request().body));
  ASSIGN_OR_RETURN(CommonParams p, ParseCommonParams(body, Api::kChat, x->request()));
  auto chat = std::make_shared<ChatRequest>();
  ASSIGN_OR_RETURN(*chat, ParseChatRequest(body));
  RETURN_IF_ERROR(CheckModel(*ctx_, p.model));
  if (chat_ == nullptr || !chat_->chat_template) {
    return absl::InvalidArgumentError(
        "messages: this model has no chat template (serve it with --chat_template FILE); use "
        "/v1/completions");
  }
  int64_t history = 0;
  std::optional<TurnRecord> record;
  if (!p.session_id.empty()) {
    ASSIGN_OR_RETURN(history, OpenSession(p, owner));
    record = turns_.Get(owner, p.session_id);
    if (record && record->position != history) record.reset();  // changed elsewhere
  }
  if ((p.format || chat->forced) && !chat->kwargs.contains("enable_thinking")) {
    chat->kwargs["enable_thinking"] = false;  // the grammar holds from the first token on
  }
  if (chat->continue_final_message && !p.session_id.empty()) {
    // The session's record would hold the continued message and the reply as two messages.
    return absl::InvalidArgumentError(
        "continue_final_message: not supported with session_id (continue the session with a new "
        "message instead)");
  }
  ASSIGN_OR_RETURN(TurnText turn, RenderTurn(*chat_, *chat, history, record));
  FormatOptions fo = Format(Api::kChat, p);
  ASSIGN_OR_RETURN(GenerateRequest r,
                   TurnRequest(p, *chat, turn.text, record ? record->pending : std::nullopt,
                               p.session_id, owner, history, &fo));
  if (p.prompt_logprobs) r.prompt_logprobs = *p.prompt_logprobs;
  GenerationSpec spec = Spec(p, x->request(), owner);
  if (!p.session_id.empty()) {
    RecordSessionTurn(p, owner, history, chat, turn, record, r.prompt.size(), &fo, &spec);
  }
  if (fo.token_ids) fo.prompt_token_ids.push_back(r.prompt);
  spec.prompts.push_back(std::move(r));
  spec.history.push_back(history);
  std::unique_ptr<Formatter> fmt = MakeFormatter(std::move(fo), p.n);
  Generation::Start({ctx_, &dispatcher_, &in_flight_}, x, std::move(spec), std::move(fmt));
  return absl::OkStatus();
}

void OpenAiApi::RecordSessionTurn(const CommonParams& p, const std::string& owner, int64_t history,
                                  std::shared_ptr<const ChatRequest> chat, const TurnText& turn,
                                  const std::optional<TurnRecord>& record, size_t new_tokens,
                                  FormatOptions* fo, GenerationSpec* spec) {
  fo->session = {{"id", p.session_id},
                 {"history_tokens", history},
                 {"history_messages", turn.history_messages},
                 {"new_tokens", new_tokens}};
  spec->on_done = [this, owner, id = p.session_id, chat = std::move(chat), turn,
                   record](const ChoiceOutcome& o) {
    // Without a reply (the prompt cut short) the state is as it was.
    if (o.completion_tokens == 0 || !o.session_end) return;
    turns_.Put(owner, id,
               NextRecord(record, *chat, turn, o.session_end->position, o.session_end->pending));
  };
}

absl::StatusOr<std::vector<int32_t>> OpenAiApi::PromptIds(const std::string& text,
                                                          std::optional<int32_t> pending,
                                                          absl::string_view field,
                                                          bool add_special_tokens) const {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenizeText(*ctx_, text, add_special_tokens, field));
  if (pending && !ids.empty() && ids.front() == *pending &&
      ctx_->tokenizer->IsSpecial(ids.front())) {
    ids.erase(ids.begin());  // the reply's end-of-turn token is already pending in the state
  }
  return ids;
}

absl::Status OpenAiApi::ApplyThinkingBudget(const CommonParams& p, const std::string& open_prompt,
                                            GenerateRequest* r) const {
  if (!p.thinking_budget) return absl::OkStatus();
  if (chat_ == nullptr || !chat_->syntax.reasoning || ctx_->tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        "thinking_token_budget: this model has no reasoning block to cut (its chat template has "
        "no <think>)");
  }
  structured::ThinkingBudgetSpec spec;
  spec.budget = *p.thinking_budget;
  spec.starts_inside = !open_prompt.empty();
  if (spec.starts_inside) {  // what the prompt already wrote in the block counts (vLLM's rule)
    const size_t at = open_prompt.rfind(spec.open);
    const absl::string_view inside =
        at == std::string::npos ? "" : absl::string_view(open_prompt).substr(at + spec.open.size());
    ASSIGN_OR_RETURN(const std::vector<int32_t> written, ctx_->tokenizer->Encode(inside));
    spec.counted_at_start = static_cast<int64_t>(written.size());
  }
  ASSIGN_OR_RETURN(spec.open_ids, ctx_->tokenizer->Encode(spec.open));
  ASSIGN_OR_RETURN(spec.close_ids, ctx_->tokenizer->Encode(spec.close));
  if (spec.close_ids.empty()) {
    return absl::InternalError("thinking_token_budget: \"</think>\" encodes to no token");
  }
  r->constraint = std::make_shared<structured::ThinkingBudget>(
      std::move(spec), ctx_->constraints.TokenBytes(*ctx_->engine, ctx_->tokenizer),
      std::move(r->constraint));
  return absl::OkStatus();
}

absl::StatusOr<GenerateRequest> OpenAiApi::TurnRequest(
    const CommonParams& p, const ChatRequest& chat, const std::string& text,
    std::optional<int32_t> pending, const std::string& session_id, const std::string& owner,
    int64_t history, FormatOptions* fo) const {
  const bool responses = fo->api == Api::kResponses;
  const char* field = responses ? "input" : "messages";
  ASSIGN_OR_RETURN(
      std::vector<int32_t> ids,
      PromptIds(text, pending, field, history == 0 && p.add_special_tokens.value_or(false)));
  const size_t whole = ids.size();
  RequestInput in = Input(p, session_id, owner, history);
  in.prompt.kind = PromptInput::Kind::kTokenIds;
  in.prompt.token_ids = std::move(ids);
  in.prompt.ids_field = field;
  ASSIGN_OR_RETURN(GenerateRequest r, BuildRequest(*ctx_, std::move(in)));
  // What the model sees: the render, or what truncate_prompt_tokens kept of it.
  std::string seen = text;
  if (r.prompt.size() < whole) {
    ASSIGN_OR_RETURN(seen, ctx_->tokenizer->Decode(r.prompt, false));
  }
  if (p.return_prompt_text) fo->prompt_text = seen;
  const bool opens_reasoning = chat_->syntax.reasoning && PromptOpensReasoning(seen);
  // The output's grammar: a forced tool call's (tool_grammar.h) or the output format's, after
  // the reasoning when the prompt opened a reasoning block.
  std::shared_ptr<const structured::Grammar> grammar = p.format;
  if (chat.forced) {
    if (p.format) {
      return absl::InvalidArgumentError(absl::StrCat(
          chat.forced->field, ": a forced tool call and ",
          responses ? "text.format" : "response_format", " cannot constrain one reply together"));
    }
    ASSIGN_OR_RETURN(grammar, ToolCallGrammar(chat.tools, chat_->syntax.tools, *chat.forced));
  }
  if (grammar && opens_reasoning) grammar = structured::AfterReasoning(*grammar);
  RETURN_IF_ERROR(DefaultMaxTokens(Api::kChat, p, history, &r));
  RETURN_IF_ERROR(CheckContextLength(*ctx_->engine, history, r));
  if (grammar) {
    ASSIGN_OR_RETURN(r.constraint, ctx_->constraints.Make(*ctx_->engine, ctx_->tokenizer, grammar));
  }
  RETURN_IF_ERROR(ApplyThinkingBudget(p, opens_reasoning ? seen : "", &r));
  fo->syntax = chat_->syntax;
  fo->start_in_reasoning = opens_reasoning;
  fo->parse_tools = chat.parse_tools;
  fo->first_tool_call_only = !chat.parallel_tool_calls;
  if (p.format) {  // after any reasoning the reply is one JSON document: a "<tool_call>" in it,
                   // or a "<think>" the prompt did not open, is text
    fo->syntax.reasoning = opens_reasoning;
    fo->parse_tools = false;
  }
  fo->tools = chat.tools;
  return r;
}

}  // namespace linfer::openai
