// `linfer serve`: load the model, start the engine and the server, drain on SIGTERM/SIGINT.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "kernels/logging.h"
#include "server/commands.h"
#include "server/server.h"

ABSL_FLAG(std::string, bind, "127.0.0.1", "Address to listen on (gRPC and HTTP)");
ABSL_FLAG(int, port, 50051, "gRPC port (0: any free port)");
ABSL_FLAG(int, http_port, 9090, "HTTP port for /metrics and /health (0: any, -1: off)");
ABSL_FLAG(int64_t, state_memory_mb, 1024, "Memory for the state slot pool, MiB");
ABSL_FLAG(int, max_slots, 0, "Cap on state slots (0: as many as the memory holds)");
ABSL_FLAG(int64_t, session_host_mb, 4096, "Host RAM for idle session states, MiB");
ABSL_FLAG(std::string, session_disk_dir, "", "Directory for idle session states (empty: none)");
ABSL_FLAG(int64_t, session_disk_mb, 16384, "Disk budget for idle session states, MiB");
ABSL_FLAG(int, max_waiting, 1024, "Queued requests beyond this are rejected (RESOURCE_EXHAUSTED)");
ABSL_FLAG(int64_t, max_waiting_tokens, 1 << 22, "Queued prompt tokens beyond this are rejected");
ABSL_FLAG(int64_t, max_step_tokens, 128,
          "Token budget of one engine step (prompt chunks share it with decode tokens; smaller "
          "keeps inter-token latency low while others prefill)");
ABSL_FLAG(int, max_running, 256, "Sequences in one engine step");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain for TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for TLS");
ABSL_FLAG(std::string, api_keys_file, "",
          "File of API keys ('KEY [OWNER]' per line); clients send 'authorization: Bearer KEY'");
ABSL_FLAG(double, drain_timeout_s, 30, "On SIGTERM, seconds in-flight requests may still run");
ABSL_FLAG(std::string, served_model_name, "", "Name clients use for the model (default: dir name)");

namespace linfer::cli {

int Serve(const std::vector<std::string>&) {
  // Block the signals before any thread starts, so only sigwait below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::string> dir = ModelDir();
  if (!dir.ok()) return Fail(dir.status().message());
  absl::StatusOr<LoadedModel> loaded = LoadModelAndTokenizer(*dir);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  EngineOptions eo;
  eo.state_memory_bytes = absl::GetFlag(FLAGS_state_memory_mb) << 20;
  eo.max_slots = absl::GetFlag(FLAGS_max_slots);
  eo.tiers.host_bytes = absl::GetFlag(FLAGS_session_host_mb) << 20;
  eo.tiers.disk_dir = absl::GetFlag(FLAGS_session_disk_dir);
  eo.tiers.disk_bytes = absl::GetFlag(FLAGS_session_disk_mb) << 20;
  eo.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  eo.max_waiting_tokens = absl::GetFlag(FLAGS_max_waiting_tokens);
  eo.scheduler.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  eo.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  eo.detokenizer = loaded->detokenizer;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(std::move(loaded->model), eo);
  if (!engine.ok()) return Fail(engine.status().ToString());
  ServerOptions so;
  so.bind = absl::GetFlag(FLAGS_bind);
  so.grpc_port = absl::GetFlag(FLAGS_port);
  so.http_port = absl::GetFlag(FLAGS_http_port);
  so.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  so.tls_key = absl::GetFlag(FLAGS_tls_key);
  so.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  std::string name = absl::GetFlag(FLAGS_served_model_name);
  if (name.empty()) name = std::filesystem::path(*dir).filename().string();
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start(so, *std::move(engine), std::move(loaded->tokenizer), name);
  if (!server.ok()) return Fail(server.status().ToString());
  std::printf("linfer: serving %s on %s:%d (gRPC), HTTP port %d\n", name.c_str(), so.bind.c_str(),
              (*server)->grpc_port(), (*server)->http_port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  Log(LogLevel::kInfo, absl::StrCat("signal ", sig, ": draining"));
  (*server)->Drain(absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  server->reset();
  return 0;
}

}  // namespace linfer::cli
