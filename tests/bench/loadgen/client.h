// linfer.v1 calls for the load generator: streaming Generate through the gRPC callback API, timed
// on the client the way `vllm bench serve` times a stream (SERVING.md §5), plus the ready check
// and session create/delete.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "linfer/v1/generation.grpc.pb.h"
#include "linfer/v1/models.grpc.pb.h"
#include "linfer/v1/sessions.grpc.pb.h"
#include "tests/bench/loadgen/workload.h"

namespace linfer::bench {

using Clock = std::chrono::steady_clock;

// One request as the client saw it. Times in seconds; start_s counts from the run's start, the
// others from start_s.
struct RequestResult {
  bool success = false;          // status OK and at least one token received
  std::string error;             // "CODE: message" when !success
  double start_s = 0;            // just before the call starts (after any concurrency wait)
  double ttft_s = 0;             // first message carrying tokens
  double latency_s = 0;          // E2E: last message carrying tokens
  std::vector<double> itls_s;    // gap before each later token-carrying message
  int64_t prompt_tokens = 0;     // sent by the client
  int64_t requested_tokens = 0;  // max_tokens (exact with ignore_eos)
  int64_t output_tokens = 0;     // usage.completion_tokens
  int64_t received_tokens = 0;   // token ids streamed back
  int64_t usage_prompt_tokens = 0;
  int64_t cached_tokens = 0;        // usage.cached_tokens (session history reused)
  double server_ttft_s = 0;         // usage.ttft_seconds
  std::vector<int32_t> output_ids;  // kept only when asked (multi-turn replies)
};

// HOST:PORT with a loopback host (127.0.0.0/8, localhost, [::1]).
bool IsLoopback(const std::string& server);

// A GenerateRequest for `spec`: token-id prompt, max_tokens = output_len, ignore_eos, greedy
// unless temperature > 0 (then seeded by `seed`), on `session_id` when not empty.
v1::GenerateRequest MakeRequest(const RequestSpec& spec, double temperature, uint64_t seed,
                                const std::string& session_id);

// A streaming generation client: gRPC (BenchClient) or OpenAI HTTP/SSE (OpenAiClient). The
// dispatch loop and the metrics see only this.
class StreamClient {
 public:
  virtual ~StreamClient() = default;

  // Starts one streaming generation of `request` and returns at once. `out` must outlive the
  // call; `done` runs exactly once, on a client thread, after `out` is complete. `t0` is the
  // run's start; the call is cancelled at `deadline` (DEADLINE_EXCEEDED). Thread-safe.
  virtual void Start(const v1::GenerateRequest& request, Clock::time_point t0,
                     Clock::time_point deadline, bool keep_output_ids, RequestResult* out,
                     std::function<void()> done) = 0;

  // Start, then wait for it.
  RequestResult Run(const v1::GenerateRequest& request, Clock::time_point t0,
                    Clock::time_point deadline, bool keep_output_ids);
};

class BenchClient : public StreamClient {
 public:
  // `server` is HOST:PORT on a loopback address (127.0.0.0/8, localhost, ::1), else
  // InvalidArgument: the load generator never leaves the machine.
  static absl::StatusOr<std::unique_ptr<BenchClient>> Connect(const std::string& server,
                                                              const std::string& api_key);

  // Polls Models.Info until it answers or `timeout_s` passes (Unavailable).
  absl::StatusOr<v1::ModelInfo> WaitReady(double timeout_s);

  // One streaming Generate (StreamClient::Start); `done` runs on a gRPC thread.
  void Start(const v1::GenerateRequest& request, Clock::time_point t0, Clock::time_point deadline,
             bool keep_output_ids, RequestResult* out, std::function<void()> done) override;

  absl::Status CreateSession(const std::string& id);
  absl::Status DeleteSession(const std::string& id);

 private:
  BenchClient() = default;
  void AddAuth(grpc::ClientContext* ctx) const;

  std::string api_key_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::Sessions::Stub> sessions_;
  std::unique_ptr<v1::Models::Stub> models_;
};

}  // namespace linfer::bench
