// Prefix state cache: hashed prefix index with verified keys, LRU within a byte budget.
#include "engine/prefix_cache.h"

#include <algorithm>
#include <utility>

namespace linfer {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t PrefixCache::OwnerHash(const std::string& owner) {
  uint64_t h = 0x6c696e6665722d70ULL;
  for (unsigned char c : owner) h = Mix(h ^ c);
  return h;
}

uint64_t PrefixCache::Next(uint64_t h, int32_t token) {
  return Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1));
}

const PrefixCache::Entry* PrefixCache::Find(uint64_t key, const std::string& owner,
                                            absl::Span<const int32_t> p) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  if (e.owner != owner || e.tokens.size() != p.size() ||
      !std::equal(e.tokens.begin(), e.tokens.end(), p.begin())) {
    return nullptr;  // a hash collision
  }
  return &e;
}

bool PrefixCache::Lookup(const std::string& owner, absl::Span<const int32_t> tokens,
                         int64_t min_len, int64_t max_len, HostState* state, int64_t* len) {
  if (!enabled()) return false;
  ++stats_.queries;
  auto lens = lengths_.find(owner);
  max_len = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size()));
  if (lens == lengths_.end() || max_len < std::max<int64_t>(min_len, 1)) return false;
  std::vector<uint64_t> h(static_cast<size_t>(max_len) + 1);
  h[0] = OwnerHash(owner);
  for (int64_t i = 0; i < max_len; ++i) h[i + 1] = Next(h[i], tokens[i]);
  for (auto it = lens->second.upper_bound(max_len); it != lens->second.begin();) {
    --it;
    const int64_t n = it->first;
    if (n < min_len) break;
    const Entry* e = Find(h[n], owner, tokens.subspan(0, n));
    if (e == nullptr) continue;
    lru_.splice(lru_.begin(), lru_, e->lru);
    *state = e->state;
    *len = n;
    ++stats_.hits;
    stats_.hit_tokens += n;
    return true;
  }
  return false;
}

bool PrefixCache::Contains(const std::string& owner, absl::Span<const int32_t> prefix) const {
  uint64_t h = OwnerHash(owner);
  for (int32_t t : prefix) h = Next(h, t);
  return Find(h, owner, prefix) != nullptr;
}

void PrefixCache::Insert(const std::string& owner, absl::Span<const int32_t> prefix,
                         HostState state) {
  if (!enabled() || prefix.empty()) return;
  const int64_t bytes = state.total_bytes() + static_cast<int64_t>(prefix.size() * 4);
  if (bytes > options_.budget_bytes) return;
  uint64_t key = OwnerHash(owner);
  for (int32_t t : prefix) key = Next(key, t);
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (Find(key, owner, prefix) != nullptr) {  // already saved: just recently used
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
    Erase(key);  // a colliding key: the newer prefix replaces it
  }
  while (bytes_ + bytes > options_.budget_bytes && !lru_.empty()) {
    Erase(lru_.back());
    ++stats_.evictions;
  }
  lru_.push_front(key);
  Entry& e = entries_[key];
  e.owner = owner;
  e.tokens.assign(prefix.begin(), prefix.end());
  e.state = std::move(state);
  e.bytes = bytes;
  e.lru = lru_.begin();
  ++lengths_[owner][static_cast<int64_t>(prefix.size())];
  bytes_ += bytes;
  ++stats_.inserts;
}

void PrefixCache::Erase(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  auto lens = lengths_.find(e.owner);
  auto n = lens->second.find(static_cast<int64_t>(e.tokens.size()));
  if (--n->second == 0) lens->second.erase(n);
  if (lens->second.empty()) lengths_.erase(lens);
  bytes_ -= e.bytes;
  lru_.erase(e.lru);
  entries_.erase(it);
}

void PrefixCache::Clear() {
  entries_.clear();
  lru_.clear();
  lengths_.clear();
  bytes_ = 0;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.entries = static_cast<int64_t>(entries_.size());
  s.bytes = bytes_;
  return s;
}

}  // namespace linfer
