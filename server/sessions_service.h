// linfer.v1.Sessions and linfer.v1.Models (callback API).
#pragma once

#include "linfer/v1/models.grpc.pb.h"
#include "linfer/v1/sessions.grpc.pb.h"
#include "server/service_context.h"

namespace linfer {

class SessionsService final : public v1::Sessions::CallbackService {
 public:
  explicit SessionsService(ServiceContext* ctx) : ctx_(ctx) {}
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* c,
                                   const v1::CreateSessionRequest* req, v1::Session* out) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* c, const v1::GetSessionRequest* req,
                                v1::Session* out) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* c, const v1::ListSessionsRequest* req,
                                 v1::ListSessionsResponse* out) override;
  grpc::ServerUnaryReactor* Fork(grpc::CallbackServerContext* c, const v1::ForkSessionRequest* req,
                                 v1::Session* out) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* c,
                                   const v1::DeleteSessionRequest* req,
                                   v1::DeleteSessionResponse* out) override;
  grpc::ServerWriteReactor<v1::StateChunk>* Export(grpc::CallbackServerContext* c,
                                                   const v1::ExportSessionRequest* req) override;
  grpc::ServerReadReactor<v1::StateChunk>* Import(grpc::CallbackServerContext* c,
                                                  v1::Session* out) override;

 private:
  ServiceContext* ctx_;
};

class ModelsService final : public v1::Models::CallbackService {
 public:
  explicit ModelsService(ServiceContext* ctx) : ctx_(ctx) {}
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* c, const v1::ListModelsRequest* req,
                                 v1::ListModelsResponse* out) override;
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* c, const v1::ModelInfoRequest* req,
                                 v1::ModelInfo* out) override;

 private:
  ServiceContext* ctx_;
};

}  // namespace linfer
