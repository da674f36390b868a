// linfer.v1.Generation (callback API): Generate streams engine events; Tokenize/Detokenize.
#pragma once

#include "linfer/v1/generation.grpc.pb.h"
#include "server/service_context.h"

namespace linfer {

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(ServiceContext* ctx) : ctx_(ctx) {}

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
};

}  // namespace linfer
