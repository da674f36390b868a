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
// The store holds at most `capacity` responses (all owners); beyond it the least recently used
// goes, and its session is the caller's to delete. Thread-safe.
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
  Json tools, kwargs;
  std::string session_id;          // "" when the response kept no state
  int64_t position = 0;            // the session's position after the reply
  std::optional<int32_t> pending;  // the reply's last token, pending in the state
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }

  std::shared_ptr<const StoredResponse> Get(const std::string& owner, const std::string& id);
  // Stores `r`; returns the responses pushed out to make room.
  std::vector<std::shared_ptr<const StoredResponse>> Put(const std::string& owner,
                                                         StoredResponse r);
  // Removes and returns the response (null when there is none).
  std::shared_ptr<const StoredResponse> Erase(const std::string& owner, const std::string& id);
  // Removes and returns every response, with its owner.
  std::vector<std::pair<std::string, std::shared_ptr<const StoredResponse>>> Clear();

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, id)
  const size_t capacity_;
  absl::Mutex mu_;
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::map<Key, std::pair<std::shared_ptr<const StoredResponse>, std::list<Key>::iterator>>
      responses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace linfer::openai
