// linfer.v1.Generation (callback API): Generate streams engine events; Tokenize/Detokenize.
#pragma once

#include <memory>

#include "linfer/v1/generation.grpc.pb.h"
#include "server/service_context.h"

namespace linfer {

class WriteDispatcher;

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(ServiceContext* ctx);
  ~GenerationService() override;

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;

 private:
  ServiceContext* ctx_;
  std::unique_ptr<WriteDispatcher> dispatcher_;  // starts stream writes off the engine thread
};

}  // namespace linfer
