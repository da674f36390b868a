// The engine's record of one request (engine-internal). Owned by the engine thread once taken
// in from the hand-over queue; other threads never touch it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/session_reply.h"
#include "engine/stop.h"

namespace linfer {

// A copy of a session's state to go back to (Engine::KeepStateCopy).
struct Engine::StateCopy {
  int slot = -1;   // a slot holding it (StatePool::CheckpointToSlot), or −1: `host`
  HostState host;  // (StatePool::Checkpoint)
};

struct Engine::Seq {
  RequestId id = 0;
  GenerateRequest req;
  EventSink sink;
  std::string owner_tag;
  // The prefix cache's owner: owner_tag, with the request's cache_salt after it when it has one.
  std::string prefix_tag;
  std::vector<int32_t> tokens;  // pending session token + prompt + generated
  int64_t computed = 0;         // tokens of `tokens` consumed into the state
  int64_t prompt_end = 0;       // tokens.size() once the prompt (with pending token) is in
  int64_t cached = 0;           // the session state's position at the start
  int slot = -1;                // while running (and for sessions, while in a slot)
  // A request starting from a prefix saved in a slot (the prefix cache's device tier): its length,
  // until admission copies that slot (a one-off with no slot free takes it over; a session's first
  // request copies it into the session's slot) — waiting requests hold no slot, so a request ahead
  // of them in the queue is never left without one.
  int64_t slot_prefix = 0;
  // A preempted one-off sequence's state, or the saved prefix it starts from; a session's first
  // request: the saved prefix to load from host RAM (prefix-cache states are shared with the
  // cache, not copied).
  std::shared_ptr<const HostState> parked;
  std::shared_ptr<const HostState> prefix;
  int64_t last_snapshot = 0;  // `computed` at the last prefix-cache snapshot
  int64_t branch_at = 0;  // a one-off prompt's branch point (PrefixCache::BranchPoint): saved there
  // A session's state before this request, kept while its prompt is unfinished (rollback: a cancel,
  // deadline or error mid-prompt leaves the session as it was). Host bytes none: the zero state.
  std::optional<StateCopy> checkpoint;
  std::optional<int32_t> session_pending;  // the session's pending token before this request
  SessionStore::Session* session = nullptr;
  bool session_resolved = false;
  std::optional<Sampler> sampler;
  std::optional<StopChecker> stop;
  std::unique_ptr<Detokenizer> detok;
  // A session turn with stop strings (EngineOptions::encoder; session_reply.h): its reply's trace
  // and, while text is held back, the state after its clean tokens (trace->clean). Once a stop
  // string ends it, `refeed` while the visible reply's tokens are fed again: the final event, held
  // until they are in, and the last visible token, left pending.
  std::optional<ReplyTrace> trace;
  std::optional<StateCopy> clean_state;
  struct Refeed {
    linfer::Finish why;
    TokenEvent event;
    int32_t last;
  };
  std::optional<Refeed> refeed;
  std::vector<int32_t> generated;
  // GenerateRequest::penalty_context + prompt, when repetition_penalty needs it (else empty).
  std::vector<int32_t> penalty_prompt;
  // The context the penalties count as prompt.
  absl::Span<const int32_t> PenaltyPrompt() const {
    return penalty_prompt.empty() ? absl::Span<const int32_t>(req.prompt) : penalty_prompt;
  }
  // GenerateRequest::prompt_logprobs: the entries so far (sent with the first event).
  std::vector<PromptLogprob> prompt_lp;
  bool prompt_lp_sent = false;
  // Structured output: the next token's mask ([ceil(vocab / 64)] words) and whether PrepareMasks
  // made it for this step.
  std::vector<uint64_t> mask;
  bool mask_ready = false;
  // The constraint was Advanced past the token being emitted (SampleConstrained); otherwise Emit
  // advances a Free() one.
  bool constraint_advanced = false;
  bool cancelled = false, paused = false, admitted_once = false;
  // A step computing it failed: its state may have moved part of the way (some layers updated).
  bool forward_failed = false;
  uint64_t arrival = 0, waiting_since = 0;
  absl::Time submitted, scheduled = absl::InfinitePast(), first_token = absl::InfinitePast();
};

// What one step hands back: events to emit after the step, finished requests (kept alive until
// their events are out) and queue accounting to apply under the lock.
struct Engine::StepOutput {
  struct Emit {
    EventSink* sink;
    TokenEvent event;
  };
  std::vector<Emit> emits;
  std::vector<std::unique_ptr<Seq>> done;
  int dequeued = 0;             // requests that left the waiting queue for good
  int64_t dequeued_tokens = 0;  // their prompt tokens
  int finished = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0, cached_tokens = 0, preemptions = 0;
  double forward_seconds = 0, snapshot_seconds = 0;  // EngineStats' forward / snapshot shares
  std::map<std::string, int64_t> finished_by;
};

}  // namespace linfer
