// Sessions and Models RPCs: authenticate, call the engine, convert.
#include "server/sessions_service.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/raw_rpc.h"

namespace linfer {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

// Parses the request of `method` ("linfer.v1.Service/Method"), then runs
// `body(owner, request, response)` on the control pool (session requests wait for the engine
// thread, which must not hold a gRPC callback thread; prompts being prepared must not hold them)
// and finishes the call with its status.
template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* Unary(ServiceContext* ctx, grpc::CallbackServerContext* c,
                                const char* method, const grpc::ByteBuffer* in,
                                grpc::ByteBuffer* out, Body body) {
  auto* call = new UnaryCall<Request, Response>(method, in, out);
  absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
  absl::Status early = owner.status();
  if (early.ok()) early = call->parsed();
  if (early.ok()) {
    auto run = [ctx, call, body, owner = *owner] {
      const absl::Status st = body(owner, call->request(), call->response());
      ctx->metrics->ObserveOutcome(st);
      call->Reply(st);
    };
    if (ctx->control->Post(run)) return call;
    early = absl::ResourceExhaustedError("the server is overloaded");
  }
  ctx->metrics->ObserveOutcome(early);
  call->Reply(early);
  return call;
}

}  // namespace

TransferWatch::TransferWatch(absl::Duration stall_timeout)
    : stall_timeout_(stall_timeout), thread_([this] { Run(); }) {}

TransferWatch::~TransferWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void TransferWatch::Add(grpc::CallbackServerContext* call) {
  absl::MutexLock lock(&mu_);
  last_[call] = absl::Now();
}

void TransferWatch::Touch(grpc::CallbackServerContext* call) {
  absl::MutexLock lock(&mu_);
  if (auto it = last_.find(call); it != last_.end()) it->second = absl::Now();
}

void TransferWatch::Remove(grpc::CallbackServerContext* call) {
  absl::MutexLock lock(&mu_);
  last_.erase(call);
  // Being cancelled on the watch thread: from there (gRPC ran this inline) it goes on at once;
  // from another thread it waits until TryCancel has returned.
  if (std::this_thread::get_id() == thread_.get_id()) return;
  auto done = [this, call]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelling_ != call; };
  mu_.Await(absl::Condition(&done));
}

void TransferWatch::Run() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopped), absl::Milliseconds(500));
    if (stop_) return;
    const absl::Time now = absl::Now();
    std::vector<grpc::CallbackServerContext*> stalled;
    for (const auto& [call, last] : last_) {
      if (now - last > stall_timeout_) stalled.push_back(call);
    }
    for (grpc::CallbackServerContext* call : stalled) {
      // Looked up again: while the lock was released for an earlier one, this call may have
      // ended and a new one taken its address.
      auto it = last_.find(call);
      if (it == last_.end() || absl::Now() - it->second <= stall_timeout_) continue;
      last_.erase(it);
      cancelling_ = call;
      mu_.Unlock();
      call->TryCancel();
      mu_.Lock();
      cancelling_ = nullptr;
    }
  }
}

namespace {

// One Export or Import call's share of the transfer budget and its place in the stall watch,
// both given back when the call's reactor is deleted (OnDone).
class TransferShare {
 public:
  TransferShare(grpc::CallbackServerContext* call, std::shared_ptr<TransferBudget> budget,
                std::shared_ptr<TransferWatch> watch)
      : call_(call), budget_(std::move(budget)), watch_(std::move(watch)) {}
  TransferShare(const TransferShare&) = delete;
  TransferShare& operator=(const TransferShare&) = delete;
  ~TransferShare() {
    watch_->Remove(call_);
    budget_->Give(held_);
  }

  // Takes `bytes` more of the budget, or says why it cannot.
  absl::Status Take(int64_t bytes) {
    if (budget_->Take(bytes)) {
      held_ += bytes;
      return absl::OkStatus();
    }
    if (held_ + bytes > budget_->limit()) {  // never, however long it waits
      return absl::ResourceExhaustedError(
          absl::StrCat("this state blob (", held_ + bytes,
                       " bytes so far) is larger than the budget of all "
                       "session transfers (",
                       budget_->limit(), " bytes, --session_transfer_mb)"));
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("session transfers in flight hold their limit of ", budget_->limit(),
                     " bytes; retry when one has ended"));
  }
  // From Watch to Unwatch, a call that moves no bytes for the stall timeout is cancelled; Touch
  // says it moved some.
  void Watch() { watch_->Add(call_); }
  void Touch() { watch_->Touch(call_); }
  void Unwatch() { watch_->Remove(call_); }

 private:
  grpc::CallbackServerContext* call_;
  std::shared_ptr<TransferBudget> budget_;
  std::shared_ptr<TransferWatch> watch_;
  int64_t held_ = 0;
};

class ExportReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ExportReactor(ServiceContext* ctx, grpc::CallbackServerContext* c, const grpc::ByteBuffer& in,
                std::shared_ptr<TransferBudget> budget, std::shared_ptr<TransferWatch> watch)
      : ctx_(ctx), share_(c, std::move(budget), std::move(watch)) {
    absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
    if (!owner.ok()) {
      Fail(owner.status());
      return;
    }
    v1::ExportSessionRequest req;
    const absl::Status parsed = ParseMessage(in, "linfer.v1.Sessions/Export", "request", &req);
    if (!parsed.ok()) {
      Fail(parsed);
      return;
    }
    // The engine thread copies the state out; a worker waits for it.
    const bool posted = ctx->workers->Post([this, ctx, id = req.session_id(), owner = *owner] {
      absl::StatusOr<std::string> blob = ctx->engine->ExportSession(id, owner);
      if (!blob.ok()) {
        Fail(blob.status());
        return;
      }
      const absl::Status taken = share_.Take(static_cast<int64_t>(blob->size()));
      if (!taken.ok()) {
        Fail(taken);
        return;
      }
      blob_ = *std::move(blob);
      share_.Watch();  // from here on the client must read
      Next();
    });
    if (!posted) Fail(absl::ResourceExhaustedError("the server is overloaded"));
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    share_.Touch();
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (offset_ >= blob_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    v1::StateChunk chunk;
    chunk.set_data(blob_.substr(offset_, kChunkBytes));
    offset_ += kChunkBytes;
    const absl::Status st = SerializeMessage(chunk, &chunk_);
    if (!st.ok()) {
      Fail(st);
      return;
    }
    StartWrite(&chunk_);
  }
  // Finishes with `st`, counted in the errors metric (Metrics::ObserveOutcome).
  void Fail(const absl::Status& st) {
    ctx_->metrics->ObserveOutcome(st);
    Finish(ToGrpcStatus(st));
  }
  ServiceContext* ctx_;
  TransferShare share_;
  std::string blob_;
  size_t offset_ = 0;
  grpc::ByteBuffer chunk_;  // the StateChunk being written
};

class ImportReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ImportReactor(ServiceContext* ctx, grpc::CallbackServerContext* c, grpc::ByteBuffer* out,
                std::shared_ptr<TransferBudget> budget, std::shared_ptr<TransferWatch> watch)
      : ctx_(ctx), call_(c), out_(out), share_(c, std::move(budget), std::move(watch)) {
    share_.Watch();  // the client must keep sending until it half-closes
    absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
    if (!owner.ok()) {
      Fail(owner.status());
      return;
    }
    owner_ = *owner;
    limit_ = static_cast<size_t>(ctx->engine->max_state_blob_bytes());
    StartRead(&chunk_);
  }
  void OnReadDone(bool ok) override {
    if (ok) {
      v1::StateChunk chunk;
      const absl::Status parsed =
          ParseMessage(chunk_, "linfer.v1.Sessions/Import", "a message", &chunk);
      if (!parsed.ok()) {
        Fail(parsed);
        return;
      }
      if (id_.empty()) id_ = chunk.session_id();
      const absl::Status taken = share_.Take(static_cast<int64_t>(chunk.data().size()));
      if (!taken.ok()) {
        Fail(taken);
        return;
      }
      blob_ += chunk.data();
      share_.Touch();
      if (blob_.size() > limit_) {
        Fail(absl::InvalidArgumentError(
            absl::StrCat("state blob exceeds ", limit_, " bytes: not a state of this model")));
        return;
      }
      StartRead(&chunk_);
      return;
    }
    // Reads end this way on the client's half-close, and on a cancellation or a deadline too:
    // a cancelled import imports nothing.
    share_.Unwatch();  // the import itself may take a while: not a stall
    if (call_->IsCancelled()) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    // The engine thread decodes and validates the blob; a worker waits for it.
    if (!ctx_->workers->Post([this] {
          const absl::Status st = Import();
          if (st.ok()) {
            Finish(grpc::Status::OK);
          } else {
            Fail(st);
          }
        })) {
      Fail(absl::ResourceExhaustedError("the server is overloaded"));
    }
  }
  void OnDone() override { delete this; }

 private:
  absl::Status Import() {
    SessionInfo info;
    ASSIGN_OR_RETURN(const std::string id, ctx_->engine->ImportSession(id_, owner_, blob_, &info));
    // Cancelled while it was imported: no one will learn a server-picked id, so that session
    // goes (a named one stays: its client can find it).
    if (call_->IsCancelled() && id_.empty()) {
      (void)ctx_->engine->DeleteSession(id, owner_);
      return absl::CancelledError("the call was cancelled");
    }
    return SerializeMessage(ToProto(info), out_);
  }
  // As ExportReactor's.
  void Fail(const absl::Status& st) {
    ctx_->metrics->ObserveOutcome(st);
    Finish(ToGrpcStatus(st));
  }

  ServiceContext* ctx_;
  grpc::CallbackServerContext* call_;
  grpc::ByteBuffer* out_;  // the Session reply, owned by gRPC
  TransferShare share_;
  std::string owner_, id_, blob_;
  size_t limit_ = 0;
  grpc::ByteBuffer chunk_;  // the StateChunk being read
};

}  // namespace

SessionsService::SessionsService(ServiceContext* ctx, int64_t transfer_bytes,
                                 absl::Duration stall_timeout)
    : ctx_(ctx),
      transfers_(std::make_shared<TransferBudget>(
          transfer_bytes > 0
              ? transfer_bytes
              : std::max<int64_t>(int64_t{1} << 30, 2 * ctx->engine->max_state_blob_bytes()))),
      watch_(std::make_shared<TransferWatch>(stall_timeout)) {}

grpc::ServerUnaryReactor* SessionsService::Create(grpc::CallbackServerContext* c, const Bytes* in,
                                                  Bytes* out) {
  return Unary<v1::CreateSessionRequest, v1::Session>(
      ctx_, c, "linfer.v1.Sessions/Create", in, out,
      [this](const std::string& owner, const v1::CreateSessionRequest& req,
             v1::Session* session) -> absl::Status {
        SessionInfo info;
        RETURN_IF_ERROR(ctx_->engine->CreateSession(req.session_id(), owner, &info).status());
        *session = ToProto(info);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* SessionsService::Get(grpc::CallbackServerContext* c, const Bytes* in,
                                               Bytes* out) {
  return Unary<v1::GetSessionRequest, v1::Session>(
      ctx_, c, "linfer.v1.Sessions/Get", in, out,
      [this](const std::string& owner, const v1::GetSessionRequest& req,
             v1::Session* session) -> absl::Status {
        ASSIGN_OR_RETURN(SessionInfo info, ctx_->engine->GetSession(req.session_id(), owner));
        *session = ToProto(info);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* SessionsService::List(grpc::CallbackServerContext* c, const Bytes* in,
                                                Bytes* out) {
  return Unary<v1::ListSessionsRequest, v1::ListSessionsResponse>(
      ctx_, c, "linfer.v1.Sessions/List", in, out,
      [this](const std::string& owner, const v1::ListSessionsRequest&,
             v1::ListSessionsResponse* list) -> absl::Status {
        ASSIGN_OR_RETURN(std::vector<SessionInfo> sessions, ctx_->engine->ListSessions(owner));
        for (const SessionInfo& s : sessions) *list->add_sessions() = ToProto(s);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* SessionsService::Fork(grpc::CallbackServerContext* c, const Bytes* in,
                                                Bytes* out) {
  return Unary<v1::ForkSessionRequest, v1::Session>(
      ctx_, c, "linfer.v1.Sessions/Fork", in, out,
      [this](const std::string& owner, const v1::ForkSessionRequest& req,
             v1::Session* session) -> absl::Status {
        SessionInfo info;
        RETURN_IF_ERROR(
            ctx_->engine->ForkSession(req.session_id(), req.new_session_id(), owner, &info)
                .status());
        *session = ToProto(info);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* SessionsService::Delete(grpc::CallbackServerContext* c, const Bytes* in,
                                                  Bytes* out) {
  return Unary<v1::DeleteSessionRequest, v1::DeleteSessionResponse>(
      ctx_, c, "linfer.v1.Sessions/Delete", in, out,
      [this](const std::string& owner, const v1::DeleteSessionRequest& req,
             v1::DeleteSessionResponse*) {
        return ctx_->engine->DeleteSession(req.session_id(), owner);
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* SessionsService::Export(grpc::CallbackServerContext* c,
                                                                    const Bytes* in) {
  return new ExportReactor(ctx_, c, *in, transfers_, watch_);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* SessionsService::Import(grpc::CallbackServerContext* c,
                                                                   Bytes* out) {
  return new ImportReactor(ctx_, c, out, transfers_, watch_);
}

namespace {

v1::ModelInfo Describe(ServiceContext* ctx) {
  const Model& m = ctx->engine->model();
  v1::ModelInfo info;
  info.set_name(ctx->model_name);
  info.set_architecture(m.config().model_type);
  info.set_hidden_size(m.config().hidden_size);
  info.set_num_layers(m.config().num_hidden_layers);
  info.set_vocab_size(m.vocab_size());
  info.set_parameters(m.num_parameters());
  info.set_state_bytes_per_session(m.state_bytes());
  info.set_slots(ctx->engine->num_slots());
  info.set_fingerprint(absl::StrFormat("%016x", m.fingerprint()));
  info.set_device(std::string(DeviceName(m.device())));
  info.set_has_tokenizer(ctx->tokenizer != nullptr);
  info.set_weight_dtype(absl::AsciiStrToLower(DTypeName(m.matrix_dtype())));
  info.set_weight_bytes(m.weight_bytes());
  info.set_quantization(m.quantization());
  info.set_fp8_weights(m.fp8_weights());
  return info;
}

}  // namespace

grpc::ServerUnaryReactor* ModelsService::List(grpc::CallbackServerContext* c, const Bytes* in,
                                              Bytes* out) {
  return Unary<v1::ListModelsRequest, v1::ListModelsResponse>(
      ctx_, c, "linfer.v1.Models/List", in, out,
      [this](const std::string&, const v1::ListModelsRequest&, v1::ListModelsResponse* list) {
        *list->add_models() = Describe(ctx_);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ModelsService::Info(grpc::CallbackServerContext* c, const Bytes* in,
                                              Bytes* out) {
  return Unary<v1::ModelInfoRequest, v1::ModelInfo>(
      ctx_, c, "linfer.v1.Models/Info", in, out,
      [this](const std::string&, const v1::ModelInfoRequest& req,
             v1::ModelInfo* info) -> absl::Status {
        if (!req.name().empty() && req.name() != ctx_->model_name) {
          return absl::NotFoundError(absl::StrCat("model '", req.name(), "' is not served here"));
        }
        *info = Describe(ctx_);
        return absl::OkStatus();
      });
}

}  // namespace linfer
