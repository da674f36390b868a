// The command-line client's blocking calls over the linfer.v1 services.
#include "cli/client.h"

#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "engine/session_store.h"
#include "models/tokenizer/utf8.h"
#include "server/tls_check.h"

ABSL_FLAG(std::string, server, "",
          "HOST:PORT of a linfer server: generate, chat and sessions talk to it");
ABSL_FLAG(std::string, api_key, "", "API key for the server (default: $LINFER_API_KEY)");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificates: connect with TLS (default: plaintext)");
ABSL_FLAG(double, timeout_s, 0, "Deadline of each call to the server, seconds (0 or inf: none)");

namespace linfer::cli {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
constexpr int kMaxMessageBytes = 64 << 20;
constexpr int64_t kMaxPemBytes = 16 << 20;  // a certificate bundle

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(path, kMaxPemBytes, FileKinds::kAlsoStreams);
  if (!pem.ok())
    return absl::Status(pem.status().code(), absl::StrCat("--tls_ca: ", pem.status().message()));
  RETURN_IF_ERROR(CheckPemCertificates("--tls_ca", path, *pem));
  return pem;
}

}  // namespace

absl::Status CheckUtf8Fields(const google::protobuf::Message& message, const std::string& prefix) {
  const google::protobuf::Reflection* r = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(message, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string name =
          absl::StrCat(prefix, f->name(), f->is_repeated() ? absl::StrCat("[", i, "]") : "");
      if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& s = f->is_repeated()
                                   ? r->GetRepeatedStringReference(message, f, i, &scratch)
                                   : r->GetStringReference(message, f, &scratch);
        if (absl::Status st = tokenizer::ValidateUtf8(s); !st.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(name, ": ", st.message()));
        }
      } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        const google::protobuf::Message& m =
            f->is_repeated() ? r->GetRepeatedMessage(message, f, i) : r->GetMessage(message, f);
        RETURN_IF_ERROR(CheckUtf8Fields(m, absl::StrCat(name, ".")));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

int FailStatus(const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  std::fprintf(stderr, "linfer: error: %s: %.*s\n", code.c_str(),
               static_cast<int>(status.message().size()), status.message().data());
  return 1;
}

absl::StatusOr<std::unique_ptr<Client>> ConnectFromFlags() {
  ClientOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  o.api_key = absl::GetFlag(FLAGS_api_key);
  if (o.api_key.empty()) {
    const char* env = std::getenv("LINFER_API_KEY");
    if (env != nullptr) o.api_key = env;
  }
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  return Client::Connect(o);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("--server HOST:PORT is required");
  if (!(options.timeout_s >= 0)) return absl::InvalidArgumentError("--timeout_s must be ≥ 0");
  // It travels in a header: gRPC takes printable ASCII there (and aborts the process on the rest).
  for (size_t i = 0; i < options.api_key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(options.api_key[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the API key (--api_key or $LINFER_API_KEY) must be printable ASCII: byte %d is 0x%02x",
          i, c));
    }
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options.tls_ca.empty()) {
    absl::StatusOr<std::string> pem = ReadPem(options.tls_ca);
    if (!pem.ok()) return pem.status();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *pem;
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.server, creds, args);
  std::unique_ptr<Client> c(new Client(options));
  c->generation_ = v1::Generation::NewStub(channel);
  c->sessions_ = v1::Sessions::NewStub(channel);
  c->models_ = v1::Models::NewStub(channel);
  return c;
}

std::unique_ptr<grpc::ClientContext> Client::NewContext() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  // Beyond about 31 years (∞ too) there is no deadline: the product below would overflow.
  if (options_.timeout_s > 0 && options_.timeout_s < 1e9) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(options_.timeout_s * 1e6)));
  }
  if (!options_.api_key.empty()) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options_.api_key));
  }
  return ctx;
}

absl::StatusOr<v1::GenerateResponse> Client::Generate(
    const v1::GenerateRequest& request,
    const std::function<void(const v1::GenerateResponse&)>& on_message) {
  RETURN_IF_ERROR(CheckUtf8Fields(request));
  std::unique_ptr<grpc::ClientContext> ctx = NewContext();
  // Gateways route a session to the replica that holds its state by this header (deploy/k8s).
  // Only a valid id (else the server names the problem; gRPC would abort on a header's bytes).
  if (!request.session_id().empty() && SessionStore::ValidateId(request.session_id()).ok()) {
    ctx->AddMetadata("x-session-id", request.session_id());
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      generation_->Generate(ctx.get(), request);
  v1::GenerateResponse message, last;
  while (reader->Read(&message)) {
    on_message(message);
    last = std::move(message);
    message.Clear();
  }
  absl::Status st = FromGrpcStatus(reader->Finish());
  if (!st.ok()) return st;
  if (last.finish_reason().empty()) {
    return absl::InternalError("the stream ended without a final message");
  }
  return last;
}

absl::StatusOr<v1::Session> Client::CreateSession(const std::string& id) {
  v1::CreateSessionRequest req;
  req.set_session_id(id);
  return Unary(sessions_.get(), &v1::Sessions::Stub::Create, req);
}

absl::StatusOr<v1::Session> Client::GetSession(const std::string& id) {
  v1::GetSessionRequest req;
  req.set_session_id(id);
  return Unary(sessions_.get(), &v1::Sessions::Stub::Get, req);
}

absl::StatusOr<std::vector<v1::Session>> Client::ListSessions() {
  absl::StatusOr<v1::ListSessionsResponse> out =
      Unary(sessions_.get(), &v1::Sessions::Stub::List, v1::ListSessionsRequest());
  if (!out.ok()) return out.status();
  return std::vector<v1::Session>(out->sessions().begin(), out->sessions().end());
}

absl::StatusOr<v1::Session> Client::ForkSession(const std::string& source,
                                                const std::string& new_id) {
  v1::ForkSessionRequest req;
  req.set_session_id(source);
  req.set_new_session_id(new_id);
  return Unary(sessions_.get(), &v1::Sessions::Stub::Fork, req);
}

absl::Status Client::DeleteSession(const std::string& id) {
  v1::DeleteSessionRequest req;
  req.set_session_id(id);
  return Unary(sessions_.get(), &v1::Sessions::Stub::Delete, req).status();
}

absl::StatusOr<std::string> Client::ExportSession(const std::string& id) {
  std::unique_ptr<grpc::ClientContext> ctx = NewContext();
  v1::ExportSessionRequest req;
  req.set_session_id(id);
  RETURN_IF_ERROR(CheckUtf8Fields(req));
  std::unique_ptr<grpc::ClientReader<v1::StateChunk>> reader = sessions_->Export(ctx.get(), req);
  std::string blob;
  v1::StateChunk chunk;
  while (reader->Read(&chunk)) blob += chunk.data();
  absl::Status st = FromGrpcStatus(reader->Finish());
  if (!st.ok()) return st;
  return blob;
}

absl::StatusOr<v1::Session> Client::ImportSession(const std::string& id, const std::string& path) {
  // Read and sent a chunk at a time: a file of any size costs one chunk of memory, and the
  // server refuses what is larger than its model's states. A pipe is read as `cat` reads it
  // (`linfer sessions export ... --file /dev/stdout | ... import --file /dev/stdin`).
  v1::StateChunk head;
  head.set_session_id(id);
  RETURN_IF_ERROR(CheckUtf8Fields(head));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  struct stat file {};
  if (::fstat(fd, &file) != 0 ||
      !(S_ISREG(file.st_mode) || S_ISFIFO(file.st_mode) || S_ISCHR(file.st_mode))) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a file or a pipe"));
  }
  std::unique_ptr<grpc::ClientContext> ctx = NewContext();
  v1::Session out;
  std::unique_ptr<grpc::ClientWriter<v1::StateChunk>> writer = sessions_->Import(ctx.get(), &out);
  std::string piece(kChunkBytes, '\0');
  absl::Status read_error;
  for (bool first = true;; first = false) {  // at least one chunk, which names the session
    ssize_t n;
    do {
      n = ::read(fd, piece.data(), piece.size());
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      read_error =
          absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
      ctx->TryCancel();
      break;
    }
    if (n == 0 && !first) break;
    v1::StateChunk chunk;
    if (first) chunk.set_session_id(id);
    chunk.set_data(piece.data(), static_cast<size_t>(n));
    if (!writer->Write(chunk) || n == 0) break;  // ended by the server: Finish has the status
  }
  ::close(fd);
  writer->WritesDone();
  absl::Status st = FromGrpcStatus(writer->Finish());
  if (!read_error.ok()) return read_error;
  if (!st.ok()) return st;
  return out;
}

absl::StatusOr<v1::ModelInfo> Client::ModelInfo() {
  return Unary(models_.get(), &v1::Models::Stub::Info, v1::ModelInfoRequest());
}

}  // namespace linfer::cli
