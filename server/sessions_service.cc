// Sessions and Models RPCs: authenticate, call the engine, convert.
#include "server/sessions_service.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/status_macros.h"
#include "server/convert.h"
#include "server/grpc_status.h"

namespace linfer {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

std::string NewSessionId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("s-%016x", rng());
}

// Runs `body` with the caller's owner and finishes the unary call with its status.
template <typename Body>
grpc::ServerUnaryReactor* Unary(ServiceContext* ctx, grpc::CallbackServerContext* c, Body body) {
  grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
  absl::Status st;
  absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
  st = owner.ok() ? body(*owner) : owner.status();
  if (!st.ok()) ctx->metrics->ObserveError(st.code());
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

class ExportReactor : public grpc::ServerWriteReactor<v1::StateChunk> {
 public:
  ExportReactor(ServiceContext* ctx, grpc::CallbackServerContext* c, const std::string& id) {
    absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
    absl::StatusOr<std::string> blob =
        owner.ok() ? ctx->engine->ExportSession(id, *owner) : owner.status();
    if (!blob.ok()) {
      Finish(ToGrpcStatus(blob.status()));
      return;
    }
    blob_ = *std::move(blob);
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (offset_ >= blob_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    chunk_.set_data(blob_.substr(offset_, kChunkBytes));
    offset_ += kChunkBytes;
    StartWrite(&chunk_);
  }
  std::string blob_;
  size_t offset_ = 0;
  v1::StateChunk chunk_;
};

class ImportReactor : public grpc::ServerReadReactor<v1::StateChunk> {
 public:
  ImportReactor(ServiceContext* ctx, grpc::CallbackServerContext* c, v1::Session* out)
      : ctx_(ctx), out_(out) {
    absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
    if (!owner.ok()) {
      Finish(ToGrpcStatus(owner.status()));
      return;
    }
    owner_ = *owner;
    limit_ = static_cast<size_t>(ctx->engine->model().state_bytes()) + 4096;
    StartRead(&chunk_);
  }
  void OnReadDone(bool ok) override {
    if (ok) {
      if (id_.empty()) id_ = chunk_.session_id();
      blob_ += chunk_.data();
      if (blob_.size() > limit_) {
        Finish(ToGrpcStatus(absl::InvalidArgumentError(
            absl::StrCat("state blob exceeds ", limit_, " bytes: not a state of this model"))));
        return;
      }
      StartRead(&chunk_);
      return;
    }
    if (id_.empty()) id_ = NewSessionId();
    absl::Status st = ctx_->engine->ImportSession(id_, owner_, blob_);
    if (st.ok()) {
      absl::StatusOr<SessionInfo> info = ctx_->engine->GetSession(id_, owner_);
      if (info.ok()) *out_ = ToProto(*info);
    }
    Finish(ToGrpcStatus(st));
  }
  void OnDone() override { delete this; }

 private:
  ServiceContext* ctx_;
  v1::Session* out_;
  std::string owner_, id_, blob_;
  size_t limit_ = 0;
  v1::StateChunk chunk_;
};

}  // namespace

grpc::ServerUnaryReactor* SessionsService::Create(grpc::CallbackServerContext* c,
                                                  const v1::CreateSessionRequest* req,
                                                  v1::Session* out) {
  return Unary(ctx_, c, [&](const std::string& owner) -> absl::Status {
    const std::string id = req->session_id().empty() ? NewSessionId() : req->session_id();
    RETURN_IF_ERROR(ctx_->engine->CreateSession(id, owner));
    ASSIGN_OR_RETURN(SessionInfo info, ctx_->engine->GetSession(id, owner));
    *out = ToProto(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SessionsService::Get(grpc::CallbackServerContext* c,
                                               const v1::GetSessionRequest* req, v1::Session* out) {
  return Unary(ctx_, c, [&](const std::string& owner) -> absl::Status {
    ASSIGN_OR_RETURN(SessionInfo info, ctx_->engine->GetSession(req->session_id(), owner));
    *out = ToProto(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SessionsService::List(grpc::CallbackServerContext* c,
                                                const v1::ListSessionsRequest*,
                                                v1::ListSessionsResponse* out) {
  return Unary(ctx_, c, [&](const std::string& owner) -> absl::Status {
    for (const SessionInfo& s : ctx_->engine->ListSessions(owner))
      *out->add_sessions() = ToProto(s);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SessionsService::Fork(grpc::CallbackServerContext* c,
                                                const v1::ForkSessionRequest* req,
                                                v1::Session* out) {
  return Unary(ctx_, c, [&](const std::string& owner) -> absl::Status {
    const std::string dst = req->new_session_id().empty() ? NewSessionId() : req->new_session_id();
    RETURN_IF_ERROR(SessionStore::ValidateId(dst));
    RETURN_IF_ERROR(ctx_->engine->ForkSession(req->session_id(), dst, owner));
    ASSIGN_OR_RETURN(SessionInfo info, ctx_->engine->GetSession(dst, owner));
    *out = ToProto(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SessionsService::Delete(grpc::CallbackServerContext* c,
                                                  const v1::DeleteSessionRequest* req,
                                                  v1::DeleteSessionResponse*) {
  return Unary(ctx_, c, [&](const std::string& owner) {
    return ctx_->engine->DeleteSession(req->session_id(), owner);
  });
}

grpc::ServerWriteReactor<v1::StateChunk>* SessionsService::Export(
    grpc::CallbackServerContext* c, const v1::ExportSessionRequest* req) {
  return new ExportReactor(ctx_, c, req->session_id());
}

grpc::ServerReadReactor<v1::StateChunk>* SessionsService::Import(grpc::CallbackServerContext* c,
                                                                 v1::Session* out) {
  return new ImportReactor(ctx_, c, out);
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
  info.set_device("cpu");
  info.set_has_tokenizer(ctx->tokenizer != nullptr);
  return info;
}

}  // namespace

grpc::ServerUnaryReactor* ModelsService::List(grpc::CallbackServerContext* c,
                                              const v1::ListModelsRequest*,
                                              v1::ListModelsResponse* out) {
  return Unary(ctx_, c, [&](const std::string&) {
    *out->add_models() = Describe(ctx_);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ModelsService::Info(grpc::CallbackServerContext* c,
                                              const v1::ModelInfoRequest* req, v1::ModelInfo* out) {
  return Unary(ctx_, c, [&](const std::string&) -> absl::Status {
    if (!req->name().empty() && req->name() != ctx_->model_name) {
      return absl::NotFoundError(absl::StrCat("model '", req->name(), "' is not served here"));
    }
    *out = Describe(ctx_);
    return absl::OkStatus();
  });
}

}  // namespace linfer
