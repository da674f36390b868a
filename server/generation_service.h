// linfer.v1.Generation (callback API on raw bytes, see raw_rpc.h): Generate streams engine events;
// Tokenize/Detokenize.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "linfer/v1/generation.grpc.pb.h"
#include "server/service_context.h"

namespace linfer {

class WriteDispatcher;

// Every method takes raw bytes, so that a request that does not parse gets INVALID_ARGUMENT.
using RawGenerationService =
    v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::WithRawCallbackMethod_Tokenize<
        v1::Generation::WithRawCallbackMethod_Detokenize<v1::Generation::Service>>>;

class GenerationService final : public RawGenerationService {
 public:
  // A stream whose client reads nothing for `stall_timeout` has its request cancelled.
  GenerationService(ServiceContext* ctx, absl::Duration stall_timeout);
  ~GenerationService() override;

  // GenerateRequest → stream of GenerateResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  // TokenizeRequest → TokenizeResponse.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // DetokenizeRequest → DetokenizeResponse.
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  ServiceContext* ctx_;
  std::unique_ptr<WriteDispatcher> dispatcher_;  // starts stream writes off the engine thread
};

}  // namespace linfer
