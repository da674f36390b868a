// One OpenAI generation request in flight: n choices for each prompt, each an engine request (or
// a chain of them), whose events become SSE chunks or one JSON response.
//
// n > 1 computes the prompt once: all but its last token go into a temporary session
// (prefill_only), which is forked n - 1 times; each choice then feeds the last token and samples
// on its own session (seeds seed, seed + 1, ...; the rest of the prompt as repetition_penalty's
// context). Temporary sessions are deleted when the request ends.
//
// Threads: engine events arrive on the engine thread and are only queued; the dispatcher thread
// formats and sends them (one SSE chunk per token event). A stream whose unsent backlog passes a
// high-water mark pauses its engine requests until the client catches up. A client that goes
// away cancels every engine request of its choices at the next step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/request.h"
#include "server/http/http_server.h"
#include "server/openai/dispatcher.h"
#include "server/openai/responses.h"
#include "server/service_context.h"

namespace linfer::openai {

// Generations in flight, for a graceful drain. Thread-safe.
class InFlight {
 public:
  void Add();
  void Done();
  // Waits until none is in flight or `deadline` passes; true when none is.
  bool WaitIdle(absl::Time deadline);

 private:
  absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

// What one choice did (for recording a chat turn on a session).
struct ChoiceOutcome {
  bool ok = false;  // ended with stop or length
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Where the session stands after the reply (its position, and the token pending in it), when
  // the engine said (TokenEvent::session_end): a stop string's tokens are not in the state.
  std::optional<TokenEvent::SessionEnd> session_end;
};

struct GenerationSpec {
  std::vector<GenerateRequest> prompts;  // one engine request per prompt
  std::vector<int64_t> history;          // per prompt: tokens its session held before
  int n = 1;
  int min_tokens = 0;  // every choice's (StopParams::min_tokens)
  // Whether the client set max_tokens (else each prompt's is a default, which may be lowered to
  // bound what a non-streamed response buffers).
  bool max_tokens_given = true;
  bool stream = false, include_usage = false, continuous_usage = false;
  std::string owner;
  bool user_session = false;  // the requests run on the client's session (then one prompt, n 1)
  // Streaming: start the stream (and send the formatter's head) once the engine has taken the
  // request, not with the first token; later errors then end the stream rather than answer with
  // an HTTP error status.
  bool stream_head_at_once = false;
  std::vector<std::pair<std::string, std::string>> headers;  // response headers
  // Runs with choice 0's outcome once it has ended, before the response's last byte goes out
  // (a client's next request on the session must find what this one recorded). Keep it cheap:
  // it runs on the thread that completes the response.
  std::function<void(const ChoiceOutcome&)> on_done;
};

// Logprob entries a response may hold at once (≈ 370 bytes each as JSON): without stream
// n × max_tokens × (1 + top_logprobs) over its prompts (a stream sends them as they come), and
// the echoed prompts' entries (they go out together, in the first chunk).
inline constexpr int64_t kMaxBufferedLogprobs = int64_t{1} << 22;
// Prompt token ids a response may repeat (vLLM's return_token_ids: each prompt's on each of its
// choices; ≈ 7 bytes each as JSON).
inline constexpr int64_t kMaxResponsePromptIds = int64_t{1} << 22;

// Refuses a response over kMaxBufferedLogprobs; when its max_tokens was only the default
// (!spec.max_tokens_given), lowers each prompt's to fit instead (its choices then end with
// "length" there, as at any max_tokens).
absl::Status FitBufferedLogprobs(GenerationSpec& spec);

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  struct Env {
    ServiceContext* ctx;
    Dispatcher* dispatcher;
    InFlight* in_flight;
  };
  // Starts the request (blocking briefly for session set-up); the response follows
  // asynchronously.
  static void Start(const Env& env, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec,
                    std::unique_ptr<Formatter> formatter);

 private:
  struct Choice {
    int group = 0;
    std::optional<GenerateRequest> request;  // still to submit
    RequestId id = 0;                        // the engine request running (0: none yet)
    bool done = false, saw_token = false;
    absl::Time last_token;
    int64_t completion = 0, cached = 0;
    double queued_seconds = 0;  // in the queue before this choice's request (its group's prefill)
    double queue_total = 0, ttft = 0;  // from the client's request, at the first token
    ChoiceEnd end;
  };
  struct Pending {
    int choice = 0;
    TokenEvent event;
    bool ends_choice = false;
  };
  Generation(const Env& env, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec,
             std::unique_ptr<Formatter> formatter);
  void Begin();
  void BeginGroup(int group);
  void ForkGroup(int group, const std::string& base, std::vector<int32_t> prompt);
  void OnPrefillEvent(int group, const std::string& base, TokenEvent e);
  void FailGroup(int group, const absl::Status& status);
  void SubmitNext(int choice);
  void OnEvent(int choice, TokenEvent e);
  void Queue(int choice, TokenEvent e, bool ends_choice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Cancel();
  void Flush();
  void StartStream(std::string* sse);
  void OpenStream();
  void Format(std::vector<Pending>& batch, std::string* sse);
  void Complete();
  void Backpressure();
  bool PollResume();
  ChoiceOutcome Outcome() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finalize();
  UsageTotals Totals() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Choice `index`'s request: its seed, its own structured output, min_tokens.
  GenerateRequest ChoiceRequest(GenerateRequest request, int index) const;

  Env env_;
  const absl::Time start_;  // the client's request taken: its latencies count from here
  std::shared_ptr<HttpExchange> exchange_;
  std::shared_ptr<HttpStream> stream_;
  GenerationSpec spec_;
  std::unique_ptr<Formatter> fmt_;  // dispatcher thread only
  bool started_ = false;            // dispatcher thread: the stream has started
  int64_t emitted_tokens_ = 0;      // dispatcher thread

  absl::Mutex mu_;
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> temps_ ABSL_GUARDED_BY(mu_);   // temporary sessions
  std::vector<RequestId> prefills_ ABSL_GUARDED_BY(mu_);  // prefill requests in flight
  // n > 1: per prompt, what its prefill took from the prefix cache (the forks start from it).
  std::vector<int64_t> prefill_cached_ ABSL_GUARDED_BY(mu_);
  bool flush_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;  // choices not ended
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace linfer::openai
