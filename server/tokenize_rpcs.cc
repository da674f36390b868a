// Generation.Tokenize / Detokenize: run on the worker pool (a 10 MB text must not hold a gRPC
// callback thread), with bounded input.
#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/generation_service.h"
#include "server/grpc_status.h"
#include "server/raw_rpc.h"

namespace linfer {
namespace {

// Authenticates and checks that the request parsed, then runs `body(request, response)` on the
// worker pool and finishes the call with its status.
template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* OnWorker(ServiceContext* ctx, grpc::CallbackServerContext* c,
                                   UnaryCall<Request, Response>* call, Body body) {
  absl::StatusOr<std::string> owner = ctx->keys->Authenticate(c);
  if (!owner.ok()) {
    call->Reply(owner.status());
  } else if (!call->parsed().ok()) {
    ctx->metrics->ObserveOutcome(call->parsed());
    call->Reply(call->parsed());
  } else if (ctx->tokenizer == nullptr) {
    call->Reply(absl::FailedPreconditionError("this model has no tokenizer"));
  } else if (!ctx->workers->Post([ctx, call, body] {
               const absl::Status st = body(call->request(), call->response());
               ctx->metrics->ObserveOutcome(st);
               call->Reply(st);
             })) {
    call->Reply(absl::ResourceExhaustedError("the server is overloaded"));
  }
  return call;
}

// A response gRPC would refuse to send (its own error reads "Sent message larger than max"), said
// by name: OUT_OF_RANGE, as no retry can help.
absl::Status FitsAMessage(const ServiceContext& ctx, const google::protobuf::Message& response,
                          absl::string_view what) {
  const size_t bytes = response.ByteSizeLong();
  if (static_cast<int64_t>(bytes) <= ctx.max_message_bytes) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("the response (", what, ") would be ", bytes,
                                            " bytes, more than a message may hold (",
                                            ctx.max_message_bytes, "): send less at a time"));
}

}  // namespace

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  ServiceContext* ctx = ctx_;
  auto* call = new UnaryCall<v1::TokenizeRequest, v1::TokenizeResponse>(
      "linfer.v1.Generation/Tokenize", in, out);
  return OnWorker(
      ctx_, context, call,
      [ctx](const v1::TokenizeRequest& request, v1::TokenizeResponse* response) -> absl::Status {
        if (static_cast<int64_t>(request.text().size()) > ctx->max_prompt_bytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "text: ", request.text().size(), " bytes is more than this server accepts (",
              ctx->max_prompt_bytes, ")"));
        }
        absl::StatusOr<std::vector<int32_t>> ids =
            ctx->tokenizer->Encode(request.text(), request.add_special_tokens());
        if (!ids.ok())
          return absl::InvalidArgumentError(absl::StrCat("text: ", ids.status().message()));
        response->mutable_token_ids()->Add(ids->begin(), ids->end());
        return FitsAMessage(*ctx, *response, absl::StrCat(ids->size(), " token ids"));
      });
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* in,
                                                        grpc::ByteBuffer* out) {
  ServiceContext* ctx = ctx_;
  auto* call = new UnaryCall<v1::DetokenizeRequest, v1::DetokenizeResponse>(
      "linfer.v1.Generation/Detokenize", in, out);
  return OnWorker(
      ctx_, context, call,
      [ctx](const v1::DetokenizeRequest& request,
            v1::DetokenizeResponse* response) -> absl::Status {
        const int64_t vocab = ctx->engine->model().vocab_size();
        for (int i = 0; i < request.token_ids_size(); ++i) {
          if (request.token_ids(i) < 0 || request.token_ids(i) >= vocab) {
            return absl::InvalidArgumentError(absl::StrCat(
                "token_ids[", i, "] = ", request.token_ids(i), " is outside [0, ", vocab, ")"));
          }
        }
        std::vector<int32_t> ids(request.token_ids().begin(), request.token_ids().end());
        absl::StatusOr<std::string> text =
            ctx->tokenizer->Decode(ids, request.skip_special_tokens());
        if (!text.ok()) return text.status();
        response->set_text(*std::move(text));
        return FitsAMessage(*ctx, *response, "the text");
      });
}

}  // namespace linfer
