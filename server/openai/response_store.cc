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

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& owner,
                                                         const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = responses_.find({owner, id});
  if (it == responses_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return it->second.first;
}

std::vector<std::shared_ptr<const StoredResponse>> ResponseStore::Put(const std::string& owner,
                                                                      StoredResponse r) {
  std::vector<std::shared_ptr<const StoredResponse>> out;
  auto stored = std::make_shared<const StoredResponse>(std::move(r));
  absl::MutexLock lock(&mu_);
  Key key{owner, stored->id};
  if (auto it = responses_.find(key); it != responses_.end()) {
    out.push_back(it->second.first);
    lru_.erase(it->second.second);
    responses_.erase(it);
  }
  lru_.push_front(key);
  responses_.emplace(std::move(key), std::make_pair(std::move(stored), lru_.begin()));
  while (responses_.size() > capacity_) {
    auto last = responses_.find(lru_.back());
    out.push_back(last->second.first);
    responses_.erase(last);
    lru_.pop_back();
  }
  return out;
}

std::shared_ptr<const StoredResponse> ResponseStore::Erase(const std::string& owner,
                                                           const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = responses_.find({owner, id});
  if (it == responses_.end()) return nullptr;
  std::shared_ptr<const StoredResponse> r = it->second.first;
  lru_.erase(it->second.second);
  responses_.erase(it);
  return r;
}

std::vector<std::pair<std::string, std::shared_ptr<const StoredResponse>>> ResponseStore::Clear() {
  std::vector<std::pair<std::string, std::shared_ptr<const StoredResponse>>> out;
  absl::MutexLock lock(&mu_);
  for (auto& [key, value] : responses_) out.emplace_back(key.first, std::move(value.first));
  responses_.clear();
  lru_.clear();
  return out;
}

}  // namespace linfer::openai
