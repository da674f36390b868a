// Chat on a session: which messages are new, and the text to append for them.
//
// The rule. A session's state is the conversation exactly as the model saw it: the first turn's
// rendered prompt, then every reply as it was generated (reasoning included), then each later
// turn's appended text. History is never re-rendered, so a template that rewrites earlier turns
// (Qwen3.5 drops past <think> blocks, and renders the empty think block only on the generation
// prompt) never forces a re-prefill. The text appended for new messages N after history H is what
// the template writes after the last history message's content when it renders H + N: H's last
// message (the previous reply) is rendered with a unique marker as its content (no reasoning, no
// tool calls: those are in the state already), and everything after the marker is appended —
// the reply's closing tokens, N's messages and the generation prompt. When the state's pending
// last token (the reply's end-of-turn token, e.g. <|im_end|>) is the first token of that text,
// it is not repeated. The system prompt and tools belong to the first turn: later changes to them
// do not reach a session's state.
//
// Which messages are new. After each turn the server records, per session, a digest of every
// message (the reply counts as one assistant message, matched by role only, since clients send
// it back without reasoning). A request whose `messages` extend that record (more messages, the
// recorded ones equal) sends the full conversation: only the extra ones are new. Otherwise all of
// `messages` are new (the client sends only the new turn). A request that repeats the recorded
// first message but then differs (an edited conversation) is refused, since appending it would
// duplicate the history. Records live in memory: after a restart, or when another API changed the
// session, requests append (send only the new messages).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/openai/chat_request.h"

namespace linfer::openai {

struct TurnRecord {
  std::vector<uint64_t> digests;   // one per message the session has consumed, reply included
  int64_t position = 0;            // the session's position (SessionInfo) after the turn
  std::optional<int32_t> pending;  // the reply's last token: pending in the state
};

// Records by (owner, session id); the least recently used beyond `capacity` are dropped.
// Thread-safe.
class SessionTurns {
 public:
  explicit SessionTurns(size_t capacity = 1 << 16) : capacity_(capacity) {}
  std::optional<TurnRecord> Get(const std::string& owner, const std::string& id);
  void Put(const std::string& owner, const std::string& id, TurnRecord record);
  void Erase(const std::string& owner, const std::string& id);

 private:
  using Key = std::pair<std::string, std::string>;
  const size_t capacity_;
  absl::Mutex mu_;
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::map<Key, std::pair<TurnRecord, std::list<Key>::iterator>> records_ ABSL_GUARDED_BY(mu_);
};

// Role and content of a message (assistant messages: role only).
uint64_t MessageDigest(const Json& message);

struct TurnText {
  std::string text;          // to tokenize (no special tokens added) and append
  int history_messages = 0;  // messages of the request already in the session
  bool appended = false;     // text continues a state (else it is a whole conversation)
};

// The text for request `r` on a session at `position` tokens (0: fresh, or no session), with its
// record if any (ignored unless its position matches).
absl::StatusOr<TurnText> RenderTurn(const ChatSetup& setup, const ChatRequest& r, int64_t position,
                                    const std::optional<TurnRecord>& record);

// Anthropic's `system` comes with every request: whether `r` is the session's system prompt sent
// again with only new messages after it (it is then the session's first message, not a new one),
// rather than the session's history sent again — whole with new messages after it, or changed:
// its first two messages after the system prompt are the session's next two, or it is longer
// than the history and only its first message after the system prompt differs.
bool RepeatsOnlySystem(const ChatRequest& r, const TurnRecord& record);

// The record after a turn: the request's messages (from `history_messages` on) appended to the
// old record's digests, plus the reply.
TurnRecord NextRecord(const std::optional<TurnRecord>& old, const ChatRequest& r,
                      const TurnText& turn, int64_t position, std::optional<int32_t> pending);

}  // namespace linfer::openai
