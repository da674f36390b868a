// ResponseStore.
#include "server/openai/response_store.h"

#include "common/heap_bytes.h"

namespace linfer::openai {

ConversationTurn::~ConversationTurn() {
  std::shared_ptr<const ConversationTurn> next = std::move(previous);
  while (next != nullptr && next.use_count() == 1) next = std::move(next->previous);
}

Json ConversationMessages(const std::shared_ptr<const ConversationTurn>& turn) {
  std::vector<const ConversationTurn*> chain;
  for (const ConversationTurn* t = turn.get(); t != nullptr; t = t->previous.get()) {
    chain.push_back(t);
  }
  Json out = Json::array();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const Json& m : (*it)->messages) out.push_back(m);
  }
  return out;
}

int64_t JsonMemoryBytes(const Json& value) {
  // A std::string's own heap buffer, past its 15 bytes kept in place.
  const auto text = [&](const std::string& s) {
    return s.size() > 15 ? HeapBytes(s.size() + 1) : 0;
  };
  int64_t n = static_cast<int64_t>(sizeof(Json));
  std::vector<const Json*> todo = {&value};
  while (!todo.empty()) {
    const Json* v = todo.back();
    todo.pop_back();
    if (v->is_string()) {
      n += HeapBytes(sizeof(std::string)) + text(v->get_ref<const std::string&>());
    } else if (v->is_array()) {  // the vector's capacity: push_back leaves up to twice the size
      n += HeapBytes(sizeof(Json::array_t)) +
           HeapBytes(v->get_ref<const Json::array_t&>().capacity() * sizeof(Json));
      for (const Json& e : *v) todo.push_back(&e);
    } else if (v->is_object()) {
      using Member = Json::object_t::value_type;  // ordered_json: a vector of (key, value)
      n += HeapBytes(sizeof(Json::object_t)) +
           HeapBytes(v->get_ref<const Json::object_t&>().capacity() * sizeof(Member));
      for (const auto& [key, member] : v->items()) {
        n += text(key);
        todo.push_back(&member);
      }
    } else if (v->is_binary()) {
      n += HeapBytes(sizeof(Json::binary_t)) + HeapBytes(v->get_binary().size());
    }
  }
  return n;
}

namespace {

// About what a response holds in memory besides its conversation turns (ResponseStore::Retain
// counts those): its JSON values.
int64_t Bytes(const StoredResponse& r) {
  return JsonMemoryBytes(r.response) + JsonMemoryBytes(r.input_items) + JsonMemoryBytes(r.tools);
}

// What the caller gets back of a response pushed out: its id and session.
std::shared_ptr<const StoredResponse> IdAndSession(const StoredResponse& r) {
  auto out = std::make_shared<StoredResponse>();
  out->id = r.id;
  out->session_id = r.session_id;
  return out;
}

}  // namespace

void ResponseStore::Retain(const ConversationTurn* turn, Share& share) {
  for (const ConversationTurn* t = turn; t != nullptr; t = t->previous.get()) {
    if (t->retained++ > 0) return;  // reached already, and so is what it continues
    t->bytes = JsonMemoryBytes(t->messages);
    share.bytes += t->bytes;
    bytes_ += t->bytes;
  }
}

void ResponseStore::Release(const ConversationTurn* turn, Share& share) {
  for (const ConversationTurn* t = turn; t != nullptr; t = t->previous.get()) {
    if (--t->retained > 0) return;  // still reached
    share.bytes -= t->bytes;
    bytes_ -= t->bytes;
  }
}

void ResponseStore::Remove(std::map<Key, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  Share& share = owners_[it->first.first];
  share.bytes -= it->second.bytes;
  Release(it->second.response->turn.get(), share);
  if (--share.count == 0) owners_.erase(it->first.first);
  lru_.erase(it->second.lru);
  responses_.erase(it);
}

std::map<ResponseStore::Key, ResponseStore::Entry>::iterator ResponseStore::Victim() {
  const bool by_bytes = bytes_ > max_bytes_;
  const std::string* heaviest = nullptr;
  int64_t most = -1;
  for (const auto& [owner, share] : owners_) {
    const int64_t held = by_bytes ? share.bytes : share.count;
    if (held > most) most = held, heaviest = &owner;
  }
  for (auto k = lru_.rbegin(); k != lru_.rend(); ++k) {
    if (k->first == *heaviest) return responses_.find(*k);
  }
  return responses_.find(lru_.back());  // not reached: the heaviest owner holds one
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& owner,
                                                         const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = responses_.find({owner, id});
  if (it == responses_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.response;
}

std::vector<OwnedResponse> ResponseStore::Put(const std::string& owner, StoredResponse r) {
  std::vector<OwnedResponse> out;
  const int64_t bytes = Bytes(r);
  auto stored = std::make_shared<const StoredResponse>(std::move(r));
  absl::MutexLock lock(&mu_);
  if (closed_) return {{owner, stored}};
  const ConversationTurn* turn = stored->turn.get();
  Key key{owner, stored->id};
  if (auto it = responses_.find(key); it != responses_.end()) {
    out.emplace_back(owner, IdAndSession(*it->second.response));
    Remove(it);
  }
  lru_.push_front(key);
  responses_.emplace(std::move(key), Entry{std::move(stored), lru_.begin(), bytes});
  bytes_ += bytes;
  Share& share = owners_[owner];
  ++share.count;
  share.bytes += bytes;
  Retain(turn, share);  // a chain is one owner's (previous_response_id is)
  while (!responses_.empty() && (responses_.size() > capacity_ || bytes_ > max_bytes_)) {
    auto victim = Victim();
    out.emplace_back(victim->first.first, IdAndSession(*victim->second.response));
    Remove(victim);
  }
  return out;
}

std::shared_ptr<const StoredResponse> ResponseStore::Erase(const std::string& owner,
                                                           const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = responses_.find({owner, id});
  if (it == responses_.end()) return nullptr;
  std::shared_ptr<const StoredResponse> r = it->second.response;
  Remove(it);
  return r;
}

std::pair<int64_t, int64_t> ResponseStore::Size() {
  absl::MutexLock lock(&mu_);
  return {static_cast<int64_t>(responses_.size()), bytes_};
}

std::vector<OwnedResponse> ResponseStore::Close() {
  std::vector<OwnedResponse> out;
  absl::MutexLock lock(&mu_);
  closed_ = true;
  for (auto k = lru_.rbegin(); k != lru_.rend(); ++k) {  // least recently used first
    Entry& e = responses_.find(*k)->second;
    Release(e.response->turn.get(), owners_[k->first]);  // the turns' counts back to 0
    out.emplace_back(k->first, std::move(e.response));
  }
  responses_.clear();
  lru_.clear();
  owners_.clear();
  bytes_ = 0;
  return out;
}

std::string ResponseStore::TakeOldestSession(const std::string& owner, const std::string& except) {
  absl::MutexLock lock(&mu_);
  for (auto k = lru_.rbegin(); k != lru_.rend(); ++k) {
    if (k->first != owner || k->second == except) continue;
    Entry& e = responses_.find(*k)->second;
    if (e.response->session_id.empty()) continue;
    auto copy = std::make_shared<StoredResponse>(*e.response);
    std::string session = std::move(copy->session_id);
    copy->session_id.clear();
    e.response = std::move(copy);
    return session;
  }
  return "";
}

}  // namespace linfer::openai
