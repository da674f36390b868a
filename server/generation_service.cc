// Generate: one reactor per stream. Engine events (engine thread) are queued and written one
// message at a time; events that pile up while a write is in flight are merged into one message.
// The reactor finishes only after the engine's final event, so the engine never calls a dead
// sink; a client cancel or disconnect cancels the engine request.
#include "server/generation_service.h"

#include <deque>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/convert.h"
#include "server/grpc_status.h"

namespace linfer {

// Runs reactor write starts on its own thread, so that the engine thread, which produces the
// events, never performs network writes itself.
class WriteDispatcher {
 public:
  WriteDispatcher() : thread_([this] { Run(); }) {}
  ~WriteDispatcher() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Post(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }

 private:
  void Run() {
    for (;;) {
      std::deque<std::function<void()>> batch;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        batch.swap(queue_);
      }
      for (auto& fn : batch) fn();
    }
  }
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

namespace {

class GenerateReactor : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(ServiceContext* ctx, WriteDispatcher* dispatcher,
                  grpc::CallbackServerContext* call, const v1::GenerateRequest* request)
      : ctx_(ctx), dispatcher_(dispatcher), session_id_(request->session_id()) {
    absl::Status st = Start(call, *request);
    if (!st.ok()) {
      ctx_->metrics->ObserveError(st.code());
      Finish(ToGrpcStatus(st));
    }
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) Cancel();  // the client is gone
    WriteNext();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    Cancel();
  }
  void OnDone() override { delete this; }

 private:
  absl::Status Start(grpc::CallbackServerContext* call, const v1::GenerateRequest& in) {
    if (ctx_->draining) return absl::UnavailableError("the server is draining");
    absl::StatusOr<std::string> owner = ctx_->keys->Authenticate(call);
    if (!owner.ok()) return owner.status();
    absl::StatusOr<GenerateRequest> req = ToEngineRequest(in, *ctx_, *owner);
    if (!req.ok()) return req.status();
    if (call->deadline() != std::chrono::system_clock::time_point::max()) {
      req->deadline = absl::FromChrono(call->deadline());
    }
    absl::MutexLock lock(&mu_);
    absl::StatusOr<RequestId> id =
        ctx_->engine->Submit(*std::move(req), [this](TokenEvent e) { OnEvent(std::move(e)); });
    if (!id.ok()) return id.status();
    id_ = *id;
    return absl::OkStatus();
  }

  void Cancel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (id_ != 0 && !final_) ctx_->engine->Cancel(id_);
  }

  // Engine thread.
  void OnEvent(TokenEvent e) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    if (e.token >= 0) {
      if (last_token_ != absl::InfinitePast()) {
        ctx_->metrics->ObserveInterToken(absl::ToDoubleSeconds(now - last_token_));
      }
      last_token_ = now;
    }
    if (e.finish != Finish::kNone) {
      final_ = true;
      ctx_->metrics->ObserveFinished(e.usage);
      if (e.finish == Finish::kStop || e.finish == Finish::kLength) {
        status_ = grpc::Status::OK;
      } else {
        status_ = ToGrpcStatus(e.error.ok() ? absl::CancelledError("cancelled") : e.error);
        ctx_->metrics->ObserveError(e.error.code());
      }
    }
    if (pending_.empty() || !pending_.back().finish_reason().empty()) pending_.emplace_back();
    AppendEvent(e, &pending_.back());
    if (final_ && !session_id_.empty()) pending_.back().set_session_id(session_id_);
    if (!writing_ && !dispatch_queued_) {
      dispatch_queued_ = true;
      dispatcher_->Post([this] {
        absl::MutexLock lock(&mu_);
        dispatch_queued_ = false;
        WriteNext();
      });
    }
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
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (final_) {
      finished_ = true;
      Finish(status_);
    }
  }

  ServiceContext* ctx_;
  WriteDispatcher* dispatcher_;
  const std::string session_id_;
  absl::Mutex mu_;
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse current_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool dispatch_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool final_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace

GenerationService::GenerationService(ServiceContext* ctx)
    : ctx_(ctx), dispatcher_(std::make_unique<WriteDispatcher>()) {}

GenerationService::~GenerationService() = default;

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(ctx_, dispatcher_.get(), context, request);
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const v1::TokenizeRequest* request,
                                                      v1::TokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> owner = ctx_->keys->Authenticate(context);
  if (!owner.ok()) {
    reactor->Finish(ToGrpcStatus(owner.status()));
  } else if (ctx_->tokenizer == nullptr) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError("this model has no tokenizer")));
  } else {
    absl::StatusOr<std::vector<int32_t>> ids =
        ctx_->tokenizer->Encode(request->text(), request->add_special_tokens());
    if (ids.ok()) {
      response->mutable_token_ids()->Add(ids->begin(), ids->end());
      reactor->Finish(grpc::Status::OK);
    } else {
      reactor->Finish(
          ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat("text: ", ids.status().message()))));
    }
  }
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const v1::DetokenizeRequest* request,
                                                        v1::DetokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> owner = ctx_->keys->Authenticate(context);
  if (!owner.ok()) {
    reactor->Finish(ToGrpcStatus(owner.status()));
    return reactor;
  }
  if (ctx_->tokenizer == nullptr) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError("this model has no tokenizer")));
    return reactor;
  }
  const int64_t vocab = ctx_->engine->model().vocab_size();
  for (int i = 0; i < request->token_ids_size(); ++i) {
    if (request->token_ids(i) < 0 || request->token_ids(i) >= vocab) {
      reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "token_ids[", i, "] = ", request->token_ids(i), " is outside [0, ", vocab, ")"))));
      return reactor;
    }
  }
  std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  absl::StatusOr<std::string> text = ctx_->tokenizer->Decode(ids, request->skip_special_tokens());
  if (text.ok()) response->set_text(*std::move(text));
  reactor->Finish(ToGrpcStatus(text.status()));
  return reactor;
}

}  // namespace linfer
