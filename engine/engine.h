// The engine: one thread owns the model and runs steps; submitters get a RequestId and receive
// TokenEvents through their sink. Sessions (persistent states) are managed here too. Every
// public method is thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/session_store.h"
#include "engine/state_pool.h"
#include "models/model.h"

namespace linfer {

struct EngineOptions {
  int64_t state_memory_bytes = int64_t{1} << 30;  // slot pool budget
  int max_slots = 0;                              // > 0 caps the slot count
  TierOptions tiers;
  SchedulerOptions scheduler;
  int max_waiting = 1024;                // queued requests beyond this: ResourceExhausted
  int64_t max_waiting_tokens = 1 << 22;  // queued prompt tokens beyond this: ResourceExhausted
  int chunk_size = 64;                   // recurrence chunk size
  DetokenizerFactory detokenizer;        // null: no text (and no stop strings)
};

// Counters (monotonic) and gauges for the metrics layer.
struct EngineStats {
  int waiting = 0, running = 0;
  int slots_used = 0, slots_total = 0;
  int64_t state_bytes_per_sequence = 0;
  TierCounts sessions;
  int64_t sessions_evicted_total = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0, cached_tokens_total = 0;
  int64_t preemptions_total = 0;
  std::map<std::string, int64_t> finished_total;  // by FinishName
  int64_t steps_total = 0, step_tokens_total = 0;
  double step_seconds_total = 0, scheduler_seconds_total = 0;
  int last_batch_size = 0;
};

// Per step, for histograms (called on the engine thread).
struct StepRecord {
  double seconds = 0, scheduler_seconds = 0;
  int batch_size = 0;
  int64_t tokens = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        EngineOptions options);
  ~Engine();  // Stop()s

  const Model& model() const { return *model_; }
  int num_slots() const { return num_slots_; }

  // Validates and queues. Errors: InvalidArgument (names the field), NotFound (session),
  // FailedPrecondition (session busy), ResourceExhausted (queue full), Unavailable (stopping).
  absl::StatusOr<RequestId> Submit(GenerateRequest request, EventSink sink);
  // Cancels at the next step; the request's final event has Finish::kCancelled. No-op if done.
  void Cancel(RequestId id);

  absl::Status CreateSession(const std::string& id, const std::string& owner);
  absl::StatusOr<SessionInfo> GetSession(const std::string& id, const std::string& owner);
  std::vector<SessionInfo> ListSessions(const std::string& owner);
  absl::Status ForkSession(const std::string& src, const std::string& dst,
                           const std::string& owner);
  absl::Status DeleteSession(const std::string& id, const std::string& owner);
  absl::StatusOr<std::string> ExportSession(const std::string& id, const std::string& owner);
  absl::Status ImportSession(const std::string& id, const std::string& owner,
                             absl::string_view blob);

  EngineStats Stats();
  void SetStepObserver(std::function<void(const StepRecord&)> observer);

  // Stops accepting, lets queued and running requests finish for up to `grace`, then cancels
  // the rest and joins the engine thread. Idempotent.
  void Stop(absl::Duration grace = absl::ZeroDuration());
  bool idle();  // nothing queued or running

 private:
  struct Seq;
  Engine(std::unique_ptr<Model> model, EngineOptions options, int slots);
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Emit {
    EventSink* sink;
    TokenEvent event;
  };
  struct StepOutput {  // events to emit after the lock is released, and finished requests
    std::vector<Emit> emits;
    std::vector<std::unique_ptr<Seq>> done;
  };
  // One step: plan under the lock, forward without it, then sample and emit.
  void Step();
  void Plan(StepOutput& out, std::vector<ScheduledSeq>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Seq& s, linfer::Finish why, absl::Status error, StepOutput& out,
              TokenEvent event = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Admit(Seq& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Preempt(Seq& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Sample(Seq& s, const float* logits, StepOutput& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  const int num_slots_;
  absl::Mutex mu_;
  StatePool pool_ ABSL_GUARDED_BY(mu_);
  SessionStore sessions_ ABSL_GUARDED_BY(mu_);
  std::map<RequestId, std::unique_ptr<Seq>> seqs_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> running_ ABSL_GUARDED_BY(mu_);
  std::deque<RequestId> waiting_ ABSL_GUARDED_BY(mu_);
  int64_t waiting_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::function<void(const StepRecord&)> observer_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace linfer
