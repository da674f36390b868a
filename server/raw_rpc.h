// The services take their messages as raw bytes and parse them here: gRPC's typed callback
// handlers answer a request that does not parse with UNIMPLEMENTED and no message, while a client
// that sent bad bytes must be told INVALID_ARGUMENT, naming the method.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "server/grpc_status.h"

namespace linfer {

// Parses `bytes` (left unchanged) into `out`. InvalidArgument "<method>: <what> is not a valid
// <Type> protobuf" when they do not parse; `method` is "linfer.v1.Service/Method".
absl::Status ParseMessage(const grpc::ByteBuffer& bytes, absl::string_view method,
                          absl::string_view what, google::protobuf::Message* out);

// The wire bytes of `message` (Internal when it cannot be serialized).
absl::Status SerializeMessage(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// A unary call on raw bytes: parses the request on construction, and serializes the response
// when it finishes OK. Owns itself (deleted in OnDone); Reply may be called from any thread, once.
template <typename Request, typename Response>
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(absl::string_view method, const grpc::ByteBuffer* in, grpc::ByteBuffer* out)
      : out_(out), parsed_(ParseMessage(*in, method, "request", &request_)) {}

  // OK, or the InvalidArgument for bytes that do not parse (then request() is meaningless).
  const absl::Status& parsed() const { return parsed_; }
  const Request& request() const { return request_; }
  Response* response() { return &response_; }

  // Finishes the call: with the response when `status` is OK, else with the status alone.
  void Reply(absl::Status status) {
    if (status.ok()) status = SerializeMessage(response_, out_);
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer* const out_;  // owned by gRPC, alive until OnDone
  Request request_;
  Response response_;
  const absl::Status parsed_;
};

}  // namespace linfer
