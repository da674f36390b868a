// What submitters hand the engine and what they get back: plain structs (no protobuf).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "engine/token_constraint.h"

namespace linfer {

using RequestId = uint64_t;

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids; may be empty when continuing a session
  // Tokens before `prompt` that repetition_penalty counts as prompt (vLLM's prompt context): the
  // part of a client's prompt already in the session's state (the OpenAI front end's n > 1 forks
  // feed only the prompt's last token). At most max_model_len tokens, in the vocabulary.
  std::vector<int32_t> penalty_context;
  std::string session_id;  // empty: a one-off sequence
  std::string owner;       // identity for session ownership (API key), "" = anonymous
  // The session's tokens (SessionInfo::position) the prompt was prepared against — a chat turn
  // rendered after them, special tokens added or not. When set and the session holds another
  // count when the engine resolves the session, at the first step after Submit (another request
  // on it ended in between, or it was replaced), the request fails with Aborted and leaves the
  // session as it is.
  std::optional<int64_t> session_history;
  SamplingParams sampling;
  StopParams stop;   // stop.eos_token_id defaults to the model's
  int priority = 0;  // lower runs first
  absl::Time deadline = absl::InfiniteFuture();
  // Only consume the prompt into the session's state: no token is sampled (the request ends
  // with kLength and no token). Needs a session. Used to compute a shared prompt once, then
  // fork the session (OpenAI's n > 1).
  bool prefill_only = false;
  // A step of a client's request rather than one (the OpenAI front end's prefill before n > 1
  // forks): when it ends as planned (kLength) it is left out of the finished-request counts, so
  // that each client request counts once.
  bool partial = false;
  // The session goes away after this request (the OpenAI front end's n > 1 forks): what its state
  // holds afterwards does not matter, so a stop string's tokens are left in it
  // (EngineOptions::encoder).
  bool temporary_session = false;
  // Structured output (null: none): which tokens may come next. Its rows come back whole from the
  // device (no pre-sampling); a stop token ends the output only once it is complete (and past
  // stop.min_tokens), and a complete output that cannot go on ends with kStop. Stateful: another
  // choice needs its own (TokenConstraint::Fresh).
  std::shared_ptr<TokenConstraint> constraint;
  // The prompt's own logprobs (vLLM's prompt_logprobs; OpenAI's echo with logprobs): for every
  // prompt token after the first, its raw-model logprob given the tokens before it, and the n
  // most likely tokens there (n in [0, 20]). The prompt is then computed from its first token (no
  // prefix-cache hit). One-off requests only.
  std::optional<int32_t> prompt_logprobs;
  // vLLM's cache_salt: the prefix cache's entries this request saves are found only by requests
  // of the same owner with the same salt, and it finds only theirs ("": the owner's unsalted
  // entries) — clients sharing an API key that must not learn one another's prompts from
  // cache-hit timing. At most kMaxCacheSaltBytes bytes.
  std::string cache_salt;
};
inline constexpr size_t kMaxCacheSaltBytes = 1024;

// One prompt token's logprob entry (GenerateRequest::prompt_logprobs); the first token has none.
struct PromptLogprob {
  int32_t token = -1;
  std::optional<float> logprob;
  int32_t rank = 0;  // with a logprob: 1 + the tokens more likely there (vLLM's rank)
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Why a generation ended (kStop/kLength from the stop checker; the rest from the engine).
enum class Finish { kNone, kStop, kLength, kCancelled, kDeadline, kError };
absl::string_view FinishName(Finish finish);  // "stop", "length", "cancelled", ...

struct Usage {
  int64_t prompt_tokens = 0;      // tokens of this request's prompt
  int64_t cached_tokens = 0;      // tokens already in the session's state (not recomputed)
  int64_t completion_tokens = 0;  // tokens generated
  double queue_seconds = 0;       // submission → first scheduled
  double ttft_seconds = 0;        // submission → first token
  double total_seconds = 0;       // submission → finish
};

// One event per generated token, then a final one (finish != kNone) carrying usage. The final
// event may also carry a token (the one that ended it by length) and the flushed text.
struct TokenEvent {
  RequestId request = 0;
  int32_t token = -1;  // −1: no token in this event
  std::string text;    // complete UTF-8 (empty without a detokenizer)
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top_logprobs;
  // With GenerateRequest::prompt_logprobs, in the request's first event: one entry per prompt
  // token, in order.
  std::vector<PromptLogprob> prompt_logprobs;
  Finish finish = Finish::kNone;
  std::optional<int32_t> stop_token;
  std::optional<std::string> stop_string;
  absl::Status error;  // with kError
  Usage usage;         // filled in the final event
  // A session request's final event: where the session stands now (what its next turn continues
  // from). Its position is not always history + prompt + completion: a stop string's tokens are
  // taken back out of the state (EngineOptions::encoder).
  struct SessionEnd {
    int64_t position = 0;            // SessionInfo::position (the pending token counts)
    std::optional<int32_t> pending;  // the token its next request feeds first
  };
  std::optional<SessionEnd> session_end;
};

// Called on the engine thread, in order, once per event; must be quick and must not call back
// into the engine synchronously.
using EventSink = std::function<void(TokenEvent)>;

// Incremental detokenizer for one stream: Push returns complete UTF-8 text for the token.
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  virtual std::string Push(int32_t token) = 0;
  virtual std::string Flush() = 0;  // whatever is held back at the end
  // Whether every token pushed so far has all its text out (nothing held back for later tokens).
  virtual bool Settled() const = 0;
};
// One detokenizer per stream; `context` is the prompt the stream continues (its last ids set where
// a first token's leading space goes).
using DetokenizerFactory =
    std::function<std::unique_ptr<Detokenizer>(absl::Span<const int32_t> context)>;
// Text -> token ids (no special tokens added), for text that continues a stream.
using TextEncoder = std::function<absl::StatusOr<std::vector<int32_t>>(absl::string_view text)>;

}  // namespace linfer
