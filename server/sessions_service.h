// linfer.v1.Sessions and linfer.v1.Models (callback API on raw bytes, see raw_rpc.h: a request
// that does not parse gets INVALID_ARGUMENT). Each method's comment names its messages.
#pragma once

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

class SessionsService final : public RawSessionsService {
 public:
  using Bytes = grpc::ByteBuffer;
  explicit SessionsService(ServiceContext* ctx) : ctx_(ctx) {}
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
