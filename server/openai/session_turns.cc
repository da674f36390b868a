// SessionTurns and the session turn rule (see session_turns.h).
#include "server/openai/session_turns.h"

#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace linfer::openai {
namespace {

// A marker no client text contains: 64 random bits per request.
std::string NewMarker() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("<<linfer-turn-%016x>>", rng());
}

bool Matches(const Json& messages, const std::vector<uint64_t>& digests, size_t* first_mismatch) {
  const size_t n = std::min(messages.size(), digests.size());
  for (size_t i = 0; i < n; ++i) {
    if (MessageDigest(messages[i]) != digests[i]) {
      *first_mismatch = i;
      return false;
    }
  }
  *first_mismatch = n;
  return true;
}

// How many of the request's messages the session already holds (0: all are new).
absl::StatusOr<int> HistoryMessages(const ChatRequest& r, const TurnRecord& record) {
  const std::vector<uint64_t>& d = record.digests;
  if (d.empty()) return 0;
  size_t mismatch = 0;
  const bool prefix = Matches(r.messages, d, &mismatch);
  if (prefix && r.messages.size() > d.size()) return static_cast<int>(d.size());
  if (r.messages.size() < 2 || MessageDigest(r.messages[0]) != d[0]) return 0;  // new ones only
  if (prefix) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages: the session already holds every one of them (", MessageField(r, 0),
                     " to ", MessageField(r, r.messages.size() - 1), "); add a new message"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      MessageField(r, mismatch), ": differs from the session's history (", d.size(),
      " messages); send the whole conversation unchanged, or only the new messages, or use a "
      "new session"));
}

}  // namespace

bool RepeatsOnlySystem(const ChatRequest& r, const TurnRecord& record) {
  const std::vector<uint64_t>& d = record.digests;
  if (d.empty() || r.messages.size() < 2 || r.messages[0].value("role", Json()) != "system") {
    return false;
  }
  size_t held = 0;  // the request's first messages that the session holds
  const bool prefix = Matches(r.messages, d, &held);
  if (held == 0 || held >= 3 || (prefix && r.messages.size() > d.size())) return false;
  if (r.messages.size() <= d.size() || d.size() <= 2) return true;
  size_t i = 2;  // the rest as the session holds it: only the first message changed
  while (i < d.size() && MessageDigest(r.messages[i]) == d[i]) ++i;
  return i < d.size();
}

uint64_t MessageDigest(const Json& m) {
  const std::string role = m.value("role", std::string());
  if (role == "assistant") return std::hash<std::string>{}(role);
  std::string key = absl::StrCat(role, "\x1f", Dump(m.value("content", Json())));
  if (auto it = m.find("tool_call_id"); it != m.end()) absl::StrAppend(&key, "\x1f", Dump(*it));
  if (auto it = m.find("name"); it != m.end()) absl::StrAppend(&key, "\x1f", Dump(*it));
  return std::hash<std::string>{}(key);
}

std::optional<TurnRecord> SessionTurns::Get(const std::string& owner, const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find({owner, id});
  if (it == records_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return it->second.first;
}

void SessionTurns::Put(const std::string& owner, const std::string& id, TurnRecord record) {
  absl::MutexLock lock(&mu_);
  Key key{owner, id};
  auto it = records_.find(key);
  if (it != records_.end()) {
    it->second.first = std::move(record);
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return;
  }
  lru_.push_front(key);
  records_.emplace(std::move(key), std::make_pair(std::move(record), lru_.begin()));
  while (records_.size() > capacity_) {
    records_.erase(lru_.back());
    lru_.pop_back();
  }
}

void SessionTurns::Erase(const std::string& owner, const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find({owner, id});
  if (it == records_.end()) return;
  lru_.erase(it->second.second);
  records_.erase(it);
}

absl::StatusOr<TurnText> RenderTurn(const ChatSetup& setup, const ChatRequest& r, int64_t position,
                                    const std::optional<TurnRecord>& record) {
  TurnText out;
  if (position == 0) {
    ASSIGN_OR_RETURN(out.text, RenderChat(setup, r, r.messages, r.add_generation_prompt));
    if (r.continue_final_message) {
      ASSIGN_OR_RETURN(out.text, CutAfterFinalMessage(out.text, r.messages));
    }
    return out;
  }
  if (r.continue_final_message) {
    // The session's record would hold the continued message and the reply as two messages.
    return absl::InvalidArgumentError(
        "continue_final_message: not supported with session_id (continue the session with a new "
        "message instead)");
  }
  if (record && record->position == position) {
    ASSIGN_OR_RETURN(out.history_messages, HistoryMessages(r, *record));
  }
  const std::string marker = NewMarker();
  const Json reply = {{"role", "assistant"}, {"content", marker}};
  Json messages = Json::array();
  if (out.history_messages > 0) {
    for (int i = 0; i + 1 < out.history_messages; ++i) messages.push_back(r.messages[i]);
  } else {
    messages.push_back({{"role", "user"}, {"content", "."}});
  }
  messages.push_back(reply);
  for (size_t i = out.history_messages; i < r.messages.size(); ++i) {
    messages.push_back(r.messages[i]);
  }
  ASSIGN_OR_RETURN(std::string text, RenderChat(setup, r, messages, r.add_generation_prompt));
  const size_t at = text.find(marker);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "session_id: this chat template does not write assistant replies into the prompt, so a "
        "session cannot be continued with it");
  }
  out.text = text.substr(at + marker.size());
  out.appended = true;
  return out;
}

TurnRecord NextRecord(const std::optional<TurnRecord>& old, const ChatRequest& r,
                      const TurnText& turn, int64_t position, std::optional<int32_t> pending) {
  TurnRecord next;
  next.position = position;
  next.pending = pending;
  if (turn.appended && turn.history_messages == 0 && old) next.digests = old->digests;
  const bool known = !turn.appended || turn.history_messages > 0 || (old && !old->digests.empty());
  if (!known) return next;  // the history is unknown: later requests append
  for (const Json& m : r.messages) next.digests.push_back(MessageDigest(m));
  next.digests.push_back(MessageDigest(Json{{"role", "assistant"}}));
  return next;
}

}  // namespace linfer::openai
