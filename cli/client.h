// A blocking linfer.v1 client for the command line: one channel (plaintext or TLS), an optional
// API key sent as `authorization: Bearer KEY`, and a deadline per call. gRPC errors come back as
// absl::Status with the same code and message.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "linfer/v1/generation.grpc.pb.h"
#include "linfer/v1/models.grpc.pb.h"
#include "linfer/v1/sessions.grpc.pb.h"

ABSL_DECLARE_FLAG(std::string, server);

namespace linfer::cli {

// gRPC status → absl::Status (same code and message).
absl::Status FromGrpcStatus(const grpc::Status& status);

// InvalidArgument naming the field (`prefix` + its path, e.g. "stop_strings[1]") when a string
// field of `message` holds bytes that are not UTF-8: the server would refuse the whole message
// as unparsable, naming nothing.
absl::Status CheckUtf8Fields(const google::protobuf::Message& message,
                             const std::string& prefix = "");

struct ClientOptions {
  std::string server;    // HOST:PORT
  std::string api_key;   // empty: no authorization metadata
  std::string tls_ca;    // PEM file of root certificates; empty: plaintext
  double timeout_s = 0;  // deadline of each call; 0: none
};

class Client {
 public:
  // Opens the channel (lazily connected: an unreachable server shows as UNAVAILABLE on the
  // first call). InvalidArgument for an empty server, NotFound for an unreadable --tls_ca.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  // Streams one generation; `on_message` sees every response as it arrives, the final one
  // (finish_reason and usage) included. Returns the final message.
  absl::StatusOr<v1::GenerateResponse> Generate(
      const v1::GenerateRequest& request,
      const std::function<void(const v1::GenerateResponse&)>& on_message);

  absl::StatusOr<v1::Session> CreateSession(const std::string& id);
  absl::StatusOr<v1::Session> GetSession(const std::string& id);
  absl::StatusOr<std::vector<v1::Session>> ListSessions();
  absl::StatusOr<v1::Session> ForkSession(const std::string& source, const std::string& new_id);
  absl::Status DeleteSession(const std::string& id);
  // The whole state blob of a session.
  absl::StatusOr<std::string> ExportSession(const std::string& id);
  // Sends `blob` in chunks; `id` empty lets the server pick the new session's id.
  // The state blob in the file at `path`, streamed in chunks.
  absl::StatusOr<v1::Session> ImportSession(const std::string& id, const std::string& path);
  absl::StatusOr<v1::ModelInfo> ModelInfo();

 private:
  explicit Client(const ClientOptions& options) : options_(options) {}
  // A context with the deadline and the authorization metadata.
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // One unary call `(stub->*rpc)(request)` with a fresh context; the response or the error.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Unary(Stub* stub,
                                 grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                           Response*),
                                 const Request& request) const {
    if (absl::Status st = CheckUtf8Fields(request); !st.ok()) return st;
    std::unique_ptr<grpc::ClientContext> ctx = NewContext();
    Response out;
    absl::Status st = FromGrpcStatus((stub->*rpc)(ctx.get(), request, &out));
    if (!st.ok()) return st;
    return out;
  }

  ClientOptions options_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::Sessions::Stub> sessions_;
  std::unique_ptr<v1::Models::Stub> models_;
};

// A client for --server, --api_key (else $LINFER_API_KEY), --tls_ca and --timeout_s.
absl::StatusOr<std::unique_ptr<Client>> ConnectFromFlags();

// Prints "linfer: error: <CODE>: <message>" (e.g. NOT_FOUND) to stderr and returns 1.
int FailStatus(const absl::Status& status);

}  // namespace linfer::cli
