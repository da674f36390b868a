// Generate: one reactor per stream. Request preparation (tokenization, session lookup) runs on
// the worker pool; engine events (engine thread) are queued and written one message at a time,
// merging events that pile up while a write is in flight. A client that stops reading pauses its
// sequence once its backlog passes a high-water mark and is cancelled when no write completes for
// the stall timeout, so it can hold neither memory nor its slot forever. The reactor finishes
// only after the engine's final event, so the engine never calls a dead sink.
#include "server/generation_service.h"

#include <deque>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/raw_rpc.h"
#include "server/request_log.h"

namespace linfer {

constexpr size_t kHighWaterBytes = 1 << 20;   // pause generation above this backlog
constexpr size_t kLowWaterBytes = 256 << 10;  // resume below this
// A cancel this close to the call's deadline is its deadline: gRPC rounds the timeout it sends up
// (to the millisecond below 27 hours), and the client's timer may fire before the server's.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(50);

class GenerateReactor;

// Starts reactor writes on its own thread (so the engine thread, which produces the events, never
// performs network writes), and watches streams for stalled clients.
class WriteDispatcher {
 public:
  explicit WriteDispatcher(absl::Duration stall_timeout);
  ~WriteDispatcher();
  void Post(std::function<void()> fn);
  void Register(GenerateReactor* r);
  void Unregister(GenerateReactor* r);

 private:
  void Run();
  void Watch();
  const absl::Duration stall_timeout_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::set<GenerateReactor*> streams_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_watch_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_;
};

class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(ServiceContext* ctx, WriteDispatcher* dispatcher,
                  grpc::CallbackServerContext* call, const grpc::ByteBuffer& request)
      : ctx_(ctx), dispatcher_(dispatcher), call_(call) {
    dispatcher_->Register(this);
    absl::Status st = Start(request);
    if (!st.ok()) Fail(st);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    backlog_ -= current_.ByteSizeLong();
    last_progress_ = absl::Now();
    if (!ok) Cancel();  // the client is gone
    if (paused_ && backlog_ < kLowWaterBytes) {
      paused_ = false;
      ctx_->engine->SetPaused(id_, false);
    }
    WriteNext();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    Cancel();
  }
  void OnDone() override {
    dispatcher_->Unregister(this);
    { absl::MutexLock lock(&mu_); }  // whoever called Finish has let go of the reactor
    delete this;
  }

  // Watchdog (dispatcher thread): a write outstanding for longer than `timeout` with no
  // progress means the client stopped reading; cancel its request, which frees its slot and
  // stops the backlog from growing (the stream ends when the client reads or goes away).
  void CheckStalled(absl::Time now, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!writing_ || abandoned_ || now - last_progress_ < timeout) return;
    abandoned_ = true;
    Cancel();
  }

 private:
  absl::Status Start(const grpc::ByteBuffer& bytes) {
    if (ctx_->draining) return absl::UnavailableError("the server is draining");
    absl::StatusOr<std::string> owner = ctx_->keys->Authenticate(call_);
    if (!owner.ok()) return owner.status();
    RETURN_IF_ERROR(ParseMessage(bytes, "linfer.v1.Generation/Generate", "request", &request_));
    // The request message lives as long as the reactor; preparation may tokenize megabytes of
    // text, so it runs on the worker pool, never on this callback thread.
    const bool posted = ctx_->workers->Post([this, owner = *owner] {
      absl::Status st = Submit(request_, owner);
      if (!st.ok()) Fail(st);
    });
    if (!posted) return absl::ResourceExhaustedError("the server is overloaded; retry later");
    return absl::OkStatus();
  }

  absl::Status Submit(const v1::GenerateRequest& in, const std::string& owner) {
    absl::StatusOr<GenerateRequest> req = ToEngineRequest(in, *ctx_, owner);
    if (!req.ok()) return GrpcTerms(req.status());
    if (call_->deadline() != std::chrono::system_clock::time_point::max()) {
      req->deadline = absl::FromChrono(call_->deadline());
    }
    absl::MutexLock lock(&mu_);
    if (cancelled_) {
      // gRPC cancels a call whose deadline passes: said as such (and counted so).
      if (absl::Now() >= req->deadline) {
        return absl::DeadlineExceededError("the deadline passed while the request was prepared");
      }
      return absl::CancelledError("cancelled by the client");
    }
    absl::StatusOr<RequestId> id =
        ctx_->engine->Submit(*std::move(req), [this](TokenEvent e) { OnEvent(std::move(e)); });
    if (!id.ok()) return GrpcTerms(id.status());
    id_ = *id;
    return absl::OkStatus();
  }

  void Fail(const absl::Status& st) {
    ctx_->metrics->ObserveOutcome(st);  // not a missing key or the client's cancel
    absl::MutexLock lock(&mu_);
    final_ = true;
    status_ = ToGrpcStatus(st);
    WriteNext();
  }

  // At (or within a hair of) the call's deadline, whichever side's timer fired and whether the
  // call or its write ended first, the request ends as a deadline, not as a client's cancel.
  void Cancel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (id_ == 0 || final_) return;
    const auto deadline = call_->deadline();
    ctx_->engine->Cancel(id_, deadline != std::chrono::system_clock::time_point::max() &&
                                  absl::Now() + kDeadlineSlack >= absl::FromChrono(deadline));
  }

  // Engine thread. The dispatcher is posted to after the lock is released (the dispatcher's
  // watchdog locks reactors while holding its own lock); a queued dispatch keeps the reactor
  // from finishing, so it is alive when the post lands.
  void OnEvent(TokenEvent e) {
    if (Record(std::move(e))) {
      dispatcher_->Post([this] {
        absl::MutexLock lock(&mu_);
        dispatch_queued_ = false;
        WriteNext();
      });
    }
  }

  // Queues the event; true when a write must be dispatched.
  bool Record(TokenEvent e) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    if (e.token >= 0) {
      if (last_token_ != absl::InfinitePast()) {
        ctx_->metrics->ObserveInterToken(absl::ToDoubleSeconds(now - last_token_));
      } else {
        ctx_->metrics->ObserveFirstToken(e.usage.queue_seconds, e.usage.ttft_seconds);
      }
      last_token_ = now;
    }
    if (e.finish != Finish::kNone) {
      final_ = true;
      ctx_->metrics->ObserveFinished(e.usage);
      if (ctx_->log_requests) LogRequest("grpc", id_, request_.session_id(), e);
      if (e.finish == Finish::kStop || e.finish == Finish::kLength) {
        status_ = grpc::Status::OK;
      } else if (abandoned_) {
        status_ = ToGrpcStatus(absl::ResourceExhaustedError(
            "the client did not read the stream; the request was cancelled"));
      } else {
        status_ =
            ToGrpcStatus(e.error.ok() ? absl::CancelledError("cancelled") : GrpcTerms(e.error));
        if (e.finish != Finish::kCancelled) ctx_->metrics->ObserveError(e.error.code());
      }
    }
    if (pending_.empty() || !pending_.back().finish_reason().empty()) pending_.emplace_back();
    const size_t before = pending_.back().ByteSizeLong();
    AppendEvent(e, &pending_.back());
    if (final_ && !request_.session_id().empty()) {
      pending_.back().set_session_id(request_.session_id());
      if (e.session_end) pending_.back().set_session_tokens(e.session_end->position);
    }
    backlog_ += pending_.back().ByteSizeLong() - before;
    if (!paused_ && !final_ && backlog_ > kHighWaterBytes) {
      paused_ = true;
      ctx_->engine->SetPaused(id_, true);
    }
    if (writing_ || dispatch_queued_) return false;
    dispatch_queued_ = true;
    return true;
  }

  // Starts the next write, or finishes. Never finishes while a dispatched WriteNext is queued
  // (that one will finish instead), so the reactor outlives every queued call.
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || dispatch_queued_) return;
    if (final_ && !status_.ok()) {  // cancelled / deadline / error: no more messages
      finished_ = true;
      Finish(status_);
      return;
    }
    if (!pending_.empty()) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      if (!SerializeMessage(current_, &current_bytes_).ok()) {
        // Only a message over protobuf's 2 GiB limit fails (the backlog bound keeps them far
        // smaller): drop it and cancel; the engine's final event ends the stream.
        backlog_ -= current_.ByteSizeLong();
        Cancel();
        WriteNext();
        return;
      }
      writing_ = true;
      last_progress_ = absl::Now();
      StartWrite(&current_bytes_);
      return;
    }
    if (final_) {
      finished_ = true;
      Finish(status_);
    }
  }

  ServiceContext* ctx_;
  WriteDispatcher* dispatcher_;
  grpc::CallbackServerContext* call_;
  v1::GenerateRequest request_;  // parsed once in the constructor, then read-only
  absl::Mutex mu_;
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse current_;  // the message being written, and its bytes
  grpc::ByteBuffer current_bytes_;
  size_t backlog_ ABSL_GUARDED_BY(mu_) = 0;  // bytes queued or being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool dispatch_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool final_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

WriteDispatcher::WriteDispatcher(absl::Duration stall_timeout)
    : stall_timeout_(stall_timeout), thread_([this] { Run(); }) {}

WriteDispatcher::~WriteDispatcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void WriteDispatcher::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void WriteDispatcher::Register(GenerateReactor* r) {
  absl::MutexLock lock(&mu_);
  streams_.insert(r);
}

void WriteDispatcher::Unregister(GenerateReactor* r) {
  absl::MutexLock lock(&mu_);
  // A reactor being checked by the watchdog stays alive until the check is over.
  auto not_watching = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !watching_; };
  mu_.Await(absl::Condition(&not_watching));
  streams_.erase(r);
}

void WriteDispatcher::Watch() {
  const absl::Time now = absl::Now();
  std::vector<GenerateReactor*> streams;
  {
    absl::MutexLock lock(&mu_);
    if (now - last_watch_ < absl::Milliseconds(500)) return;
    last_watch_ = now;
    streams.assign(streams_.begin(), streams_.end());
    watching_ = true;
  }
  // Without the dispatcher lock: reactors take their own lock and post to the dispatcher.
  for (GenerateReactor* r : streams) r->CheckStalled(now, stall_timeout_);
  absl::MutexLock lock(&mu_);
  watching_ = false;
}

void WriteDispatcher::Run() {
  for (;;) {
    std::deque<std::function<void()>> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(500));
      if (stop_ && queue_.empty()) return;
      batch.swap(queue_);
    }
    for (auto& fn : batch) fn();
    Watch();
  }
}

GenerationService::GenerationService(ServiceContext* ctx, absl::Duration stall_timeout)
    : ctx_(ctx), dispatcher_(std::make_unique<WriteDispatcher>(stall_timeout)) {}

GenerationService::~GenerationService() = default;

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GenerateReactor(ctx_, dispatcher_.get(), context, *request);
}

}  // namespace linfer
