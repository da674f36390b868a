// linfer.v1.Sessions and linfer.v1.Models (callback API on raw bytes, see raw_rpc.h: a request
// that does not parse gets INVALID_ARGUMENT). Each method's comment names its messages.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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

// Cancels Export and Import streams that move no bytes for `stall_timeout` (a client that holds
// one open without reading or sending keeps its blob, and its share of the TransferBudget, for
// ever otherwise). Streams register at start and leave in their OnDone; a thread checks them
// every half second and calls TryCancel (thread-safe; the stream then ends through its own
// callbacks). TryCancel runs without the lock (gRPC may run the stream's callbacks inline, its
// OnDone's Remove among them); a Remove on another thread meanwhile waits for it to return, so
// the call it cancels is never one that has ended.
class TransferWatch {
 public:
  explicit TransferWatch(absl::Duration stall_timeout);
  ~TransferWatch();  // stops the thread
  void Add(grpc::CallbackServerContext* call);
  void Touch(grpc::CallbackServerContext* call);  // bytes moved now
  void Remove(grpc::CallbackServerContext* call);

 private:
  void Run();
  const absl::Duration stall_timeout_;
  absl::Mutex mu_;
  std::map<grpc::CallbackServerContext*, absl::Time> last_ ABSL_GUARDED_BY(mu_);
  grpc::CallbackServerContext* cancelling_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class SessionsService final : public RawSessionsService {
 public:
  using Bytes = grpc::ByteBuffer;
  // Transfers may hold `transfer_bytes` at once (0: 1 GiB, or two of the model's largest state
  // blobs); one that moves no bytes for `stall_timeout` is cancelled.
  SessionsService(ServiceContext* ctx, int64_t transfer_bytes, absl::Duration stall_timeout);
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
  std::shared_ptr<TransferWatch> watch_;
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
