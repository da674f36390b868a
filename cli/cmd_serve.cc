// `linfer serve`: load the model, start the engine and the server, drain on SIGTERM/SIGINT.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/memory_plan.h"
#include "kernels/device_lost.h"
#include "kernels/device_memory.h"
#include "kernels/gemm.h"
#include "models/kv_cache.h"
#include "server/openai/chat_setup.h"
#include "server/server.h"

ABSL_FLAG(std::string, bind, "127.0.0.1", "Address to listen on (gRPC and HTTP)");
ABSL_FLAG(int, port, 50051, "gRPC port (0: any free port)");
ABSL_FLAG(int, http_port, 8000,
          "HTTP port: the OpenAI API (/v1/...), /metrics and /health (0: any, -1: off)");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions (default: the model's own, from "
          "tokenizer_config.json or chat_template.jinja)");
ABSL_FLAG(int, http_idle_timeout_s, 30,
          "HTTP: close a connection that sends no complete request for this long");
ABSL_FLAG(int, http_request_timeout_s, 120,
          "HTTP: close a connection whose request (headers and body) has not arrived whole this "
          "long after its first byte, however steadily it trickles in");
ABSL_FLAG(int, http_max_connections, 1024,
          "HTTP: open connections at most; past it an idle keep-alive connection (the one "
          "waiting longest), else the unfinished request arriving slowest, is closed, or "
          "accepting pauses while every one is answered");
ABSL_FLAG(int, http_write_timeout_s, 30,
          "HTTP: drop a streaming response whose client has not read anything for this long");
ABSL_FLAG(int64_t, http_min_send_rate, 1024,
          "HTTP: drop an answer (a stream too) whose client reads it slower than this, bytes/s, "
          "over --http_write_timeout_s while output waits for it (0: no minimum)");
ABSL_FLAG(int, stored_responses, 4096,
          "/v1/responses results kept for GET and previous_response_id, with the state of each "
          "conversation (in the session tiers; the least recently used go first; 0: none)");
ABSL_FLAG(int64_t, stored_responses_mb, 1024,
          "Memory for the stored /v1/responses' JSON (their input items, outputs and "
          "conversations), MiB; past it the least recently used of the API key holding the "
          "most go first");
ABSL_FLAG(std::string, allowed_origins, "*",
          "HTTP: origins whose pages in a browser may call the API (CORS), comma-separated: \"*\" "
          "for any (as vLLM and llama-server), exact origins such as https://app.example.com, or "
          "empty for none");
ABSL_FLAG(int, http_workers, 4, "HTTP: threads that parse requests and run handlers");
ABSL_FLAG(int64_t, http_max_body_mb, 32, "HTTP: largest request body, MiB (413 beyond)");
ABSL_FLAG(int64_t, state_memory_mb, 0,
          "Memory for the state slot pool, MiB (0: by device, 1024 on the CPU; on CUDA from the "
          "memory free after loading the weights, engine/memory_plan.h)");
ABSL_FLAG(int, max_slots, 0, "Cap on state slots (0: as many as the memory holds)");
ABSL_FLAG(int64_t, session_host_mb, 4096, "Host RAM for idle session states, MiB");
ABSL_FLAG(std::string, session_disk_dir, "",
          "Directory for session states: the disk tier, and where a graceful shutdown writes "
          "every session so that a restart finds them (empty: none)");
ABSL_FLAG(int64_t, session_disk_mb, 16384, "Disk budget for idle session states, MiB");
ABSL_FLAG(double, session_ttl_s, 0, "Delete sessions idle for longer than this (0: never)");
ABSL_FLAG(int, max_sessions_per_key, 4096, "Sessions one API key may hold (0: unlimited)");
ABSL_FLAG(int64_t, max_session_mb_per_key, 0,
          "Session state one API key may hold across tiers (each session's state and KV where it "
          "lives), MiB (0: unlimited; eviction always takes from the key holding the most bytes "
          "first)");
ABSL_FLAG(int, max_waiting, 1024, "Queued requests beyond this are rejected (RESOURCE_EXHAUSTED)");
ABSL_FLAG(std::string, scheduling_policy, "fcfs",
          "fcfs: first come, first served, and a request with a priority other than 0 is refused; "
          "priority: requests' `priority` orders them (lower first, with aging) and may preempt "
          "(vLLM's --scheduling-policy)");
ABSL_FLAG(int64_t, max_waiting_tokens, 1 << 22, "Queued prompt tokens beyond this are rejected");
ABSL_FLAG(int64_t, max_step_tokens, 0,
          "Token budget of one engine step (prompt chunks share it with decode tokens; smaller "
          "keeps inter-token latency low while others prefill; a step runs at most this many "
          "sequences). 0: by device, 128 on the CPU, on CUDA 8192 with at least 70 GiB of GPU "
          "memory, else 2048");
ABSL_FLAG(int, max_running, 256, "Sequences in one engine step");
ABSL_FLAG(int64_t, max_model_len, 0,
          "Tokens one sequence may hold, history + prompt + max_tokens (0: the config's "
          "max_position_embeddings, else 1048576, capped by what the KV cache holds)");
ABSL_FLAG(int64_t, kv_memory_mb, 0,
          "KV cache of the full-attention layers of hybrid models (Qwen3.5/3.6, fla attn "
          "layers), MiB; unused by purely recurrent models (0: by device, as --state_memory_mb)");
ABSL_FLAG(int64_t, prefix_cache_mb, 1024,
          "Host RAM for states saved by token prefix, so that requests without a session that "
          "resend a conversation resume from its longest saved prefix, MiB (0: off)");
ABSL_FLAG(std::string, prefix_cache_disk_dir, "",
          "Directory of the prefix cache's disk tier: states pushed out of --prefix_cache_mb are "
          "written here instead of dropped (a directory of its own: leftover entry files are "
          "deleted at start; empty: no disk tier)");
ABSL_FLAG(int64_t, prefix_cache_disk_mb, 8192, "Disk budget of the prefix cache's disk tier, MiB");
ABSL_FLAG(bool, prefix_cache_slots, true,
          "Keep the prefix cache's states in free state slots (no copy to host RAM: a finished "
          "request's slot is kept as it is; the slots go back, their states to host RAM, when "
          "requests need them); false: every saved state is copied to host RAM");
ABSL_FLAG(int64_t, prefix_snapshot_tokens, 1024,
          "While a long prompt is prefilled, save its state every this many tokens (0: only at "
          "the end of the prompt and of the request)");
ABSL_FLAG(int64_t, prefix_branch_tokens, 64,
          "Prompts that share a beginning with an earlier prompt are saved where they part, "
          "rounded down to a multiple of this many tokens (0: off)");
ABSL_FLAG(bool, batch_invariant, false,
          "CPU: compute every token the same way whatever else shares its step (a batch-invariant "
          "GEMM, token-by-token recurrences), so a turn resumed from a session or the prefix "
          "cache is bit-identical to computing the conversation cold; slower prefill");
ABSL_FLAG(std::string, presample, "auto",
          "auto|on|off: pick each step's K best logits per sequence on the device, so that only "
          "they (not the vocabulary) come back for greedy, top-k and min-p requests without bias "
          "or penalties; the same tokens either way (auto: on with CUDA)");
ABSL_FLAG(bool, cuda_graphs, true,
          "CUDA: replay decode steps as CUDA graphs captured per padded batch size (one state "
          "slot is kept for the padding rows); false runs every step eagerly (vLLM's "
          "--enforce-eager)");
ABSL_FLAG(int, kv_block_tokens, 16, "Tokens per KV cache block (hybrid models)");
ABSL_FLAG(int, max_tokens_limit, 32768, "Largest max_tokens a request may ask for");
ABSL_FLAG(int64_t, max_prompt_mb, 16, "Largest text prompt, MiB");
ABSL_FLAG(int, workers, 4, "Threads that prepare requests (tokenization, parsing)");
ABSL_FLAG(int64_t, session_transfer_mb, 0,
          "Memory that Sessions/Export and Import streams may hold at once, MiB (each keeps its "
          "whole state blob until it ends): a transfer past it is refused with RESOURCE_EXHAUSTED "
          "(0: 1 GiB, or two of the model's largest state blobs)");
ABSL_FLAG(double, stream_stall_timeout_s, 60,
          "gRPC: cancel a request whose client has read nothing for this long (a session "
          "Export or Import that moves no bytes too)");
ABSL_FLAG(double, log_stats_interval_s, 10, "Seconds between throughput log lines (0: off)");
ABSL_FLAG(bool, log_requests, false, "Log one line per finished request");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain for TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for TLS");
ABSL_FLAG(std::string, api_keys_file, "",
          "File of API keys ('KEY [OWNER]' per line); clients send 'authorization: Bearer KEY'");
ABSL_FLAG(double, drain_timeout_s, 30, "On SIGTERM, seconds in-flight requests may still run");
ABSL_FLAG(double, shutdown_timeout_s, 60,
          "After --drain_timeout_s, seconds the rest of the shutdown (saving sessions, closing "
          "connections) may take before the process exits anyway, with status 1 (inf: no limit); "
          "a second SIGTERM/SIGINT exits at once");
ABSL_FLAG(std::string, served_model_name, "", "Name clients use for the model (default: dir name)");

namespace linfer::cli {
namespace {

// `--name must be lo to hi; got v` (NaN is outside every range). `hi` at its type's largest value
// (or ∞) reads "at least lo".
template <typename T>
absl::Status InRange(const absl::Flag<T>& flag, T lo, T hi) {
  const T v = absl::GetFlag(flag);
  if (v >= lo && v <= hi) return absl::OkStatus();
  const bool open = hi == std::numeric_limits<T>::max() || hi == std::numeric_limits<T>::infinity();
  return absl::InvalidArgumentError(
      absl::StrCat("--", absl::GetFlagReflectionHandle(flag).Name(), " must be ",
                   open ? absl::StrCat("at least ", lo) : absl::StrCat(lo, " to ", hi), "; got ",
                   absl::GetFlagReflectionHandle(flag).CurrentValue()));
}

// The numeric flags (but the pools' and the HTTP listener's others, checked with their plans), each
// against the values it can mean, before the model loads: a negative budget, a NaN timeout or a
// size that overflows once shifted to bytes is refused by name rather than taken to mean something
// else.
absl::Status CheckNumericFlags() {
  constexpr int64_t kMaxMb = int64_t{1} << 30;  // MiB: a pebibyte, short of overflow in bytes
  constexpr double kNever = std::numeric_limits<double>::infinity();
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  constexpr double kMinTimeout = 1e-3;  // 0 would cancel every stream, or drain nothing
  for (const absl::Status& st : {
           InRange(FLAGS_port, 0, 65535),
           InRange(FLAGS_http_port, -1, 65535),  // -1: off
           InRange(FLAGS_max_slots, 0, 1 << 20),
           InRange(FLAGS_session_host_mb, int64_t{0}, kMaxMb),
           InRange(FLAGS_session_disk_mb, int64_t{0}, kMaxMb),
           InRange(FLAGS_session_ttl_s, 0.0, kNever),
           InRange(FLAGS_max_sessions_per_key, 0, kMaxInt),
           InRange(FLAGS_max_session_mb_per_key, int64_t{0}, kMaxMb),
           InRange(FLAGS_max_waiting, 1, kMaxInt),
           InRange(FLAGS_max_waiting_tokens, int64_t{1}, std::numeric_limits<int64_t>::max()),
           InRange(FLAGS_max_running, 1, kMaxInt),
           InRange(FLAGS_max_model_len, int64_t{0}, std::numeric_limits<int64_t>::max()),
           InRange(FLAGS_prefix_cache_mb, int64_t{0}, kMaxMb),
           InRange(FLAGS_prefix_cache_disk_mb, int64_t{0}, kMaxMb),
           InRange(FLAGS_prefix_snapshot_tokens, int64_t{0}, std::numeric_limits<int64_t>::max()),
           InRange(FLAGS_prefix_branch_tokens, int64_t{0}, int64_t{1} << 20),
           InRange(FLAGS_kv_block_tokens, 1, 4096),
           InRange(FLAGS_max_tokens_limit, 1, kMaxInt),
           InRange(FLAGS_max_prompt_mb, int64_t{1}, int64_t{1} << 20),
           InRange(FLAGS_http_max_body_mb, int64_t{1}, int64_t{1} << 20),
           InRange(FLAGS_session_transfer_mb, int64_t{0}, kMaxMb),
           InRange(FLAGS_workers, 1, 1024),
           InRange(FLAGS_stored_responses, 0, 1 << 24),
           InRange(FLAGS_stored_responses_mb, int64_t{0}, kMaxMb),
           InRange(FLAGS_stream_stall_timeout_s, kMinTimeout, kNever),
           InRange(FLAGS_log_stats_interval_s, 0.0, kNever),
           InRange(FLAGS_drain_timeout_s, 0.0, kNever),
           InRange(FLAGS_shutdown_timeout_s, kMinTimeout, kNever),
       }) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

// The HTTP listener's flags, checked (each named) before the model loads.
absl::StatusOr<HttpServerOptions> HttpFromFlags(std::vector<std::string> origins) {
  HttpServerOptions h;
  h.max_body_bytes = absl::GetFlag(FLAGS_http_max_body_mb) << 20;  // in range: CheckNumericFlags
  h.idle_timeout_s = absl::GetFlag(FLAGS_http_idle_timeout_s);
  h.write_timeout_s = absl::GetFlag(FLAGS_http_write_timeout_s);
  h.min_send_rate = absl::GetFlag(FLAGS_http_min_send_rate);
  h.request_timeout_s = absl::GetFlag(FLAGS_http_request_timeout_s);
  h.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  h.workers = absl::GetFlag(FLAGS_http_workers);
  h.allowed_origins = std::move(origins);
  if (absl::Status st = CheckHttpServerOptions(h); !st.ok()) {
    // "HTTP: idle_timeout_s is 0; ..." → "--http_idle_timeout_s is 0; ..."
    return absl::InvalidArgumentError(
        absl::StrCat("--http_", absl::StripPrefix(st.message(), "HTTP: ")));
  }
  return h;
}

// --state_memory_mb, --kv_memory_mb and --max_step_tokens 0 (the defaults): planned by device
// (engine/memory_plan.h) from the memory free now, with the weights loaded.
absl::StatusOr<MemoryPlan> PlanFromFlags(const Model& model) {
  const int64_t state_mb = absl::GetFlag(FLAGS_state_memory_mb);
  const int64_t kv_mb = absl::GetFlag(FLAGS_kv_memory_mb);
  const int64_t step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  constexpr int64_t kMaxMb = int64_t{1} << 40;  // MiB: far beyond any machine, short of overflow
  if (state_mb < 0 || kv_mb < 0 || state_mb > kMaxMb || kv_mb > kMaxMb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state_memory_mb and --kv_memory_mb must be positive (at most 2^40 MiB), or 0 (by "
        "device); got ",
        state_mb, " and ", kv_mb));
  }
  if (step_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_step_tokens must be positive, or 0 (by device); got ", step_tokens));
  }
  const int max_slots = absl::GetFlag(FLAGS_max_slots);
  MemoryPlanInput in{
      .device = model.device(),
      .has_kv = KvBytesPerToken(model.state_specs()) > 0,
      .state_bytes = state_mb << 20,
      .kv_bytes = kv_mb << 20,
      .max_state_bytes =
          max_slots > 0 ? std::min<int64_t>(max_slots, int64_t{1} << 20) * model.state_bytes() : 0,
      .step_tokens = step_tokens};
  const bool pools_by_device = state_mb == 0 || kv_mb == 0;
  if (model.device() != Device::kCpu && (pools_by_device || step_tokens == 0)) {
    ASSIGN_OR_RETURN(const DeviceMemoryInfo memory, DeviceMemory(model.device()));
    in.free_bytes = memory.free_bytes;
    in.total_bytes = memory.total_bytes;
  }
  const MemoryPlan plan = PlanMemory(in);
  if (pools_by_device) {
    const char* kv_note = !in.has_kv   ? " (unused: no attention layers)"
                          : kv_mb == 0 ? ""
                                       : " (given)";
    Log(LogLevel::kInfo,
        absl::StrCat("pool budgets by device: state ", plan.state_bytes >> 20, " MiB",
                     state_mb == 0 ? "" : " (given)", ", KV ", plan.kv_bytes >> 20, " MiB", kv_note,
                     model.device() == Device::kCpu
                         ? ""
                         : absl::StrCat(" (", static_cast<int>(100 * kUsableShare), "% of the ",
                                        in.free_bytes >> 20, " MiB free after the weights)")));
  }
  return plan;
}

// The flags of the disk directories (the sessions' disk tier, the prefix cache's).
void DiskFlags(EngineOptions& eo) {
  eo.tiers.disk_dir = absl::GetFlag(FLAGS_session_disk_dir);
  eo.prefix_cache.budget_bytes = absl::GetFlag(FLAGS_prefix_cache_mb) << 20;
  eo.prefix_cache.disk_dir = absl::GetFlag(FLAGS_prefix_cache_disk_dir);
  eo.prefix_cache.disk_budget_bytes = absl::GetFlag(FLAGS_prefix_cache_disk_mb) << 20;
}

absl::StatusOr<EngineOptions> EngineOptionsFromFlags(const Model& model) {
  EngineOptions eo;
  DiskFlags(eo);
  ASSIGN_OR_RETURN(const MemoryPlan budgets, PlanFromFlags(model));
  eo.state_memory_bytes = budgets.state_bytes;
  eo.max_slots = absl::GetFlag(FLAGS_max_slots);
  eo.tiers.host_bytes = absl::GetFlag(FLAGS_session_host_mb) << 20;
  eo.tiers.disk_bytes = absl::GetFlag(FLAGS_session_disk_mb) << 20;
  eo.tiers.ttl = absl::Seconds(absl::GetFlag(FLAGS_session_ttl_s));
  eo.tiers.max_sessions_per_owner = absl::GetFlag(FLAGS_max_sessions_per_key);
  eo.tiers.max_bytes_per_owner = absl::GetFlag(FLAGS_max_session_mb_per_key) << 20;
  eo.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  const std::string policy = absl::GetFlag(FLAGS_scheduling_policy);
  if (policy != "fcfs" && policy != "priority") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--scheduling_policy must be fcfs or priority, got '", absl::CEscape(policy), "'"));
  }
  eo.priority_scheduling = policy == "priority";
  eo.max_waiting_tokens = absl::GetFlag(FLAGS_max_waiting_tokens);
  eo.scheduler.max_step_tokens = budgets.step_tokens;
  eo.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  eo.max_new_tokens = absl::GetFlag(FLAGS_max_tokens_limit);
  eo.max_model_len = absl::GetFlag(FLAGS_max_model_len);  // 0: the engine resolves it
  eo.kv_memory_bytes = budgets.kv_bytes;
  eo.kv_block_tokens = absl::GetFlag(FLAGS_kv_block_tokens);
  eo.prefix_cache.snapshot_interval = absl::GetFlag(FLAGS_prefix_snapshot_tokens);
  eo.prefix_cache.branch_granule = absl::GetFlag(FLAGS_prefix_branch_tokens);
  eo.prefix_cache.device_tier = absl::GetFlag(FLAGS_prefix_cache_slots);
  eo.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  eo.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  ASSIGN_OR_RETURN(eo.presample, ParsePresampling(absl::GetFlag(FLAGS_presample)));
  // The other flags are in range (CheckNumericFlags); a plan may still leave a pool empty.
  if (eo.state_memory_bytes <= 0 ||
      eo.kv_memory_bytes <= 0) {  // the other flags: CheckNumericFlags
    return absl::InvalidArgumentError(
        absl::StrCat("the state and KV pools need memory; planned ", eo.state_memory_bytes, " and ",
                     eo.kv_memory_bytes, " bytes (--state_memory_mb, --kv_memory_mb)"));
  }
  return eo;
}

// OpenBLAS' kernel set, and why when linfer chose it (cli/main.cc restarts with OPENBLAS_CORETYPE
// when OpenBLAS fell back to generic kernels).
std::string BlasKernels() {
  const char* before = std::getenv("LINFER_BLAS_RESTART");
  return before == nullptr
             ? BlasCoreName()
             : absl::StrCat(BlasCoreName(), " (OpenBLAS had picked ", before,
                            " for this unknown CPU model; OPENBLAS_CORETYPE=", BlasCoreName(),
                            " set by linfer)");
}

// One log line with the effective configuration.
void LogConfiguration(const std::string& dir, const std::string& name, Engine& engine,
                      const ServerOptions& so) {
  const Model& m = engine.model();
  const EngineOptions& o = engine.options();
  const EngineStats st = engine.Stats();
  const std::string kv =
      st.kv_blocks_total == 0
          ? "none (recurrent only)"
          : absl::StrFormat("%d blocks x %d bytes (%d MiB, %d bytes/token)", st.kv_blocks_total,
                            st.kv_bytes_per_block, st.kv_blocks_total * st.kv_bytes_per_block >> 20,
                            st.kv_bytes_per_block / o.kv_block_tokens);
  Log(LogLevel::kInfo,
      absl::StrFormat(
          "config: model %s ('%s', %s, %d layers, hidden %d, vocab %d, %d parameters, "
          "fingerprint %016x); device %s%s, %s weights%s%s, BLAS %s; state %d bytes/sequence, %d "
          "slots; KV "
          "cache %s; "
          "max_model_len %d, "
          "max_tokens_limit %d, max_step_tokens %d%s, max_running %d; sessions: host %d MiB, "
          "disk %s (%d MiB), ttl %s; workers %d; TLS %s; API keys %s; CORS origins %s",
          dir, name, m.config().model_type, m.config().num_hidden_layers, m.config().hidden_size,
          m.vocab_size(), m.num_parameters(), m.fingerprint(), DeviceName(m.device()),
          !o.batch_invariant            ? ""
          : m.device() == Device::kCuda ? " (batch_invariant: no effect on CUDA)"
                                        : " (batch-invariant)",
          absl::AsciiStrToLower(DTypeName(m.matrix_dtype())),
          m.quantized_on_load() ? " (projections quantized to fp8 on load)"
          : m.fp8_kept()        ? " (fp8 ones kept as stored)"
                                : "",
          engine.presampling() ? absl::StrCat(", pre-sampling K=", engine.presample_k()) : "",
          BlasKernels(), m.state_bytes(), engine.num_slots(), kv, o.max_model_len, o.max_new_tokens,
          o.scheduler.max_step_tokens,
          absl::GetFlag(FLAGS_max_step_tokens) == 0 ? " (by device)" : "", o.scheduler.max_running,
          o.tiers.host_bytes >> 20, o.tiers.disk_dir.empty() ? "none" : o.tiers.disk_dir,
          o.tiers.disk_bytes >> 20,
          o.tiers.ttl > absl::ZeroDuration() ? absl::FormatDuration(o.tiers.ttl) : "none",
          so.workers, so.tls_cert.empty() ? "off" : "on",
          so.api_keys_file.empty() ? "off" : so.api_keys_file,
          so.http.allowed_origins.empty() ? "none" : absl::StrJoin(so.http.allowed_origins, ",")));
}

// SIGTERM/SIGINT. Threads that libraries start before main (OpenBLAS's) do not block them, so any
// thread may take one: a handler, installed first thing, wakes the main thread through a pipe to
// drain on the first, and exits at once (status 1) on any later one.
int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

// write(2) to stderr only when it cannot block (a full pipe nobody reads must not stop an exit).
void WriteStderrIfReady(absl::string_view message) {
  pollfd p = {STDERR_FILENO, POLLOUT, 0};
  if (poll(&p, 1, 100) == 1 && (p.revents & POLLOUT) != 0) {
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message.data(), message.size());
  }
}

void OnSignal(int sig) {
  if (g_signals.fetch_add(1) == 0) {
    const unsigned char b = static_cast<unsigned char>(sig);
    [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &b, 1);
    return;
  }
  WriteStderrIfReady("linfer: a second signal during the shutdown: exiting without finishing it\n");
  _exit(1);
}

// Installs OnSignal and blocks the signals in this thread, so that the threads it starts inherit
// the block (their calls are not interrupted); WaitForSignal unblocks them here.
absl::Status InstallSignalHandler(sigset_t* signals) {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot make the signal pipe: ", strerror(errno)));
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigemptyset(signals);
  sigaddset(signals, SIGTERM);
  sigaddset(signals, SIGINT);
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("cannot handle SIGTERM/SIGINT: ", strerror(errno)));
  }
  pthread_sigmask(SIG_BLOCK, signals, nullptr);
  return absl::OkStatus();
}

// Not a signal: the engine found its device lost (ServerOptions::on_device_lost). The process
// then exits with kExitDeviceLost.
constexpr int kDeviceLost = 255;
constexpr int kExitDeviceLost = 3;

void WakeForDeviceLoss() {
  const unsigned char b = kDeviceLost;
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &b, 1);
}

// Tests only (tests/server/hardening_test.py): LINFER_TEST_FORWARD_FAULT="lost:N" fails the
// engine's N-th forward pass (after the warm-up's) as a lost device would, "error:N" as another
// failed step would (EngineOptions::forward_fault). Unset in production; a malformed value is an
// error.
absl::Status TestForwardFault(EngineOptions& eo) {
  const char* env = std::getenv("LINFER_TEST_FORWARD_FAULT");
  if (env == nullptr || *env == '\0') return absl::OkStatus();
  const std::pair<std::string, std::string> kv = absl::StrSplit(env, absl::MaxSplits(':', 1));
  uint64_t nth = 0;
  if ((kv.first != "lost" && kv.first != "error") || !absl::SimpleAtoi(kv.second, &nth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LINFER_TEST_FORWARD_FAULT: expected lost:N or error:N, got '", env, "'"));
  }
  const bool lost = kv.first == "lost";
  Log(LogLevel::kWarning, absl::StrCat("LINFER_TEST_FORWARD_FAULT: forward pass ", nth,
                                       " will fail (", lost ? "a lost device" : "an error", ")"));
  eo.forward_fault = [lost, nth, passes = uint64_t{0}](uint64_t step) mutable {
    if (step == 0 || ++passes != nth) return absl::OkStatus();  // not the warm-up's (step 0)
    const std::string what = "LINFER_TEST_FORWARD_FAULT: the step's forward pass failed";
    return lost ? DeviceLostError(what, what) : absl::InternalError(what);
  };
  return absl::OkStatus();
}

// The first signal's number (it may have come while the model loaded), or kDeviceLost.
int WaitForSignal(const sigset_t& signals) {
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  unsigned char b = 0;
  for (;;) {
    const ssize_t n = read(g_signal_pipe[0], &b, 1);
    if (n == 1) return b;
    if (n == 0 || errno != EINTR) return 0;  // cannot happen: this process holds the write end
  }
}

// From the first signal on, a thread ends the process (status 1, without the rest of the
// shutdown) when the shutdown outlasts `limit`: a handler that never returns, or a worker stuck on
// one request, must not keep a stopped server alive for ever.
void WatchShutdown(absl::Duration limit) {
  std::thread([limit] {
    const std::string message = absl::StrCat(
        "linfer: the shutdown took longer than --drain_timeout_s + --shutdown_timeout_s (",
        absl::FormatDuration(limit), "): exiting without finishing it\n");
    const absl::Time deadline = absl::Now() + limit;  // the infinite future when limit is ∞
    while (absl::Now() < deadline) absl::SleepFor(std::min(deadline - absl::Now(), absl::Hours(1)));
    WriteStderrIfReady(message);
    _exit(1);
  }).detach();
}

}  // namespace

int Serve(const std::vector<std::string>&) {
  sigset_t signals;
  if (absl::Status st = InstallSignalHandler(&signals); !st.ok()) return Fail(st.message());
  RaiseDescriptorLimit();  // many concurrent streams need many descriptors

  // Checked before the model loads: a typo fails at once.
  if (absl::Status st = CheckNumericFlags(); !st.ok()) return Fail(st.message());
  std::vector<std::string> origins;
  for (absl::string_view o : absl::StrSplit(absl::GetFlag(FLAGS_allowed_origins), ',')) {
    o = absl::StripAsciiWhitespace(o);
    if (!o.empty()) origins.emplace_back(o);
  }
  if (absl::Status st = CheckAllowedOrigins(origins); !st.ok()) {
    return Fail(absl::StrCat("--allowed_origins: ", st.message()));
  }
  absl::StatusOr<HttpServerOptions> http = HttpFromFlags(std::move(origins));
  if (!http.ok()) return Fail(http.status().message());
  absl::StatusOr<std::string> dir = ModelDir();
  if (!dir.ok()) return Fail(dir.status().message());
  // The disk directories are locked before the weights load: a second server on one is refused
  // at once.
  EngineOptions disk_flags;
  DiskFlags(disk_flags);
  absl::StatusOr<DiskDirectories> disk_dirs = LockDiskDirectories(disk_flags);
  if (!disk_dirs.ok()) return Fail(disk_dirs.status().message());
  absl::StatusOr<LoadedModel> loaded = LoadModelAndTokenizer(*dir);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  absl::StatusOr<EngineOptions> eo = EngineOptionsFromFlags(*loaded->model);
  if (!eo.ok()) return Fail(eo.status().message());
  if (absl::Status st = TestForwardFault(*eo); !st.ok()) return Fail(st.message());
  eo->detokenizer = loaded->detokenizer;
  eo->encoder = loaded->encoder;
  GenerationDefaults defaults = loaded->defaults;  // end ids checked at load (CheckEndIds)
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(std::move(loaded->model), *eo, *std::move(disk_dirs));
  if (!engine.ok()) return Fail(engine.status().ToString());
  ServerOptions so;
  so.bind = absl::GetFlag(FLAGS_bind);
  so.grpc_port = absl::GetFlag(FLAGS_port);
  so.http_port = absl::GetFlag(FLAGS_http_port);
  so.http = *std::move(http);
  so.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  so.tls_key = absl::GetFlag(FLAGS_tls_key);
  so.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  so.defaults = defaults;
  absl::StatusOr<openai::ChatSetup> chat =
      openai::LoadChatSetup(*dir, absl::GetFlag(FLAGS_chat_template));
  if (!chat.ok()) return Fail(chat.status().ToString());
  if (loaded->tokenizer != nullptr) {
    const ModelConfig& config = (*engine)->model().config();
    std::optional<int64_t> eos = config.eos_token_id;
    if (!eos && !defaults.eos_token_ids.empty()) eos = defaults.eos_token_ids.front();
    openai::NameMissingSpecialTokens(*loaded->tokenizer, config.bos_token_id, eos, &*chat);
  }
  Log(LogLevel::kInfo, chat->chat_template
                           ? absl::StrCat("chat template: ", chat->origin)
                           : std::string("no chat template: /v1/chat/completions is off (give "
                                         "--chat_template FILE)"));
  so.chat = std::make_shared<const openai::ChatSetup>(*std::move(chat));
  so.workers = absl::GetFlag(FLAGS_workers);
  so.stored_responses = absl::GetFlag(FLAGS_stored_responses);
  so.stored_responses_bytes = absl::GetFlag(FLAGS_stored_responses_mb) << 20;
  so.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_mb) << 20;
  so.stream_stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stream_stall_timeout_s));
  so.session_transfer_bytes = absl::GetFlag(FLAGS_session_transfer_mb) << 20;
  so.log_stats_interval = absl::Seconds(absl::GetFlag(FLAGS_log_stats_interval_s));
  so.log_requests = absl::GetFlag(FLAGS_log_requests);
  so.on_device_lost = [](const absl::Status&) { WakeForDeviceLoss(); };
  so.build = {LINFER_VERSION, LINFER_BUILD_TYPE,
              std::string(DeviceName((*engine)->model().device()))};
  std::string name = absl::GetFlag(FLAGS_served_model_name);
  if (name.empty()) name = std::filesystem::path(*dir).filename().string();
  LogConfiguration(*dir, name, **engine, so);
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start(so, *std::move(engine), std::move(loaded->tokenizer), name);
  if (!server.ok()) return Fail(server.status().ToString());
  std::printf("linfer: serving %s on %s:%d (gRPC), HTTP port %d\n", name.c_str(), so.bind.c_str(),
              (*server)->grpc_port(), (*server)->http_port());
  std::fflush(stdout);
  const int sig = WaitForSignal(signals);
  if (sig == kDeviceLost) {
    Log(LogLevel::kError, absl::StrCat("the ", DeviceName((*server)->engine().model().device()),
                                       " device is lost: draining, then exiting with status ",
                                       kExitDeviceLost, " so that the server is restarted"));
  } else {
    Log(LogLevel::kInfo, absl::StrCat("signal ", sig, ": draining"));
  }
  const absl::Duration grace = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  WatchShutdown(grace + absl::Seconds(absl::GetFlag(FLAGS_shutdown_timeout_s)));
  (*server)->Drain(grace);
  const bool lost = (*server)->device_lost();  // also when it came during a signal's drain
  const absl::Status saved = (*server)->shutdown_status();
  server->reset();
  if (lost) return kExitDeviceLost;
  if (!saved.ok()) {
    return Fail(absl::StrCat("shut down, but not everything was saved for the next start: ",
                             saved.message()));
  }
  return 0;
}

}  // namespace linfer::cli
