// Protobuf messages to and from gRPC byte buffers, with errors a client can act on.
#include "server/raw_rpc.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace linfer {

absl::Status ParseMessage(const grpc::ByteBuffer& bytes, absl::string_view method,
                          absl::string_view what, google::protobuf::Message* out) {
  out->Clear();
  grpc::ByteBuffer copy(bytes);  // shares the slices (the reader wants a mutable buffer)
  if (copy.Valid()) {            // no buffer at all: the client sent no message
    grpc::ProtoBufferReader reader(&copy);
    if (reader.status().ok() && out->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(method, ": ", what, " is not a valid ",
                                                 out->GetDescriptor()->name(), " protobuf"));
}

absl::Status SerializeMessage(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return absl::InternalError(
        absl::StrCat("cannot serialize a ", message.GetDescriptor()->name(), " message"));
  }
  const grpc::Slice slice(bytes);  // copies: responses are small
  *out = grpc::ByteBuffer(&slice, 1);
  return absl::OkStatus();
}

}  // namespace linfer
