// Engine: submission, the step loop (plan → forward → sample → emit) and session requests.
#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/logging.h"
#include "kernels/status_macros.h"

namespace linfer {

absl::string_view FinishName(Finish finish) {
  switch (finish) {
    case Finish::kNone:
      return "";
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kDeadline:
      return "deadline";
    case Finish::kError:
      return "error";
  }
  return "?";
}

struct Engine::Seq {
  RequestId id = 0;
  GenerateRequest req;
  EventSink sink;
  std::vector<int32_t> tokens;  // pending session token + prompt + generated
  int64_t computed = 0;         // tokens of `tokens` consumed into the state
  int64_t cached = 0;           // the session state's position at the start
  int slot = -1;                // while running (and for sessions, while in a slot)
  std::vector<float> parked;    // a preempted one-off sequence's state
  int64_t parked_position = 0;
  SessionStore::Session* session = nullptr;
  std::optional<Sampler> sampler;
  std::optional<StopChecker> stop;
  std::unique_ptr<Detokenizer> detok;
  std::vector<int32_t> generated;
  bool cancelled = false;
  uint64_t arrival = 0, waiting_since = 0;
  absl::Time submitted, scheduled = absl::InfinitePast(), first_token = absl::InfinitePast();
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       EngineOptions options) {
  if (model == nullptr) return absl::InvalidArgumentError("engine needs a model");
  if (options.chunk_size < 1 || options.scheduler.max_step_tokens < 1 ||
      options.scheduler.max_running < 1) {
    return absl::InvalidArgumentError(
        "chunk_size, max_step_tokens and max_running must be positive");
  }
  int slots = StatePool::SlotsForBudget(options.state_memory_bytes, model->state_bytes());
  if (options.max_slots > 0) slots = std::min(slots, options.max_slots);
  Log(LogLevel::kInfo, absl::StrCat("state: ", model->state_bytes(), " bytes per sequence; ", slots,
                                    " slots (", model->state_bytes() * slots, " bytes)"));
  return std::unique_ptr<Engine>(new Engine(std::move(model), std::move(options), slots));
}

Engine::Engine(std::unique_ptr<Model> model, EngineOptions options, int slots)
    : model_(std::move(model)),
      options_(std::move(options)),
      num_slots_(slots),
      pool_(model_->state_floats(), slots),
      sessions_(&pool_, model_->fingerprint(), options_.tiers) {
  stats_.slots_total = slots;
  stats_.state_bytes_per_sequence = model_->state_bytes();
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

absl::StatusOr<RequestId> Engine::Submit(GenerateRequest request, EventSink sink) {
  const int64_t vocab = model_->vocab_size();
  if (!sink) return absl::InvalidArgumentError("a request needs an event sink");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt[", i, "] = ", request.prompt[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  RETURN_IF_ERROR(ValidateSamplingParams(request.sampling, vocab));
  if (!request.stop.eos_token_id) request.stop.eos_token_id = model_->config().eos_token_id;
  RETURN_IF_ERROR(ValidateStopParams(request.stop, vocab));
  if (!request.stop.stop_strings.empty() && !options_.detokenizer) {
    return absl::InvalidArgumentError("stop strings need a tokenizer, and this model has none");
  }
  auto seq = std::make_unique<Seq>();
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError("the engine is shutting down");
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting ||
      waiting_tokens_ + len > options_.max_waiting_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", waiting_.size(),
                                                     " requests, ", waiting_tokens_,
                                                     " prompt tokens waiting); retry later"));
  }
  if (!request.session_id.empty()) {
    ASSIGN_OR_RETURN(seq->session, sessions_.Acquire(request.session_id, request.owner));
    if (seq->session->pending) seq->tokens.push_back(*seq->session->pending);
  }
  seq->tokens.insert(seq->tokens.end(), request.prompt.begin(), request.prompt.end());
  if (seq->tokens.empty()) {
    if (seq->session != nullptr) sessions_.Release(seq->session, std::nullopt);
    return absl::InvalidArgumentError("prompt is empty");
  }
  seq->id = next_id_++;
  seq->sink = std::move(sink);
  seq->sampler.emplace(request.sampling);
  seq->stop.emplace(request.stop);
  if (options_.detokenizer) seq->detok = options_.detokenizer();
  seq->arrival = seq->id;
  seq->waiting_since = step_;
  seq->submitted = absl::Now();
  seq->req = std::move(request);
  waiting_tokens_ += len;
  waiting_.push_back(seq->id);
  const RequestId id = seq->id;
  seqs_.emplace(id, std::move(seq));
  return id;
}

void Engine::Cancel(RequestId id) {
  absl::MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second->cancelled = true;
}

bool Engine::HasWork() const { return !waiting_.empty() || !running_.empty() || stopping_; }

bool Engine::idle() {
  absl::MutexLock lock(&mu_);
  return waiting_.empty() && running_.empty();
}

void Engine::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Engine::HasWork));
      if (stopping_ && waiting_.empty() && running_.empty()) return;
    }
    Step();
  }
}

void Engine::Finish(Seq& s, linfer::Finish why, absl::Status error, StepOutput& out,
                    TokenEvent event) {
  event.request = s.id;
  event.finish = why;
  event.error = std::move(error);
  if (why != Finish::kStop && why != Finish::kLength) event.text += s.stop->Flush();
  const absl::Time now = absl::Now();
  event.usage.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
  event.usage.cached_tokens = s.cached;
  event.usage.completion_tokens = static_cast<int64_t>(s.generated.size());
  if (s.scheduled != absl::InfinitePast()) {
    event.usage.queue_seconds = absl::ToDoubleSeconds(s.scheduled - s.submitted);
  }
  if (s.first_token != absl::InfinitePast()) {
    event.usage.ttft_seconds = absl::ToDoubleSeconds(s.first_token - s.submitted);
  }
  event.usage.total_seconds = absl::ToDoubleSeconds(now - s.submitted);
  ++stats_.finished_total[std::string(FinishName(why))];
  // Release the state: a session keeps it (the last sampled token pending), a one-off frees it.
  if (s.session != nullptr) {
    std::optional<int32_t> pending;
    if (s.computed + 1 == static_cast<int64_t>(s.tokens.size()) && !s.generated.empty()) {
      pending = s.tokens.back();
    }
    sessions_.Release(s.session, pending);
  } else if (s.slot >= 0) {
    pool_.Free(s.slot);
  }
  auto w = std::find(waiting_.begin(), waiting_.end(), s.id);
  if (w != waiting_.end()) {
    waiting_.erase(w);
    waiting_tokens_ -= static_cast<int64_t>(s.req.prompt.size());
  }
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
  out.emits.push_back({&s.sink, std::move(event)});
  // Keep the Seq (and its sink) alive until the events are emitted, outside the lock.
  auto it = seqs_.find(s.id);
  out.done.push_back(std::move(it->second));
  seqs_.erase(it);
}

absl::Status Engine::Admit(Seq& s) {
  if (s.session != nullptr && s.session->tier == Tier::kSlot) {
    s.slot = s.session->slot;
  } else {
    s.slot = pool_.Allocate();
    if (s.slot < 0) return absl::InternalError("no free slot although the plan had one");
    if (s.session != nullptr) {
      absl::Status st = sessions_.Restore(s.session, s.slot);
      if (!st.ok()) {
        pool_.Free(s.slot);
        s.slot = -1;
        return st;
      }
    } else if (!s.parked.empty()) {
      std::memcpy(pool_.data(s.slot), s.parked.data(), s.parked.size() * sizeof(float));
      pool_.position(s.slot) = s.parked_position;
      s.parked.clear();
      s.parked.shrink_to_fit();
    }
  }
  if (s.scheduled == absl::InfinitePast()) {
    s.scheduled = absl::Now();
    s.cached = pool_.position(s.slot);
  }
  return absl::OkStatus();
}

void Engine::Preempt(Seq& s) {
  ++stats_.preemptions_total;
  if (s.session != nullptr) {
    sessions_.Park(s.session);  // slot → host RAM, freeing the slot
  } else {
    const float* d = pool_.data(s.slot);
    s.parked.assign(d, d + pool_.state_floats());
    s.parked_position = pool_.position(s.slot);
    pool_.Free(s.slot);
  }
  s.slot = -1;
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
  waiting_.push_front(s.id);
  s.waiting_since = step_;
}

void Engine::Sample(Seq& s, const float* logits, StepOutput& out) {
  SampleResult r = s.sampler->Sample({logits, static_cast<size_t>(model_->vocab_size())},
                                     s.req.prompt, s.generated);
  s.generated.push_back(r.token);
  s.tokens.push_back(r.token);
  ++stats_.generation_tokens_total;
  if (s.first_token == absl::InfinitePast()) s.first_token = absl::Now();
  const std::string delta = s.detok ? s.detok->Push(r.token) : std::string();
  StopOutput stop = s.stop->Append(r.token, delta);
  TokenEvent event;
  event.request = s.id;
  event.token = r.token;
  event.text = std::move(stop.text);
  event.logprob = r.logprob;
  event.top_logprobs = std::move(r.top_logprobs);
  if (!stop.finished()) {
    out.emits.push_back({&s.sink, std::move(event)});
    return;
  }
  event.stop_token = stop.stop_token_id;
  event.stop_string = std::move(stop.stop_string);
  Finish(s, stop.finish_reason == FinishReason::kStop ? Finish::kStop : Finish::kLength,
         absl::OkStatus(), out, std::move(event));
}

void Engine::Plan(StepOutput& out, std::vector<ScheduledSeq>& batch) {
  ++step_;
  const absl::Time now = absl::Now();
  std::vector<RequestId> ids(waiting_.begin(), waiting_.end());
  ids.insert(ids.end(), running_.begin(), running_.end());
  for (RequestId id : ids) {
    Seq& s = *seqs_.at(id);
    if (s.cancelled || stopping_) {
      Finish(s, Finish::kCancelled, absl::CancelledError("request cancelled"), out);
    } else if (now > s.req.deadline) {
      Finish(s, Finish::kDeadline, absl::DeadlineExceededError("request deadline exceeded"), out);
    }
  }
  SchedInput in;
  in.step = step_;
  auto view = [&](RequestId id, bool has_slot) {
    const Seq& s = *seqs_.at(id);
    return SchedRequest{id,
                        s.req.priority,
                        s.arrival,
                        s.waiting_since,
                        static_cast<int64_t>(s.tokens.size()),
                        s.computed,
                        has_slot};
  };
  for (RequestId id : running_) in.running.push_back(view(id, true));
  for (RequestId id : waiting_) {
    const Seq& s = *seqs_.at(id);
    in.waiting.push_back(view(id, s.session != nullptr && s.session->tier == Tier::kSlot));
  }
  in.free_slots = pool_.free_slots();
  in.idle_session_slots = sessions_.idle_in_slots();
  const StepPlan plan = Schedule(in, options_.scheduler);
  for (int i = 0; i < plan.offload_idle; ++i) sessions_.OffloadIdle();
  for (RequestId id : plan.preempted) Preempt(*seqs_.at(id));
  for (RequestId id : plan.admitted) {
    Seq& s = *seqs_.at(id);
    const bool first = s.scheduled == absl::InfinitePast();
    if (absl::Status st = Admit(s); !st.ok()) {
      Finish(s, Finish::kError, st, out);
      continue;
    }
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    running_.push_back(id);
    if (first) {
      waiting_tokens_ -= static_cast<int64_t>(s.req.prompt.size());
      stats_.prompt_tokens_total += static_cast<int64_t>(s.req.prompt.size());
      stats_.cached_tokens_total += s.cached;
    }
  }
  for (const ScheduledSeq& sched : plan.scheduled) {
    auto it = seqs_.find(sched.id);
    if (it != seqs_.end() && it->second->slot >= 0) batch.push_back(sched);
  }
}

void Engine::Step() {
  StepOutput out;
  std::vector<ScheduledSeq> plan;
  std::vector<SequenceInput> batch;
  const absl::Time t0 = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    Plan(out, plan);
    for (const ScheduledSeq& p : plan) {
      Seq& s = *seqs_.at(p.id);
      batch.emplace_back(absl::MakeConstSpan(s.tokens.data() + s.computed, p.tokens),
                         pool_.Ref(s.slot), pool_.state_floats());
    }
  }
  const absl::Time t1 = absl::Now();
  absl::StatusOr<Tensor> logits = absl::InternalError("empty step");
  if (!batch.empty()) logits = model_->Forward(batch, {RecurrenceMode::kAuto, options_.chunk_size});
  StepRecord record;
  std::function<void(const StepRecord&)> observer;
  {
    absl::MutexLock lock(&mu_);
    const int64_t vocab = model_->vocab_size();
    for (size_t i = 0; i < plan.size(); ++i) {
      Seq& s = *seqs_.at(plan[i].id);
      if (!logits.ok()) {
        Log(LogLevel::kError, absl::StrCat("forward failed: ", logits.status().ToString()));
        Finish(s, Finish::kError, logits.status(), out);
        continue;
      }
      s.computed += plan[i].tokens;
      if (s.computed == static_cast<int64_t>(s.tokens.size())) {
        Sample(s, logits->data<float>() + static_cast<int64_t>(i) * vocab, out);
      }
    }
    record.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    record.scheduler_seconds = absl::ToDoubleSeconds(t1 - t0);
    record.batch_size = static_cast<int>(plan.size());
    for (const ScheduledSeq& p : plan) record.tokens += p.tokens;
    if (!plan.empty()) {
      ++stats_.steps_total;
      stats_.step_tokens_total += record.tokens;
      stats_.step_seconds_total += record.seconds;
      stats_.scheduler_seconds_total += record.scheduler_seconds;
      stats_.last_batch_size = record.batch_size;
      observer = observer_;
    }
  }
  if (observer) observer(record);
  for (Emit& e : out.emits) (*e.sink)(std::move(e.event));
}

absl::Status Engine::CreateSession(const std::string& id, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return sessions_.Create(id, owner);
}

absl::StatusOr<SessionInfo> Engine::GetSession(const std::string& id, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return sessions_.Get(id, owner);
}

std::vector<SessionInfo> Engine::ListSessions(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return sessions_.List(owner);
}

absl::Status Engine::ForkSession(const std::string& src, const std::string& dst,
                                 const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return sessions_.Fork(src, dst, owner);
}

absl::Status Engine::DeleteSession(const std::string& id, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return sessions_.Delete(id, owner);
}

absl::StatusOr<std::string> Engine::ExportSession(const std::string& id, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return sessions_.Export(id, owner);
}

absl::Status Engine::ImportSession(const std::string& id, const std::string& owner,
                                   absl::string_view blob) {
  absl::MutexLock lock(&mu_);
  return sessions_.Import(id, owner, blob);
}

EngineStats Engine::Stats() {
  absl::MutexLock lock(&mu_);
  EngineStats s = stats_;
  s.waiting = static_cast<int>(waiting_.size());
  s.running = static_cast<int>(running_.size());
  s.slots_used = pool_.used_slots();
  s.sessions = sessions_.counts();
  s.sessions_evicted_total = sessions_.evicted();
  return s;
}

void Engine::SetStepObserver(std::function<void(const StepRecord&)> observer) {
  absl::MutexLock lock(&mu_);
  observer_ = std::move(observer);
}

void Engine::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return waiting_.empty() && running_.empty();
    };
    mu_.AwaitWithTimeout(absl::Condition(&drained), grace);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace linfer
