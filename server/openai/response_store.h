// Stored responses (/v1/responses with "store": true, the default): what GET /v1/responses/{id}
// returns and what a request naming it as `previous_response_id` continues.
//
// A stored response keeps the session its reply was generated on (in the sessions' own tiers:
// slot → host → disk, under an owner namespace of its own), so a continuation forks that state
// and computes only the new input — the conversation is never prefilled again. The conversation
// as messages is kept too (each response's input and reply, linked to its predecessor's, shared
// along the chain), so a continuation whose session was evicted, or that changes the
// instructions or tools, renders the whole conversation instead: slower, never wrong.
//
// The store holds at most `capacity` responses and about `max_bytes` of memory for their JSON
// (all owners; JsonMemoryBytes, not the text's length: a parsed value takes several times its
// text) and for every conversation turn its responses reach — a pushed-out response's turn
// stays while a stored response continues it, and still counts; beyond either, the least recently
// used response of the owner holding the most (bytes when over the bytes, else responses) goes —
// one API key filling the store pushes out its own responses, not other keys' — and their sessions
// are the caller's to delete. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/openai/json_fields.h"

namespace linfer::openai {

// One response's part of a conversation: its input messages and its reply as chat messages.
struct ConversationTurn {
  ~ConversationTurn();  // frees a long chain iteratively, not by recursion
  mutable std::shared_ptr<const ConversationTurn> previous;
  Json messages = Json::array();
  // The store's count (under its lock; a turn is in one store): the stored responses whose turn
  // this is, plus this turn's continuations it counts. Above 0, the store reaches this turn and
  // counts its `bytes` (JsonMemoryBytes(messages)).
  mutable int64_t retained = 0;
  mutable int64_t bytes = 0;
};

// The whole conversation up to and including `turn`, oldest message first.
Json ConversationMessages(const std::shared_ptr<const ConversationTurn>& turn);

struct StoredResponse {
  std::string id;
  Json response;                     // the response object, as returned
  Json input_items = Json::array();  // the request's input items (with ids)
  std::shared_ptr<const ConversationTurn> turn;
  // What the session's state was computed with; a continuation that changes them re-renders.
  std::optional<std::string> instructions;
  Json tools;
  std::string session_id;          // "" when the response kept no state
  int64_t position = 0;            // the session's position after the reply
  std::optional<int32_t> pending;  // the reply's last token, pending in the state
};

// About the heap memory a parsed JSON value takes (nlohmann's nodes, strings and containers, and
// the allocator's overhead per allocation): walked without recursion.
int64_t JsonMemoryBytes(const Json& value);

// A stored response with the owner (API key) it belongs to.
using OwnedResponse = std::pair<std::string, std::shared_ptr<const StoredResponse>>;

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity, int64_t max_bytes = int64_t{1} << 30)
      : capacity_(capacity), max_bytes_(max_bytes) {}
  // None is kept (--stored_responses 0, or --stored_responses_mb 0): every response is made as
  // with "store": false.
  bool off() const { return capacity_ == 0 || max_bytes_ <= 0; }

  std::shared_ptr<const StoredResponse> Get(const std::string& owner, const std::string& id);
  // Stores `r`; returns the responses pushed out to make room (any owner's), with their owners:
  // their ids and sessions only (what else they held is let go here, as the budget counts).
  std::vector<OwnedResponse> Put(const std::string& owner, StoredResponse r);
  // Removes and returns the response (null when there is none).
  std::shared_ptr<const StoredResponse> Erase(const std::string& owner, const std::string& id);
  int64_t max_bytes() const { return max_bytes_; }
  // How many responses are stored, and about how many bytes of memory their JSON and the turns
  // they reach take.
  std::pair<int64_t, int64_t> Size();
  // Removes and returns every response, with its owner, least recently used first; later Puts
  // give back what they are given (the server is stopping).
  std::vector<OwnedResponse> Close();
  // The session of `owner`'s least recently used response that has one, other than `except`'s:
  // taken from it (the response stays, without state) and returned; "" when there is none.
  std::string TakeOldestSession(const std::string& owner, const std::string& except);

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, id)
  struct Share {
    int64_t count = 0, bytes = 0;
  };
  struct Entry {
    std::shared_ptr<const StoredResponse> response;
    std::list<Key>::iterator lru;
    int64_t bytes = 0;
  };
  void Remove(std::map<Key, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stored response of `share`'s owner with turn `turn` came or went: the turns it newly
  // reaches (or no longer reaches) are counted in (or out of) `share` and the total. Walks only
  // as far back as a turn another stored response still reaches.
  void Retain(const ConversationTurn* turn, Share& share) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(const ConversationTurn* turn, Share& share) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The response to push out: the least recently used of the owner holding the most bytes (or,
  // within the bytes, the most responses).
  std::map<Key, Entry>::iterator Victim() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const int64_t max_bytes_;
  absl::Mutex mu_;
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::map<Key, Entry> responses_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Share> owners_ ABSL_GUARDED_BY(mu_);  // what each owner holds
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace linfer::openai
