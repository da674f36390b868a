// Server assembly: services, health, reflection, TLS, limits, HTTP routes, drain.
#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/generation_service.h"
#include "server/http/http_server.h"
#include "server/openai/api.h"
#include "server/openai/messages_api.h"
#include "server/sessions_service.h"
#include "server/stats_logger.h"
#include "server/tls_check.h"

namespace linfer {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (o.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  ASSIGN_OR_RETURN(std::string cert,
                   ReadFile(o.tls_cert, kMaxTextFileBytes, FileKinds::kAlsoStreams));
  ASSIGN_OR_RETURN(std::string key,
                   ReadFile(o.tls_key, kMaxTextFileBytes, FileKinds::kAlsoStreams));
  RETURN_IF_ERROR(CheckTlsKeyPair(o.tls_cert, cert, o.tls_key, key));
  ssl.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const ServerOptions& options, std::unique_ptr<Engine> engine,
    std::unique_ptr<tokenizer::Tokenizer> tokenizer, const std::string& model_name) {
  std::unique_ptr<Server> s(new Server());
  s->engine_ = std::move(engine);
  s->tokenizer_ = std::move(tokenizer);
  s->metrics_ =
      std::make_unique<Metrics>(model_name, options.build, s->engine_->options().max_model_len);
  s->workers_ = std::make_unique<WorkerPool>(options.workers, 4096, "linfer-prep");
  s->control_ = std::make_unique<WorkerPool>(2, 4096, "linfer-control");
  if (!options.api_keys_file.empty()) {
    ASSIGN_OR_RETURN(s->keys_, ApiKeys::FromFile(options.api_keys_file));
  }
  s->ctx_.engine = s->engine_.get();
  s->ctx_.tokenizer = s->tokenizer_.get();
  s->ctx_.metrics = s->metrics_.get();
  s->ctx_.keys = &s->keys_;
  s->ctx_.model_name = model_name;
  s->ctx_.defaults = options.defaults;
  s->ctx_.workers = s->workers_.get();
  s->ctx_.control = s->control_.get();
  s->ctx_.max_prompt_bytes = options.max_prompt_bytes;
  s->ctx_.max_message_bytes = options.max_message_bytes;
  s->ctx_.log_requests = options.log_requests;
  Metrics* metrics = s->metrics_.get();
  s->engine_->SetStepObserver([metrics](const StepRecord& r) { metrics->ObserveStep(r); });

  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, Credentials(options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second server on a busy port must fail, not share the traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(absl::StrCat(options.bind, ":", options.grpc_port), creds,
                           &s->grpc_port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  s->generation_ = std::make_unique<GenerationService>(&s->ctx_, options.stream_stall_timeout);
  s->sessions_ = std::make_unique<SessionsService>(&s->ctx_, options.session_transfer_bytes,
                                                   options.stream_stall_timeout);
  s->models_ = std::make_unique<ModelsService>(&s->ctx_);
  builder.RegisterService(s->generation_.get());
  builder.RegisterService(s->sessions_.get());
  builder.RegisterService(s->models_.get());
  s->grpc_ = builder.BuildAndStart();
  if (s->grpc_ == nullptr || s->grpc_port_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("gRPC port ", options.bind, ":", options.grpc_port,
                     ": cannot listen (address already in use, or not a local address)"));
  }
  // The server as a whole ("") and each API service by name (a probe may name one).
  grpc::HealthCheckServiceInterface* health = s->grpc_->GetHealthCheckService();
  for (const char* service : {"linfer.v1.Generation", "linfer.v1.Sessions", "linfer.v1.Models"}) {
    health->SetServingStatus(service, true);
  }
  health->SetServingStatus(true);
  // A lost device: health says so at once (every service NOT_SERVING, /health 503 naming it);
  // the engine has ended every request and refuses new ones with the same error.
  s->engine_->SetDeviceLostObserver(
      [self = s.get(), then = options.on_device_lost](const absl::Status& why) {
        self->grpc_->GetHealthCheckService()->SetServingStatus(false);
        {
          absl::MutexLock lock(&self->failure_mu_);
          self->failure_ = std::string(why.message());
        }
        if (then) then(why);
      });

  if (options.http_port >= 0) {
    HttpServerOptions ho = options.http;
    ho.address = options.bind;
    ho.port = options.http_port;
    Metrics* metrics = s->metrics_.get();
    ho.on_answer = [metrics](const std::string& method, const std::string& route, int status) {
      metrics->ObserveHttp(method, route, status);
    };
    // Anthropic's clients read its error shape, also from the router (404, 405, 413, 503).
    ho.error_response = [](const std::string& path, int status, absl::string_view message,
                           absl::string_view type) {
      return absl::StartsWith(path, "/v1/messages") ? openai::AnthropicError(status, message)
                                                    : JsonError(status, message, "", type);
    };
    // Bound first (a busy port fails the start before anything is read), served once every
    // route is there: the clients of a long restore wait in the backlog (/health answered 404).
    ASSIGN_OR_RETURN(s->http_, HttpServer::Bind(ho));
    s->openai_ = std::make_unique<openai::OpenAiApi>(
        &s->ctx_, options.chat, options.stored_responses, options.stored_responses_bytes);
    s->openai_->RestoreStoredResponses();  // what the last drain wrote, before any request
    s->openai_->Register(*s->http_);
    Server* self = s.get();
    s->http_->Route("GET", "/metrics", [self](std::shared_ptr<HttpExchange> x) {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      const auto [stored, stored_bytes] = self->openai_->StoredResponsesSize();
      self->metrics_->SetStoredResponses(stored, stored_bytes);
      self->metrics_->SetHttpConnections(self->http_->connection_stats());
      r.body = self->metrics_->Render([self] { return self->engine_->Stats(); });
      x->Respond(std::move(r));
    });
    // /health, and vLLM's /ping (SageMaker's probe: GET or POST) answering the same.
    const auto health = [self](std::shared_ptr<HttpExchange> x) {
      HttpResponse r;
      r.content_type = "text/plain; charset=utf-8";
      if (const std::string failure = self->failure(); !failure.empty()) {
        r.status = 503;
        r.body = absl::StrCat("failed: ", failure, "\n");
      } else if (self->ctx_.draining) {
        r.status = 503;
        r.body = "draining\n";
      } else {
        r.body = "ok\n";
      }
      x->Respond(std::move(r));
    };
    s->http_->Route("GET", "/health", health);
    s->http_->Route("GET", "/ping", health);
    s->http_->Route("POST", "/ping", health);
    // vLLM's /version: {"version": "…"}.
    s->http_->Route("GET", "/version",
                    [version = options.build.version](std::shared_ptr<HttpExchange> x) {
                      HttpResponse r;
                      r.body = nlohmann::json{{"version", version}}.dump();
                      x->Respond(std::move(r));
                    });
    s->http_->Serve();  // every route is there
  }
  if (options.log_stats_interval > absl::ZeroDuration()) {
    s->stats_logger_ = std::make_unique<StatsLogger>(s->engine_.get(), options.log_stats_interval);
  }
  Log(LogLevel::kInfo,
      absl::StrCat(
          "serving '", model_name, "' on gRPC ", options.bind, ":", s->grpc_port_,
          s->http_ ? absl::StrCat(", HTTP ", options.bind, ":", s->http_->port()) : std::string()));
  return s;
}

int Server::http_port() const { return http_ ? http_->port() : -1; }

std::string Server::failure() {
  absl::MutexLock lock(&failure_mu_);
  return failure_;
}

void Server::Drain(absl::Duration grace) {
  if (drained_) return;
  drained_ = true;
  // NOT_SERVING (every service) before anything else says draining (HTTP's /health).
  if (grpc_ != nullptr) grpc_->GetHealthCheckService()->SetServingStatus(false);
  ctx_.draining = true;
  const absl::Time deadline = absl::Now() + grace;
  // Shortly before the deadline, requests still running end with an error that says why, their
  // tokens so far out first (a session keeps what was fed: what its client got); then gRPC cuts
  // the calls left ("Cancelling all calls", and the last tokens with them).
  absl::Notification idle;
  std::thread cutter([&] {
    if (grace <= absl::ZeroDuration()) return;  // nothing waits to be told
    const absl::Duration margin = std::min(absl::Seconds(1), grace / 4);
    if (idle.WaitForNotificationWithDeadline(deadline - margin)) return;
    engine_->Abort(absl::UnavailableError(
        absl::StrCat("the server is shutting down: its drain (--drain_timeout_s ",
                     absl::FormatDuration(grace), ") ran out before this request ended")));
  });
  if (grpc_ != nullptr) {  // null when Start failed before the gRPC server was built
    // In-flight RPCs keep going until they finish or the deadline passes (then gRPC cancels
    // them, which cancels their engine requests); new RPCs are refused.
    grpc_->Shutdown(absl::ToChronoTime(deadline));
  }
  // HTTP generations in flight get the same grace (new ones are answered 503).
  if (openai_ != nullptr) {
    openai_->WaitIdle(deadline);
    // Before the engine writes its sessions to disk.
    absl::Status saved = openai_->CloseStoredResponses();
    if (!saved.ok()) {
      shutdown_status_ =
          absl::Status(saved.code(), absl::StrCat("stored responses: ", saved.message()));
    }
  }
  idle.Notify();
  cutter.join();
  engine_->Stop();
  if (absl::Status persisted = engine_->persist_status(); !persisted.ok()) {
    shutdown_status_ =
        shutdown_status_.ok()
            ? persisted
            : absl::Status(persisted.code(), absl::StrCat(shutdown_status_.message(),
                                                          "; sessions: ", persisted.message()));
  }
  stats_logger_.reset();
  Log(LogLevel::kInfo, "drained");
}

Server::~Server() {
  Drain(absl::ZeroDuration());
  // The engine has stopped, so every HTTP generation has its final event: let them answer and
  // clean up (they post to the worker pool and the OpenAI dispatcher) before those go away.
  if (openai_ != nullptr) openai_->WaitIdle(absl::Now() + absl::Seconds(10));
  http_.reset();
  openai_.reset();
  grpc_.reset();
  generation_.reset();
  workers_.reset();
  control_.reset();
}

}  // namespace linfer
