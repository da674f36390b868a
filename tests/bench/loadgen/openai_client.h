// The OpenAI-compatible HTTP client of the load generator: streaming `POST /v1/completions`
// (stream, stream_options.include_usage) read as Server-Sent Events on libevent's evhttp client,
// every stream on one event-loop thread, timed the way `vllm bench serve` times a stream.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "tests/bench/loadgen/client.h"

namespace linfer::bench {

// Splits a byte stream into Server-Sent Events and hands over each event's data (the `data:`
// lines joined with '\n'); comments, other fields and events without data are skipped.
class SseReader {
 public:
  // `fn` runs once per event completed by `bytes` (bytes may cut events anywhere).
  void Feed(absl::string_view bytes, const std::function<void(absl::string_view)>& fn);

 private:
  std::string pending_;  // bytes of the event not yet complete
};

// The /v1/completions body for `request`: its token-id prompt, max_tokens, ignore_eos,
// temperature (and seed when sampling), session_id, stream with include_usage.
nlohmann::json CompletionBody(const v1::GenerateRequest& request, const std::string& model);

// What one SSE event of a completion stream carries, for the client's bookkeeping.
struct CompletionEvent {
  bool done = false;          // data: [DONE]
  bool token = false;         // a chunk carrying a generated token (one per token)
  bool finished = false;      // choices[0].finish_reason is set
  bool has_usage = false;     // the include_usage chunk
  int64_t prompt_tokens = 0;  // usage
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  std::string error;          // not JSON, or an error object: its message
};
CompletionEvent ParseCompletionEvent(absl::string_view data);

class OpenAiClient : public StreamClient {
 public:
  // `server` is a loopback HOST:PORT, the HTTP port of `linfer serve` (else InvalidArgument).
  // Raises this process's open-file limit to its hard limit: every stream is one connection.
  static absl::StatusOr<std::unique_ptr<OpenAiClient>> Connect(const std::string& server,
                                                               const std::string& api_key);
  // Stops the event loop; call it with nothing in flight.
  ~OpenAiClient() override;

  // Polls GET /v1/models until it answers 200 (returns the model id) or `timeout_s` passes.
  absl::StatusOr<std::string> WaitReady(double timeout_s);

  // One streaming POST /v1/completions of CompletionBody(request, model) on a new connection;
  // `done` runs on the event-loop thread. keep_output_ids is not supported (text only).
  void Start(const v1::GenerateRequest& request, Clock::time_point t0, Clock::time_point deadline,
             bool keep_output_ids, RequestResult* out, std::function<void()> done) override;

  void set_model(std::string model) { model_ = std::move(model); }

  struct Impl;

 private:
  explicit OpenAiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string model_;
};

}  // namespace linfer::bench
