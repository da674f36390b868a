// A running linfer server: the gRPC services on one port; the OpenAI API, /metrics and /health on
// an HTTP port; over one engine. Used by `linfer serve` and by the tests (ports 0 pick free ports).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/http_server.h"
#include "server/service_context.h"

namespace grpc {
class Server;
}

namespace linfer {

namespace openai {
struct ChatSetup;
class OpenAiApi;
}  // namespace openai

class HttpServer;
class StatsLogger;
class GenerationService;
class SessionsService;
class ModelsService;

struct ServerOptions {
  std::string bind = "127.0.0.1";
  int grpc_port = 50051;        // 0: any free port
  int http_port = 8000;         // 0: any free port; -1: no HTTP listener
  HttpServerOptions http;       // limits and timeouts (address and port come from above)
  GenerationDefaults defaults;  // the model's generation_config.json
  Metrics::BuildInfo build;     // for linfer_build_info
  int workers = 4;              // request preparation threads (tokenization, parsing)
  int64_t max_prompt_bytes = 16 << 20;
  absl::Duration stream_stall_timeout = absl::Seconds(60);  // a stream nobody reads is cancelled
  // Bytes Sessions/Export and Import streams may hold at once (0: 1 GiB, or two of the model's
  // largest state blobs); a transfer past it is refused with RESOURCE_EXHAUSTED.
  int64_t session_transfer_bytes = 0;
  absl::Duration log_stats_interval = absl::Seconds(10);  // 0: no periodic throughput line
  bool log_requests = false;                              // a log line per finished request
  std::string tls_cert, tls_key;                          // PEM files; both or neither
  std::string api_keys_file;                              // empty: no authentication
  int max_message_bytes = 16 << 20;
  // The chat template and reply syntax for /v1/chat/completions (null: completions only).
  std::shared_ptr<const openai::ChatSetup> chat;
  // Called once (on the engine thread) when the engine finds its device lost
  // (Engine::SetDeviceLostObserver): health has turned NOT_SERVING / 503 by then; `linfer serve`
  // drains and exits so that its supervisor starts a new process.
  std::function<void(const absl::Status& why)> on_device_lost;
  int stored_responses = 4096;  // /v1/responses kept for retrieval and continuation
  int64_t stored_responses_bytes = int64_t{1} << 30;  // … and about this much of their JSON
};

class Server {
 public:
  // Takes ownership of the engine and tokenizer (tokenizer may be null).
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      const ServerOptions& options, std::unique_ptr<Engine> engine,
      std::unique_ptr<tokenizer::Tokenizer> tokenizer, const std::string& model_name);
  ~Server();

  int grpc_port() const { return grpc_port_; }
  int http_port() const;
  Engine& engine() { return *engine_; }
  // Whether the engine found its device lost (ServerOptions::on_device_lost was called).
  bool device_lost() { return !failure().empty(); }

  // Graceful drain: health turns NOT_SERVING / 503, new RPCs get UNAVAILABLE, in-flight ones may
  // finish until `grace` has passed, then they are cancelled; the engine stops. Idempotent.
  void Drain(absl::Duration grace);
  // After Drain: what could not be saved for the next start (the stored responses' file, the
  // sessions' disk tier), both logged already; ok otherwise.
  absl::Status shutdown_status() const { return shutdown_status_; }

 private:
  Server() = default;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Metrics> metrics_;
  ApiKeys keys_;
  ServiceContext ctx_;
  std::unique_ptr<GenerationService> generation_;
  std::unique_ptr<SessionsService> sessions_;
  std::unique_ptr<ModelsService> models_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<openai::OpenAiApi> openai_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<WorkerPool> workers_, control_;
  std::unique_ptr<StatsLogger> stats_logger_;
  int grpc_port_ = 0;
  bool drained_ = false;
  absl::Status shutdown_status_;  // Drain's
  std::string failure();          // failure_, under its lock
  absl::Mutex failure_mu_;
  std::string failure_ ABSL_GUARDED_BY(failure_mu_);  // the lost device's error (/health says it)
};

}  // namespace linfer
