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
// text) and for the conversation turns they keep alive — a pushed-out response's turn lives on
// while a later response continues it, and still counts; beyond either, the least recently used
// response of the owner holding the most (bytes when over the bytes, else responses) goes — one API
// key filling the store pushes out its own responses, not other keys' — and their sessions are the
// caller's to delete. Thread-safe.
#pragma once

#include <atomic>
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

// The memory an owner's conversation turns take while they live (ConversationTurn::bytes).
struct TurnLedger {
  std::atomic<int64_t> bytes{0};
};

// One response's part of a conversation: its input messages and its reply as chat messages.
// A turn lives as long as any response continuing it (its own may be gone), so the store counts
// turns by what is alive (`ledger`, set by the store when a response holding it is first put),
// not by response.
struct ConversationTurn {
  ~ConversationTurn();  // frees a long chain iteratively, not by recursion; leaves the ledger
  mutable std::shared_ptr<const ConversationTurn> previous;
  Json messages = Json::array();
  mutable int64_t bytes = 0;  // JsonMemoryBytes(messages), once counted in `ledger`
  mutable std::shared_ptr<TurnLedger> ledger;
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

  std::shared_ptr<const StoredResponse> Get(const std::string& owner, const std::string& id);
  // Stores `r`; returns the responses pushed out to make room (any owner's), with their owners:
  // their ids and sessions only (whatever else they held is freed here, not in the caller's
  // hands, so that the budget sees it go).
  std::vector<OwnedResponse> Put(const std::string& owner, StoredResponse r);
  // Removes and returns the response (null when there is none).
  std::shared_ptr<const StoredResponse> Erase(const std::string& owner, const std::string& id);
  int64_t max_bytes() const { return max_bytes_; }
  // How many responses are stored, and about how many bytes of memory their JSON and the turns
  // they keep alive take.
  std::pair<int64_t, int64_t> Size();
  // Removes and returns every response, with its owner, least recently used first; later Puts
  // give back what they are given (the server is stopping).
  std::vector<OwnedResponse> Close();
  // The session of `owner`'s least recently used response that has one, other than `except`'s:
  // taken from it (the response stays, without state) and returned; "" when there is none.
  std::string TakeOldestSession(const std::string& owner, const std::string& except);

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, id)
  struct Entry {
    std::shared_ptr<const StoredResponse> response;
    std::list<Key>::iterator lru;
    int64_t bytes = 0;
  };
  void Remove(std::map<Key, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The response to push out: the least recently used of the owner holding the most bytes (or,
  // within the bytes, the most responses).
  std::map<Key, Entry>::iterator Victim() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Share {
    int64_t count = 0, bytes = 0;
  };
  // The owner's ledger (made on first use and kept: owners are API keys, a bounded set).
  const std::shared_ptr<TurnLedger>& Ledger(const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `owner`'s bytes: its responses' JSON and its live turns.
  int64_t Held(const std::string& owner, const Share& share) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t TotalBytes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const int64_t max_bytes_;
  absl::Mutex mu_;
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::map<Key, Entry> responses_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Share> owners_ ABSL_GUARDED_BY(mu_);  // what each owner holds
  std::map<std::string, std::shared_ptr<TurnLedger>> ledgers_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace linfer::openai
