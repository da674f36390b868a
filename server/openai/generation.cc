// Generation: choices, sessions for n > 1, engine events to chunks, backpressure,
// cancellation and the end of the response.
#include "server/openai/generation.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/http_status.h"
#include "server/request_log.h"

namespace linfer::openai {
namespace {

TokenEvent ErrorEvent(const absl::Status& status) {
  TokenEvent e;
  e.finish = status.code() == absl::StatusCode::kCancelled ? Finish::kCancelled : Finish::kError;
  e.error = status;
  return e;
}

}  // namespace

void InFlight::Add() {
  absl::MutexLock lock(&mu_);
  ++count_;
}

void InFlight::Done() {
  absl::MutexLock lock(&mu_);
  --count_;
}

bool InFlight::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

Generation::Generation(const Env& env, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec,
                       std::unique_ptr<Formatter> formatter)
    : env_(env),
      start_(absl::Now()),
      exchange_(std::move(exchange)),
      spec_(std::move(spec)),
      fmt_(std::move(formatter)) {}

absl::Status FitBufferedLogprobs(GenerationSpec& spec) {
  // entries = fixed + Σ (entries a token of that prompt adds) × its max_tokens.
  int64_t fixed = 0, per_token = 0, entries = 0;
  for (const GenerateRequest& r : spec.prompts) {
    if (r.sampling.logprobs && !spec.stream) {
      const int64_t tops = r.sampling.logprob_token_ids.empty()
                               ? int64_t{*r.sampling.logprobs}
                               : static_cast<int64_t>(r.sampling.logprob_token_ids.size());
      const int64_t each = int64_t{spec.n} * (1 + tops);
      per_token += each;
      entries += each * r.stop.max_tokens;
    }
    // The prompt's, streamed or not: they all go out in the first chunk.
    if (r.prompt_logprobs) {
      fixed += static_cast<int64_t>(r.prompt.size()) * (1 + int64_t{*r.prompt_logprobs});
    }
  }
  entries += fixed;
  if (entries <= kMaxBufferedLogprobs) return absl::OkStatus();
  // Over the bound, the max_tokens that fit are fewer than the longest asked for.
  const int64_t fits = per_token > 0 && fixed < kMaxBufferedLogprobs
                           ? (kMaxBufferedLogprobs - fixed) / per_token
                           : 0;
  if (!spec.max_tokens_given && fits >= std::max(1, spec.min_tokens)) {
    for (GenerateRequest& r : spec.prompts) {
      r.stop.max_tokens = static_cast<int>(std::min<int64_t>(r.stop.max_tokens, fits));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "logprobs: the response would hold up to ", entries,
      " logprob entries at once (n × max_tokens × (1 + top_logprobs or the logprob_token_ids) "
      "without stream, and with echo the prompt's tokens × (1 + logprobs), every prompt); the "
      "limit is ",
      kMaxBufferedLogprobs, ": stream it, or lower max_tokens, n or top_logprobs"));
}

void Generation::Start(const Env& env, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec,
                       std::unique_ptr<Formatter> formatter) {
  if (absl::Status st = FitBufferedLogprobs(spec); !st.ok()) {
    // Refused before the engine saw it: the caller's clean-up (a Responses request's new or
    // forked session) runs as for any failed request.
    if (spec.on_done) spec.on_done(ChoiceOutcome{});
    exchange->Respond(formatter->ErrorResponse(st));
    return;
  }
  std::shared_ptr<Generation> g(
      new Generation(env, std::move(exchange), std::move(spec), std::move(formatter)));
  env.in_flight->Add();
  std::weak_ptr<Generation> weak = g;
  g->exchange_->OnClientGone([weak] {
    if (std::shared_ptr<Generation> s = weak.lock()) s->Cancel();
  });
  g->Begin();
  // After Begin: a request the engine refused at once has queued its error first, so it is
  // answered with its HTTP status, not a stream that opens and fails.
  if (g->spec_.stream && g->spec_.stream_head_at_once) {
    env.dispatcher->Post([g] { g->OpenStream(); });
  }
  if (g->exchange_->client_gone()) g->Cancel();
}

GenerateRequest Generation::ChoiceRequest(GenerateRequest r, int index) const {
  if (r.sampling.seed && index > 0) r.sampling.seed = *r.sampling.seed + index;
  // Each choice walks its own structured output (the spec's stays at the start).
  if (r.constraint) r.constraint = r.constraint->Fresh();
  r.stop.min_tokens = spec_.min_tokens;
  return r;
}

void Generation::Begin() {
  const int groups = static_cast<int>(spec_.prompts.size());
  {
    absl::MutexLock lock(&mu_);
    choices_.resize(static_cast<size_t>(groups) * spec_.n);
    prefill_cached_.assign(static_cast<size_t>(groups), 0);
    remaining_ = static_cast<int>(choices_.size());
    for (size_t c = 0; c < choices_.size(); ++c) choices_[c].group = static_cast<int>(c) / spec_.n;
  }
  for (int g = 0; g < groups; ++g) BeginGroup(g);
}

// One prompt: submitted as it is (n = 1), or through a temporary session forked n times.
void Generation::BeginGroup(int g) {
  GenerateRequest& r = spec_.prompts[g];
  if (spec_.n == 1) {
    {
      absl::MutexLock lock(&mu_);
      choices_[g].request = ChoiceRequest(r, 0);
    }
    SubmitNext(g);
    return;
  }
  absl::StatusOr<std::string> base = env_.ctx->engine->CreateInternalSession(spec_.owner);
  if (!base.ok()) return FailGroup(g, base.status());
  {
    absl::MutexLock lock(&mu_);
    temps_.push_back(*base);
  }
  if (spec_.n == 1 || r.prompt.size() < 2) return ForkGroup(g, *base, r.prompt);
  GenerateRequest prefill = r;
  prefill.prompt.pop_back();
  prefill.session_id = *base;
  prefill.prefill_only = true;
  prefill.partial = true;
  prefill.stop.max_tokens = 1;
  prefill.stop.stop_strings.clear();
  std::weak_ptr<Generation> weak = weak_from_this();
  std::shared_ptr<Generation> self = shared_from_this();
  absl::StatusOr<RequestId> id =
      env_.ctx->engine->Submit(std::move(prefill), [self, g, b = *base](TokenEvent e) {
        if (e.finish != Finish::kNone) self->OnPrefillEvent(g, b, std::move(e));
      });
  if (!id.ok()) return FailGroup(g, id.status());
  absl::MutexLock lock(&mu_);
  prefills_.push_back(*id);
  if (cancelled_) env_.ctx->engine->Cancel(*id);
}

void Generation::OnPrefillEvent(int g, const std::string& base, TokenEvent e) {
  std::shared_ptr<Generation> self = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    for (int c = g * spec_.n; c < (g + 1) * spec_.n; ++c) {
      choices_[c].queued_seconds = e.usage.queue_seconds;  // the forks queue again
    }
    prefill_cached_[static_cast<size_t>(g)] = e.usage.cached_tokens;
  }
  const bool ok = e.finish == Finish::kLength;
  absl::Status st = ok              ? absl::OkStatus()
                    : !e.error.ok() ? e.error
                                    : absl::CancelledError("cancelled");
  const bool posted = env_.ctx->workers->Post([self, g, base, ok, st] {
    if (!ok) return self->FailGroup(g, st);
    self->ForkGroup(g, base, {self->spec_.prompts[g].prompt.back()});
  });
  if (!posted) {
    absl::MutexLock lock(&mu_);
    for (int c = g * spec_.n; c < (g + 1) * spec_.n; ++c) {
      Queue(c, ErrorEvent(absl::ResourceExhaustedError("the server is overloaded")), true);
    }
  }
}

// Forks the prefilled session once per further choice, then starts every choice.
void Generation::ForkGroup(int g, const std::string& base, std::vector<int32_t> prompt) {
  std::vector<std::string> sessions = {base};
  for (int j = 1; j < spec_.n; ++j) {
    absl::StatusOr<std::string> fork = env_.ctx->engine->ForkInternalSession(base, spec_.owner);
    if (!fork.ok()) return FailGroup(g, fork.status());
    absl::MutexLock lock(&mu_);
    temps_.push_back(*fork);
    sessions.push_back(*fork);
  }
  const GenerateRequest& whole = spec_.prompts[g];
  std::vector<int32_t> context;  // what the fed prompt leaves out, for repetition_penalty
  if (whole.sampling.repetition_penalty != 1.0f && prompt.size() < whole.prompt.size()) {
    context.assign(whole.prompt.begin(),
                   whole.prompt.end() - static_cast<ptrdiff_t>(prompt.size()));
  }
  for (int j = 0; j < spec_.n; ++j) {
    GenerateRequest r = whole;
    r.prompt = prompt;
    r.penalty_context = context;
    r.session_id = sessions[j];
    r.temporary_session = true;
    absl::MutexLock lock(&mu_);
    choices_[g * spec_.n + j].request = ChoiceRequest(std::move(r), j);
  }
  for (int j = 0; j < spec_.n; ++j) SubmitNext(g * spec_.n + j);
}

void Generation::FailGroup(int g, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (int c = g * spec_.n; c < (g + 1) * spec_.n; ++c) Queue(c, ErrorEvent(status), true);
}

void Generation::SubmitNext(int c) {
  GenerateRequest leg;
  {
    absl::MutexLock lock(&mu_);
    Choice& ch = choices_[c];
    if (ch.done || !ch.request) return;
    if (cancelled_) return Queue(c, ErrorEvent(absl::CancelledError("cancelled")), true);
    leg = *std::move(ch.request);
    ch.request.reset();
  }
  std::shared_ptr<Generation> self = shared_from_this();
  absl::StatusOr<RequestId> id = env_.ctx->engine->Submit(
      std::move(leg), [self, c](TokenEvent e) { self->OnEvent(c, std::move(e)); });
  absl::MutexLock lock(&mu_);
  if (!id.ok()) {
    env_.ctx->metrics->ObserveError(id.status().code());
    return Queue(c, ErrorEvent(id.status()), true);
  }
  choices_[c].id = *id;
  if (paused_) env_.ctx->engine->SetPaused(*id, true);
  if (cancelled_) env_.ctx->engine->Cancel(*id);
}

// Engine thread: metrics and the event into the queue.
void Generation::OnEvent(int c, TokenEvent e) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  Choice& ch = choices_[c];
  Metrics* metrics = env_.ctx->metrics;
  if (e.token >= 0) {
    if (!ch.saw_token) {
      // From the client's request, not from this fork's submission.
      ch.queue_total = ch.queued_seconds + e.usage.queue_seconds;
      ch.ttft = absl::ToDoubleSeconds(now - start_);
      metrics->ObserveFirstToken(ch.queue_total, ch.ttft);
      ch.cached = e.usage.cached_tokens;  // the finish event says it again
    } else {
      metrics->ObserveInterToken(absl::ToDoubleSeconds(now - ch.last_token));
    }
    ch.saw_token = true;
    ch.last_token = now;
  }
  if (e.finish == Finish::kNone) return Queue(c, std::move(e), false);
  ch.completion += e.usage.completion_tokens;
  ch.cached = e.usage.cached_tokens;
  // The choice as the client sees it: its group's prompt, times from the request (a fork's usage
  // alone holds its own part).
  Usage whole = e.usage;
  whole.prompt_tokens = static_cast<int64_t>(spec_.prompts[ch.group].prompt.size());
  whole.completion_tokens = ch.completion;
  if (ch.saw_token) {
    whole.queue_seconds = ch.queue_total;
    whole.ttft_seconds = ch.ttft;
  }
  whole.total_seconds = absl::ToDoubleSeconds(now - start_);
  metrics->ObserveFinished(whole);
  if (e.finish == Finish::kError) metrics->ObserveError(e.error.code());
  if (env_.ctx->log_requests) {
    LogRequest("http", e.request, spec_.prompts[ch.group].session_id, e);
  }
  ch.end = {e.finish, e.stop_token, e.stop_string, e.session_end};
  Queue(c, std::move(e), true);
}

void Generation::Queue(int c, TokenEvent e, bool ends_choice) {
  if (ends_choice) {
    if (choices_[c].done) return;
    choices_[c].done = true;
    --remaining_;
  }
  pending_.push_back({c, std::move(e), ends_choice});
  if (flush_posted_) return;
  flush_posted_ = true;
  std::shared_ptr<Generation> self = shared_from_this();
  env_.dispatcher->Post([self] { self->Flush(); });
}

// Event-loop thread: the client went away.
void Generation::Cancel() {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return;
  cancelled_ = true;
  for (const Choice& ch : choices_) {
    if (ch.id != 0 && !ch.done) env_.ctx->engine->Cancel(ch.id);
  }
  for (RequestId id : prefills_) env_.ctx->engine->Cancel(id);
}

UsageTotals Generation::Totals() {
  UsageTotals u;
  for (size_t g = 0; g < spec_.prompts.size(); ++g) {
    u.prompt += spec_.history[g] + static_cast<int64_t>(spec_.prompts[g].prompt.size());
  }
  // What the engine took from a saved state: the client's session, or the prefix cache for a
  // request that ran alone; for n > 1, what each prompt's prefill took (its forks start there).
  const bool alone = spec_.user_session || spec_.n == 1;
  for (const Choice& ch : choices_) {
    u.completion += ch.completion;
    if (alone) u.cached += ch.cached;
  }
  if (!alone) {
    for (int64_t cached : prefill_cached_) u.cached += cached;
  }
  return u;
}

}  // namespace linfer::openai
