// ResponseStore.
#include "server/openai/response_store.h"

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

namespace {

// About what a response holds in memory: its JSON as text.
int64_t Bytes(const StoredResponse& r) {
  int64_t n = static_cast<int64_t>(Dump(r.response).size() + Dump(r.input_items).size());
  if (r.turn != nullptr) n += static_cast<int64_t>(Dump(r.turn->messages).size());
  return n;
}

}  // namespace

void ResponseStore::Remove(std::map<Key, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  responses_.erase(it);
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
  Key key{owner, stored->id};
  if (auto it = responses_.find(key); it != responses_.end()) {
    out.emplace_back(owner, it->second.response);
    Remove(it);
  }
  lru_.push_front(key);
  responses_.emplace(std::move(key), Entry{std::move(stored), lru_.begin(), bytes});
  bytes_ += bytes;
  while (!responses_.empty() && (responses_.size() > capacity_ || bytes_ > max_bytes_)) {
    auto last = responses_.find(lru_.back());
    out.emplace_back(last->first.first, last->second.response);
    Remove(last);
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
    out.emplace_back(k->first, std::move(responses_.find(*k)->second.response));
  }
  responses_.clear();
  lru_.clear();
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
