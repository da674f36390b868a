// linfer.v1.Sessions and linfer.v1.Models (callback API on raw bytes, see raw_rpc.h: a request
// that does not parse gets INVALID_ARGUMENT). Each method's comment names its messages.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "linfer/v1/models.grpc.pb.h"
#include "linfer/v1/sessions.grpc.pb.h"
#include "server/service_context.h"

namespace linfer {

using RawSessionsService =
    v1::Sessions::WithRawCallbackMethod_Create<v1::Sessions::WithRawCallbackMethod_Get<
        v1::Sessions::WithRawCallbackMethod_List<v1::Sessions::WithRawCallbackMethod_Fork<
            v1::Sessions::WithRawCallbackMethod_Delete<v1::Sessions::WithRawCallbackMethod_Export<
                v1::Sessions::WithRawCallbackMethod_Import<v1::Sessions::Service>>>>>>>;

using RawModelsService = v1::Models::WithRawCallbackMethod_List<
    v1::Models::WithRawCallbackMethod_Info<v1::Models::Service>>;

// The bytes Export and Import streams hold at once (each keeps its whole blob until the client
// has read or sent all of it): past the limit a new transfer is refused (RESOURCE_EXHAUSTED)
// instead of the server's memory being taken — 40 Export streams read one chunk each held 270 MB,
// 4 unfinished imports 740 MB.
class TransferBudget {
 public:
  explicit TransferBudget(int64_t limit) : limit_(limit) {}
  bool Take(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    if (used_ + bytes > limit_) return false;
    used_ += bytes;
    return true;
  }
  void Give(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    used_ -= bytes;
  }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

class SessionsService final : public RawSessionsService {
 public:
  using Bytes = grpc::ByteBuffer;
  // Transfers may hold `transfer_bytes` at once (0: 1 GiB, or two of the model's largest state
  // blobs).
  SessionsService(ServiceContext* ctx, int64_t transfer_bytes);
  // CreateSessionRequest → Session.
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* c, const Bytes* in,
                                   Bytes* out) override;
  // GetSessionRequest → Session.
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* c, const Bytes* in,
                                Bytes* out) override;
  // ListSessionsRequest → ListSessionsResponse.
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* c, const Bytes* in,
                                 Bytes* out) override;
  // ForkSessionRequest → Session.
  grpc::ServerUnaryReactor* Fork(grpc::CallbackServerContext* c, const Bytes* in,
                                 Bytes* out) override;
  // DeleteSessionRequest → DeleteSessionResponse.
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* c, const Bytes* in,
                                   Bytes* out) override;
  // ExportSessionRequest → stream of StateChunk.
  grpc::ServerWriteReactor<Bytes>* Export(grpc::CallbackServerContext* c, const Bytes* in) override;
  // stream of StateChunk → Session.
  grpc::ServerReadReactor<Bytes>* Import(grpc::CallbackServerContext* c, Bytes* out) override;

 private:
  ServiceContext* ctx_;
  std::shared_ptr<TransferBudget> transfers_;
};

class ModelsService final : public RawModelsService {
 public:
  using Bytes = grpc::ByteBuffer;
  explicit ModelsService(ServiceContext* ctx) : ctx_(ctx) {}
  // ListModelsRequest → ListModelsResponse.
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* c, const Bytes* in,
                                 Bytes* out) override;
  // ModelInfoRequest → ModelInfo.
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* c, const Bytes* in,
                                 Bytes* out) override;

 private:
  ServiceContext* ctx_;
};

}  // namespace linfer
