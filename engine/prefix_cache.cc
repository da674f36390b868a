// Prefix state cache: hashed prefix index with verified keys, LRU within a byte budget, and a
// disk tier of crc32-checked files.
#include "engine/prefix_cache.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <random>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32.h"
#include "common/file_util.h"
#include "common/logging.h"

namespace linfer {
namespace {

namespace fs = std::filesystem;

// An entry file: "LNFPFX02", u64 position, kv_tokens, kv_in_place, |bytes|, |kv_bytes|, the
// entry's key, the writing cache's instance (random per process), the bytes, the KV bytes, then
// the crc32 (u32) of everything before it. Little-endian host order: the files never leave the
// process that wrote them, and the key and instance make sure of it — a file renamed over
// another entry's, or left by another process, passes the CRC but not them.
constexpr char kMagic[8] = {'L', 'N', 'F', 'P', 'F', 'X', '0', '2'};
constexpr const char* kSuffix = ".lnfprefix";
constexpr int kHeadWords = 7;

struct EntryBinding {
  uint64_t key = 0, instance = 0;
  int64_t position = 0;  // the key's length
};

std::string EncodeEntry(const HostState& st, const EntryBinding& b) {
  const uint64_t head[kHeadWords] = {static_cast<uint64_t>(st.position),
                                     static_cast<uint64_t>(st.kv_tokens),
                                     st.kv_in_place ? 1u : 0u,
                                     st.bytes.size(),
                                     st.kv_bytes.size(),
                                     b.key,
                                     b.instance};
  std::string out(kMagic, sizeof(kMagic));
  out.append(reinterpret_cast<const char*>(head), sizeof(head));
  out.append(reinterpret_cast<const char*>(st.bytes.data()), st.bytes.size());
  out.append(reinterpret_cast<const char*>(st.kv_bytes.data()), st.kv_bytes.size());
  const uint32_t crc = Crc32(out);
  out.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  return out;
}

absl::Status DecodeEntry(const std::string& f, const EntryBinding& want, HostState* st) {
  constexpr size_t kHead = sizeof(kMagic) + kHeadWords * sizeof(uint64_t);
  if (f.size() < kHead + 4 || std::memcmp(f.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat("not a prefix-cache entry (", f.size(), " bytes)"));
  }
  uint64_t head[kHeadWords];
  std::memcpy(head, f.data() + sizeof(kMagic), sizeof(head));
  if (head[3] > f.size() || head[4] > f.size() || kHead + head[3] + head[4] + 4 != f.size()) {
    return absl::DataLossError(absl::StrCat("section sizes ", head[3], " + ", head[4],
                                            " do not match the file size ", f.size()));
  }
  uint32_t crc;
  std::memcpy(&crc, f.data() + f.size() - 4, 4);
  if (crc != Crc32(absl::string_view(f).substr(0, f.size() - 4))) {
    return absl::DataLossError("crc32 mismatch");
  }
  if (head[6] != want.instance) {
    return absl::DataLossError("written by another process (replaced behind the cache's back)");
  }
  if (head[5] != want.key) {
    return absl::DataLossError(absl::StrFormat(
        "it holds entry %016x, not %016x (replaced behind the cache's back)", head[5], want.key));
  }
  if (static_cast<int64_t>(head[0]) != want.position) {
    return absl::DataLossError(
        absl::StrCat("position ", head[0], " is not the key's length ", want.position));
  }
  st->position = static_cast<int64_t>(head[0]);
  st->kv_tokens = static_cast<int64_t>(head[1]);
  st->kv_in_place = head[2] != 0;
  const char* p = f.data() + kHead;
  st->bytes.assign(p, p + head[3]);
  st->kv_bytes.assign(p + head[3], p + head[3] + head[4]);
  return absl::OkStatus();
}

uint64_t RandomInstance() {
  std::random_device rd;
  return uint64_t{rd()} << 32 | rd();
}

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

PrefixCache::PrefixCache(PrefixCacheOptions options)
    : options_(std::move(options)), instance_(RandomInstance()) {
  if (!disk_enabled() || !enabled()) return;
  std::error_code ec;  // the directory is there: Engine::Create made sure (PrepareDirectory)
  int removed = 0;
  for (fs::directory_iterator it(options_.disk_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (absl::StrContains(name, kSuffix)) {  // entries and temporaries (NAME.tmp.PID)
      removed += fs::remove(it->path(), ec) ? 1 : 0;
    }
  }
  if (ec) {
    Log(LogLevel::kWarning, absl::StrCat("prefix cache: disk tier off, cannot use ",
                                         options_.disk_dir, ": ", ec.message()));
    options_.disk_budget_bytes = 0;
    return;
  }
  if (removed > 0) {
    Log(LogLevel::kInfo, absl::StrCat("prefix cache: removed ", removed,
                                      " leftover entry files from ", options_.disk_dir));
  }
}

PrefixCache::~PrefixCache() { Clear(); }

uint64_t PrefixCache::OwnerHash(const std::string& owner) {
  uint64_t h = 0x6c696e6665722d70ULL;
  for (unsigned char c : owner) h = Mix(h ^ c);
  return h;
}

uint64_t PrefixCache::Next(uint64_t h, int32_t token) {
  return Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1));
}

PrefixCache::Entry* PrefixCache::Find(uint64_t key, const std::string& owner,
                                      absl::Span<const int32_t> p) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  Entry& e = it->second;
  if (e.owner != owner || e.tokens.size() != p.size() ||
      !std::equal(e.tokens.begin(), e.tokens.end(), p.begin())) {
    return nullptr;  // a hash collision
  }
  return &e;
}

void PrefixCache::SetSlotTier(PrefixSlotTier tier) { tier_ = std::move(tier); }

uint64_t PrefixCache::Key(const std::string& owner, absl::Span<const int32_t> prefix) const {
  uint64_t key = OwnerHash(owner);
  for (int32_t t : prefix) key = Next(key, t);
  return key;
}

bool PrefixCache::Lookup(const std::string& owner, absl::Span<const int32_t> tokens,
                         int64_t min_len, int64_t max_len, PrefixHit* hit) {
  if (!enabled()) return false;
  ++stats_.queries;
  max_len = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size()));
  if (!lengths_.contains(owner) || max_len < std::max<int64_t>(min_len, 1)) return false;
  std::vector<uint64_t> h(static_cast<size_t>(max_len) + 1);
  h[0] = OwnerHash(owner);
  for (int64_t i = 0; i < max_len; ++i) h[i + 1] = Next(h[i], tokens[i]);
  // The next saved length ≤ bound, looked up afresh each time: dropping a bad disk entry edits
  // lengths_ (and may remove the owner's map).
  for (int64_t bound = max_len;;) {
    auto lens = lengths_.find(owner);
    if (lens == lengths_.end()) break;
    auto it = lens->second.upper_bound(bound);
    if (it == lens->second.begin()) break;
    const int64_t n = std::prev(it)->first;
    if (n < min_len) break;
    bound = n - 1;
    Entry* e = Find(h[n], owner, tokens.subspan(0, n));
    if (e == nullptr) continue;
    if (e->slot >= 0) {
      device_lru_.splice(device_lru_.begin(), device_lru_, e->lru);
      *hit = PrefixHit{n, nullptr, e->slot};
      ++stats_.hits;
      stats_.hit_tokens += n;
      return true;
    }
    if (!e->file.empty()) {
      if (!Unspill(h[n])) continue;  // a bad file: dropped, try a shorter prefix
      ++stats_.disk_hits;
      e = &entries_.at(h[n]);
    }
    // A snapshot still on its way from the device lands first (its copy overlapped the steps
    // since it was taken); one whose copy failed is dropped, and a shorter prefix is tried.
    if (absl::Status st = e->state->Settle(); !st.ok()) {
      Log(LogLevel::kWarning, absl::StrCat("prefix cache: dropping an entry: ", st.message()));
      Erase(h[n]);
      ++stats_.evictions;
      continue;
    }
    lru_.splice(lru_.begin(), lru_, e->lru);
    *hit = PrefixHit{n, e->state, -1};
    ++stats_.hits;
    stats_.hit_tokens += n;
    return true;
  }
  return false;
}

int64_t PrefixCache::BranchPoint(const std::string& owner, absl::Span<const int32_t> tokens,
                                 int64_t min_len, int64_t max_len) {
  const int64_t g = options_.branch_granule;
  if (!enabled() || g <= 0) return 0;
  max_len = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size()));
  int64_t found = 0;
  std::vector<uint64_t> mine;
  uint64_t h = OwnerHash(owner);
  for (int64_t i = 0; i < max_len; ++i) {
    h = Next(h, tokens[i]);
    if ((i + 1) % g != 0) continue;
    if (i + 1 > min_len && seen_.contains(h)) found = i + 1;
    mine.push_back(h);
  }
  for (const uint64_t k : mine) {
    if (!seen_.insert(k).second) continue;
    if (seen_ring_.size() < kSeenCapacity) {
      seen_ring_.push_back(k);
    } else {
      seen_.erase(seen_ring_[seen_next_]);
      seen_ring_[seen_next_] = k;
      seen_next_ = (seen_next_ + 1) % kSeenCapacity;
    }
  }
  if (found > 0) ++stats_.branch_points;
  return found;
}

bool PrefixCache::Contains(const std::string& owner, absl::Span<const int32_t> prefix) const {
  auto it = entries_.find(Key(owner, prefix));
  return it != entries_.end() && it->second.owner == owner &&
         it->second.tokens.size() == prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), it->second.tokens.begin());
}

void PrefixCache::MakeHostRoom(int64_t bytes) {
  while (bytes_ + bytes > options_.budget_bytes && !lru_.empty()) Spill(lru_.back());
}

bool PrefixCache::DropOnePinned() {
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    if (entries_.at(*it).state->kv_pin != nullptr) {
      Erase(*it);
      ++stats_.evictions;
      return true;
    }
  }
  if (device_lru_.empty()) return false;
  Erase(device_lru_.back());  // its slot (and the slot's KV blocks) go back to the pool
  ++stats_.evictions;
  return true;
}

void PrefixCache::InsertSlot(const std::string& owner, absl::Span<const int32_t> prefix, int slot,
                             bool recent) {
  if (!device_tier() || prefix.empty()) {
    if (tier_.release) tier_.release(slot);
    return;
  }
  const uint64_t key = Key(owner, prefix);
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (Find(key, owner, prefix) != nullptr && it->second.slot >= 0) {
      device_lru_.splice(device_lru_.begin(), device_lru_, it->second.lru);  // already there
      tier_.release(slot);
      return;
    }
    Erase(key);  // in host RAM or on disk (the slot in hand replaces it), or a colliding key
  }
  Entry& e = entries_[key];
  e.owner = owner;
  e.tokens.assign(prefix.begin(), prefix.end());
  e.slot = slot;
  e.bytes = tier_.slot_bytes;
  e.lru = device_lru_.insert(recent ? device_lru_.begin() : device_lru_.end(), key);
  ++lengths_[owner][static_cast<int64_t>(prefix.size())];
  ++stats_.inserts;
  // The device tier's keys live in host RAM: within the host budget, the least recently used
  // entries go back to the pool (their states to the host tier where it takes them). Without this
  // a big pool (thousands of free slots: `linfer serve` sizes it from the GPU's memory) would hold
  // that many token lists uncounted.
  device_key_bytes_ += KeyBytes(e);
  while (device_key_bytes_ > options_.budget_bytes && ReleaseOldestSlot()) {
  }
}

int PrefixCache::SlotOf(const std::string& owner, absl::Span<const int32_t> prefix) {
  const Entry* e = Find(Key(owner, prefix), owner, prefix);
  return e == nullptr ? -1 : e->slot;
}

int PrefixCache::TakeSlot(const std::string& owner, absl::Span<const int32_t> prefix) {
  const uint64_t key = Key(owner, prefix);
  Entry* e = Find(key, owner, prefix);
  if (e == nullptr || e->slot < 0) return -1;
  const int slot = e->slot;
  LeaveSlot(key, /*release_slot=*/false);
  return slot;
}

bool PrefixCache::ReleaseOldestSlot() {
  if (device_lru_.empty()) return false;
  ++stats_.device_releases;
  LeaveSlot(device_lru_.back(), /*release_slot=*/true);
  return true;
}

void PrefixCache::LeaveSlot(uint64_t key, bool release_slot) {
  Entry& e = entries_.at(key);
  const int slot = e.slot;
  // To host RAM when the budget takes it; else (or when the copy fails) dropped.
  absl::StatusOr<HostState> state = absl::ResourceExhaustedError("larger than the host budget");
  if (tier_.slot_bytes + KeyBytes(e) <= options_.budget_bytes) {
    state = tier_.snapshot(slot);
    if (!state.ok()) {
      Log(LogLevel::kWarning,
          absl::StrCat("prefix cache: dropping a device-tier entry: ", state.status().message()));
    }
  }
  if (!state.ok()) {
    Erase(key, release_slot);
    ++stats_.evictions;
    return;
  }
  device_lru_.erase(e.lru);
  device_key_bytes_ -= KeyBytes(e);
  e.slot = -1;
  e.state = std::make_shared<const HostState>(*std::move(state));
  e.bytes = e.state->total_bytes() + KeyBytes(e);
  if (release_slot) tier_.release(slot);
  EnterHostRam(key);
}

void PrefixCache::Spill(uint64_t key) {
  Entry& e = entries_.at(key);
  if (!disk_enabled() || e.bytes > options_.disk_budget_bytes || e.state->kv_pin != nullptr) {
    Erase(key);
    ++stats_.evictions;
    return;
  }
  while (disk_bytes_ + e.bytes > options_.disk_budget_bytes && !disk_lru_.empty()) {
    Erase(disk_lru_.back());
    ++stats_.evictions;
  }
  const std::string path =
      (fs::path(options_.disk_dir) / absl::StrFormat("%016x%s", key, kSuffix)).string();
  absl::Status st = e.state->Settle();  // a snapshot may still be on its way from the device
  if (st.ok()) {                        // no fsync: a cache entry need not survive a crash
    st = WriteFileAtomic(path, EncodeEntry(*e.state, {key, instance_, 0}), 0600,
                         /*durable=*/false);
  }
  if (!st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("prefix cache: dropping an entry: ", st.message()));
    ++stats_.disk_errors;
    Erase(key);
    ++stats_.evictions;
    return;
  }
  bytes_ -= e.bytes;
  lru_.erase(e.lru);
  e.state.reset();
  e.file = path;
  disk_lru_.push_front(key);
  e.lru = disk_lru_.begin();
  disk_bytes_ += e.bytes;
  ++stats_.spills;
}

bool PrefixCache::Unspill(uint64_t key) {
  Entry& e = entries_.at(key);
  HostState state;
  absl::StatusOr<std::string> data = ReadFile(e.file, e.bytes + 4096);
  absl::Status st = data.status();
  if (st.ok()) {
    st = DecodeEntry(*data, {key, instance_, static_cast<int64_t>(e.tokens.size())}, &state);
  }
  if (!st.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("prefix cache: dropping entry file ", e.file, ": ", st.message()));
    ++stats_.disk_errors;
    Erase(key);
    return false;
  }
  std::error_code ec;
  fs::remove(e.file, ec);
  disk_bytes_ -= e.bytes;
  disk_lru_.erase(e.lru);
  e.file.clear();
  e.state = std::make_shared<const HostState>(std::move(state));
  EnterHostRam(key);
  return true;
}

void PrefixCache::EnterHostRam(uint64_t key) {
  MakeHostRoom(entries_.at(key).bytes);  // may push older entries to disk, or erase them
  Entry& e = entries_.at(key);           // this one stays
  lru_.push_front(key);
  e.lru = lru_.begin();
  bytes_ += e.bytes;
  pinned_ += e.state->kv_pin != nullptr;
}

void PrefixCache::Insert(const std::string& owner, absl::Span<const int32_t> prefix,
                         HostState state) {
  if (!enabled() || prefix.empty()) return;
  const int64_t bytes = state.total_bytes() + KeyBytes(static_cast<int64_t>(prefix.size()));
  if (bytes > options_.budget_bytes) return;
  const uint64_t key = Key(owner, prefix);
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (Find(key, owner, prefix) != nullptr && it->second.slot >= 0) {
      device_lru_.splice(device_lru_.begin(), device_lru_, it->second.lru);  // in a slot
      return;
    }
    if (Find(key, owner, prefix) != nullptr && it->second.file.empty()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);  // already in RAM: just recently used
      return;
    }
    Erase(key);  // on disk (the state in hand replaces the file), or a colliding key
  }
  MakeHostRoom(bytes);
  lru_.push_front(key);
  Entry& e = entries_[key];
  e.owner = owner;
  e.tokens.assign(prefix.begin(), prefix.end());
  e.state = std::make_shared<const HostState>(std::move(state));
  pinned_ += e.state->kv_pin != nullptr;
  e.bytes = bytes;
  e.lru = lru_.begin();
  ++lengths_[owner][static_cast<int64_t>(prefix.size())];
  bytes_ += bytes;
  ++stats_.inserts;
}

void PrefixCache::Erase(uint64_t key, bool release_slot) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  auto lens = lengths_.find(e.owner);
  auto n = lens->second.find(static_cast<int64_t>(e.tokens.size()));
  if (--n->second == 0) lens->second.erase(n);
  if (lens->second.empty()) lengths_.erase(lens);
  if (e.slot >= 0) {
    device_lru_.erase(e.lru);
    device_key_bytes_ -= KeyBytes(e);
    if (release_slot) tier_.release(e.slot);
  } else if (e.file.empty()) {
    bytes_ -= e.bytes;
    pinned_ -= e.state->kv_pin != nullptr;
    lru_.erase(e.lru);
  } else {
    std::error_code ec;
    fs::remove(e.file, ec);
    disk_bytes_ -= e.bytes;
    disk_lru_.erase(e.lru);
  }
  entries_.erase(it);
}

void PrefixCache::Clear() {
  for (const auto& [key, e] : entries_) {
    std::error_code ec;
    if (!e.file.empty()) fs::remove(e.file, ec);
    if (e.slot >= 0) tier_.release(e.slot);
  }
  entries_.clear();
  device_lru_.clear();
  lru_.clear();
  disk_lru_.clear();
  lengths_.clear();
  bytes_ = 0;
  disk_bytes_ = 0;
  device_key_bytes_ = 0;
  pinned_ = 0;
  seen_.clear();
  seen_ring_.clear();
  seen_next_ = 0;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  s.disk_entries = static_cast<int64_t>(disk_lru_.size());
  s.disk_bytes = disk_bytes_;
  s.kv_pinned_entries = pinned_;
  s.device_entries = device_entries();
  s.device_bytes = device_entries() * tier_.slot_bytes;
  return s;
}

}  // namespace linfer
