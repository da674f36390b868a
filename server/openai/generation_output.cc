// Generation, output side (dispatcher thread): formatting queued events, starting and ending the
// stream or answering once, backpressure, and clean-up after the response.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/http_status.h"
#include "server/openai/generation.h"

namespace linfer::openai {
namespace {

constexpr int64_t kHighWaterBytes = 1 << 20;   // pause generation above this unsent backlog
constexpr int64_t kLowWaterBytes = 256 << 10;  // resume below this

}  // namespace

void Generation::Flush() {
  std::vector<Pending> batch;
  bool all_done = false;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(pending_);
    flush_posted_ = false;
    if (finished_) return;
    all_done = remaining_ == 0;
  }
  std::string sse;
  Format(batch, &sse);
  if (spec_.stream && !sse.empty()) {
    if (!started_) StartStream(&sse);
    stream_->Send(std::move(sse));
    Backpressure();
  }
  if (all_done) Complete();
}

// Starts the SSE response; the formatter's head goes before `sse`.
void Generation::StartStream(std::string* sse) {
  std::vector<std::pair<std::string, std::string>> headers = spec_.headers;
  headers.emplace_back("Cache-Control", "no-cache");
  headers.emplace_back("X-Accel-Buffering", "no");
  stream_ = exchange_->StartStream(200, "text/event-stream; charset=utf-8", headers);
  started_ = true;
  *sse = fmt_->StreamHead() + *sse;
}

void Generation::OpenStream() {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
  }
  if (started_) return;
  std::string sse;
  StartStream(&sse);
  if (!sse.empty()) stream_->Send(std::move(sse));
}

void Generation::Format(std::vector<Pending>& batch, std::string* sse) {
  UsageTotals totals;
  {
    absl::MutexLock lock(&mu_);
    totals = Totals();
  }
  for (Pending& p : batch) {
    const TokenEvent& e = p.event;
    if (p.ends_choice && e.finish == Finish::kError) {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = e.error.ok() ? absl::InternalError("generation failed") : e.error;
      continue;
    }
    if (e.token >= 0) ++emitted_tokens_;
    Json usage = nullptr;
    if (spec_.continuous_usage) {
      usage = UsageJson({totals.prompt, emitted_tokens_, totals.cached});
    }
    const bool has_event = e.token >= 0 || !e.text.empty() || !e.prompt_logprobs.empty();
    const ChoiceEnd end{e.finish, e.stop_token, e.stop_string, e.session_end};
    if (has_event && p.ends_choice) {
      fmt_->EventAndEnd(p.choice, e, end, usage, sse);
    } else if (has_event) {
      fmt_->Event(p.choice, e, usage, sse);
    } else if (p.ends_choice) {
      fmt_->End(p.choice, end, usage, sse);
    }
  }
}

void Generation::Complete() {
  absl::Status error;
  UsageTotals totals;
  ChoiceOutcome outcome;
  ChoiceEnd first_end;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    error = error_;
    first_end = choices_.front().end;
    totals = Totals();
    outcome = Outcome();
  }
  if (spec_.on_done) spec_.on_done(outcome);
  if (!started_) {
    if (!error.ok()) {
      HttpResponse r = fmt_->ErrorResponse(error);
      r.headers = spec_.headers;
      exchange_->Respond(std::move(r));
    } else if (!spec_.stream) {
      HttpResponse r;
      r.body = Dump(fmt_->Response(totals));
      r.headers = spec_.headers;
      exchange_->Respond(std::move(r));
    } else {  // a stream that produced no chunk at all
      std::string head;
      StartStream(&head);
      if (!head.empty()) stream_->Send(std::move(head));
    }
  }
  if (started_) {
    std::string tail;
    fmt_->StreamTail(error, totals, spec_.include_usage, &first_end, &tail);
    stream_->Send(std::move(tail));
    stream_->End();
  }
  Finalize();
}

void Generation::Backpressure() {
  if (stream_->backlog_bytes() <= kHighWaterBytes) return;
  {
    absl::MutexLock lock(&mu_);
    if (paused_ || finished_) return;
    paused_ = true;
    for (const Choice& ch : choices_) {
      if (ch.id != 0 && !ch.done) env_.ctx->engine->SetPaused(ch.id, true);
    }
  }
  std::weak_ptr<Generation> weak = weak_from_this();
  env_.dispatcher->Watch([weak] {
    std::shared_ptr<Generation> self = weak.lock();
    return self != nullptr && self->PollResume();
  });
}

bool Generation::PollResume() {
  absl::MutexLock lock(&mu_);
  if (finished_ || !paused_) return false;
  if (stream_->backlog_bytes() >= kLowWaterBytes && !stream_->client_gone()) return true;
  paused_ = false;
  for (const Choice& ch : choices_) {
    if (ch.id != 0 && !ch.done) env_.ctx->engine->SetPaused(ch.id, false);
  }
  return false;
}

ChoiceOutcome Generation::Outcome() {
  const Choice& ch = choices_.front();
  ChoiceOutcome outcome;
  outcome.ok = ch.end.finish == Finish::kStop || ch.end.finish == Finish::kLength;
  outcome.prompt_tokens = static_cast<int64_t>(spec_.prompts.front().prompt.size());
  outcome.completion_tokens = ch.completion;
  outcome.session_end = ch.end.session;
  return outcome;
}

// Deletes the temporary sessions, off the dispatcher thread.
void Generation::Finalize() {
  std::vector<std::string> temps;
  {
    absl::MutexLock lock(&mu_);
    temps.swap(temps_);
  }
  std::shared_ptr<Generation> self = shared_from_this();
  auto cleanup = [self, temps = std::move(temps)] {
    for (const std::string& id : temps) {
      absl::Status st = self->env_.ctx->engine->DeleteSession(id, self->spec_.owner);
      if (!st.ok()) Log(LogLevel::kWarning, absl::StrCat("temporary session: ", st.ToString()));
    }
    self->env_.in_flight->Done();
  };
  if (!env_.ctx->workers->Post(cleanup)) cleanup();
}

}  // namespace linfer::openai
