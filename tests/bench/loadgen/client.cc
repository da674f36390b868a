// The streaming Generate reactor and the blocking calls of the load generator.
#include "tests/bench/loadgen/client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace linfer::bench {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string GrpcError(const grpc::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())), ": ",
                      s.error_message());
}

// One Generate stream. Deletes itself when gRPC is done with it.
class StreamCall : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  StreamCall(const v1::GenerateRequest& request, bool keep_ids, RequestResult* out,
             std::function<void()> done)
      : request_(request), keep_ids_(keep_ids), out_(out), done_(std::move(done)) {}

  grpc::ClientContext* context() { return &context_; }

  void Go(v1::Generation::Stub* stub, Clock::time_point t0) {
    out_->prompt_tokens = request_.token_ids().ids_size();
    out_->requested_tokens = request_.stop().max_tokens();
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&message_);
    start_ = Clock::now();
    out_->start_s = Seconds(start_ - t0);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    const Clock::time_point now = Clock::now();
    if (message_.token_ids_size() > 0) {
      if (out_->received_tokens == 0) {
        out_->ttft_s = Seconds(now - start_);
      } else {
        out_->itls_s.push_back(Seconds(now - last_));
      }
      last_ = now;
      out_->received_tokens += message_.token_ids_size();
      if (keep_ids_) {
        out_->output_ids.insert(out_->output_ids.end(), message_.token_ids().begin(),
                                message_.token_ids().end());
      }
    }
    if (!message_.finish_reason().empty()) {
      finished_ = true;
      const v1::Usage& u = message_.usage();
      out_->output_tokens = u.completion_tokens();
      out_->usage_prompt_tokens = u.prompt_tokens();
      out_->cached_tokens = u.cached_tokens();
      out_->server_ttft_s = u.ttft_seconds();
    }
    StartRead(&message_);
  }

  void OnDone(const grpc::Status& status) override {
    if (!status.ok()) {
      out_->error = GrpcError(status);
    } else if (!finished_ || out_->received_tokens == 0) {
      out_->error = "stream ended without tokens or without a finish_reason";
    } else {
      out_->success = true;
    }
    if (out_->received_tokens > 0) out_->latency_s = Seconds(last_ - start_);
    std::function<void()> done = std::move(done_);
    delete this;
    done();
  }

 private:
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse message_;
  const bool keep_ids_;
  RequestResult* out_;
  std::function<void()> done_;
  Clock::time_point start_, last_;
  bool finished_ = false;
};

}  // namespace

bool IsLoopback(const std::string& server) {
  const size_t colon = server.rfind(':');
  if (colon == std::string::npos || colon + 1 == server.size()) return false;
  const std::string host = server.substr(0, colon);
  return host == "localhost" || host == "[::1]" || absl::StartsWith(host, "127.");
}

v1::GenerateRequest MakeRequest(const RequestSpec& spec, double temperature, uint64_t seed,
                                const std::string& session_id) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Add(spec.prompt.begin(), spec.prompt.end());
  if (!session_id.empty()) r.set_session_id(session_id);
  r.mutable_sampling()->set_temperature(static_cast<float>(temperature));
  if (temperature > 0) r.mutable_sampling()->set_seed(seed);
  r.mutable_stop()->set_max_tokens(spec.output_len);
  r.mutable_stop()->set_ignore_eos(true);
  return r;
}

absl::StatusOr<std::unique_ptr<BenchClient>> BenchClient::Connect(const std::string& server,
                                                                  const std::string& api_key) {
  if (!IsLoopback(server)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server must be a loopback HOST:PORT (127.x.x.x, localhost, [::1]), got '",
                     server, "': the load stays on this machine"));
  }
  std::unique_ptr<BenchClient> c(new BenchClient());
  c->api_key_ = api_key;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // One connection per client, as with one HTTP/2 connection; streams multiplex over it.
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
  c->generation_ = v1::Generation::NewStub(channel);
  c->sessions_ = v1::Sessions::NewStub(channel);
  c->models_ = v1::Models::NewStub(channel);
  return c;
}

void BenchClient::AddAuth(grpc::ClientContext* ctx) const {
  if (!api_key_.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", api_key_));
}

absl::StatusOr<v1::ModelInfo> BenchClient::WaitReady(double timeout_s) {
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(timeout_s));
  std::string last;
  do {
    grpc::ClientContext ctx;
    AddAuth(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ModelInfoRequest req;
    v1::ModelInfo info;
    const grpc::Status s = models_->Info(&ctx, req, &info);
    if (s.ok()) return info;
    last = GrpcError(s);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::FailedPreconditionError(absl::StrCat("Models.Info: ", last));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (Clock::now() < end);
  return absl::UnavailableError(absl::StrCat("server not ready after ", timeout_s, " s: ", last));
}

void BenchClient::Start(const v1::GenerateRequest& request, Clock::time_point t0,
                        Clock::time_point deadline, bool keep_output_ids, RequestResult* out,
                        std::function<void()> done) {
  auto* call = new StreamCall(request, keep_output_ids, out, std::move(done));
  AddAuth(call->context());
  if (deadline != Clock::time_point::max()) {
    call->context()->set_deadline(std::chrono::system_clock::now() + (deadline - Clock::now()));
  }
  call->Go(generation_.get(), t0);
}

RequestResult StreamClient::Run(const v1::GenerateRequest& request, Clock::time_point t0,
                                Clock::time_point deadline, bool keep_output_ids) {
  RequestResult r;
  absl::Notification finished;
  Start(request, t0, deadline, keep_output_ids, &r, [&finished] { finished.Notify(); });
  finished.WaitForNotification();
  return r;
}

absl::Status BenchClient::CreateSession(const std::string& id) {
  grpc::ClientContext ctx;
  AddAuth(&ctx);
  v1::CreateSessionRequest req;
  req.set_session_id(id);
  v1::Session session;
  const grpc::Status s = sessions_->Create(&ctx, req, &session);
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status BenchClient::DeleteSession(const std::string& id) {
  grpc::ClientContext ctx;
  AddAuth(&ctx);
  v1::DeleteSessionRequest req;
  req.set_session_id(id);
  v1::DeleteSessionResponse resp;
  const grpc::Status s = sessions_->Delete(&ctx, req, &resp);
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace linfer::bench
