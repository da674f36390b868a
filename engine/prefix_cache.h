// Saved sequence states keyed by the token prefix they consumed, per owner: a request without a
// session that resends a conversation resumes from the longest saved prefix of its prompt instead
// of recomputing it (a recurrent state is small and constant, so this is exact, not a block-level
// approximation).
//
// Tiers: device (slots of the engine's state pool that hold saved states: a finished request's
// slot is kept as it is, a snapshot taken mid-request is copied into a free slot — no copy to the
// host; the pool takes the least recently used one back when it runs out of free slots, moving
// its state to host RAM first where the host budget takes it), host RAM, disk.
//
// Index: for an owner tag o and tokens t[0, n), key(o, t, n) = h_n with h_0 = H(o) and
// h_{i+1} = mix(h_i ⊕ (t_i + 1)) (splitmix64 finaliser); an entry stores its tokens, so a hash
// collision is never taken for a hit. Lookup computes h_1 … h_max once (O(n)) and probes the
// lengths that exist for the owner from the longest down: O(n + distinct lengths).
// Memory: entries (state bytes, KV bytes of hybrid models, the key's tokens) within a host byte
// budget — the device tier's token lists too, within the same budget on their own; the least
// recently used entry moves to the disk tier when one is configured (a file per entry in its own
// directory, crc32-checked when read back, within its own budget; a hit there moves the entry back
// to host RAM), else it is dropped. Hybrid snapshots hold their KV as block references in the
// engine's KV cache (copy-on-write), counted there, not here: such an entry is dropped rather than
// written to disk, and the engine drops the oldest one whenever running sequences need blocks. The
// files live as long as the cache: a new cache deletes leftover ones in its directory. Engine
// thread only (not thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/state.h"

namespace linfer {

struct PrefixCacheOptions {
  int64_t budget_bytes = int64_t{1} << 30;  // 0 disables the cache
  // Snapshots while a long prompt is prefilled: every this many tokens (0: only at the prompt's
  // end and at the request's end).
  int64_t snapshot_interval = 1024;
  // Disk tier: entries the host budget pushes out are written here (empty: dropped instead).
  std::string disk_dir;
  int64_t disk_budget_bytes = 0;
  // Device tier: saved states kept in the engine's free slots (PrefixSlotTier), not copied out.
  bool device_tier = true;
  // Branch points (PrefixCache::BranchPoint): a prompt that shares its first tokens with an earlier
  // one is saved where they part, rounded down to a multiple of this (0: off).
  int64_t branch_granule = 64;
};

// The device tier's link to the slot pool (the engine's): the cache holds the slots it is given
// (InsertSlot) until it gives them back through `release`; `snapshot` copies a slot's state out
// for the host tier.
struct PrefixSlotTier {
  std::function<absl::StatusOr<HostState>(int slot)> snapshot;
  std::function<void(int slot)> release;
  int64_t slot_bytes = 0;  // for the stats
};

// A saved prefix found by Lookup: its length and either its host state (shared with the cache) or
// the device-tier slot that holds it (still the cache's: copy it, or TakeSlot it, at once).
struct PrefixHit {
  int64_t len = 0;
  std::shared_ptr<const HostState> state;
  int slot = -1;
};

// Options with every field named (aggregate initialisation of PrefixCacheOptions trips
// -Wmissing-field-initializers).
inline PrefixCacheOptions MakePrefixCacheOptions(int64_t budget_bytes, int64_t snapshot_interval,
                                                 std::string disk_dir = "",
                                                 int64_t disk_budget_bytes = 0) {
  PrefixCacheOptions o;
  o.budget_bytes = budget_bytes;
  o.snapshot_interval = snapshot_interval;
  o.disk_dir = std::move(disk_dir);
  o.disk_budget_bytes = disk_budget_bytes;
  return o;
}

struct PrefixCacheStats {
  int64_t queries = 0, hits = 0, hit_tokens = 0, inserts = 0, evictions = 0;
  int64_t branch_points = 0;  // prompts saved where they part from an earlier one (BranchPoint)
  int64_t entries = 0, bytes = 0;            // host tier
  int64_t disk_entries = 0, disk_bytes = 0;  // disk tier
  int64_t spills = 0, disk_hits = 0, disk_errors = 0;
  int64_t kv_pinned_entries = 0;                 // host entries holding KV blocks (hybrid models)
  int64_t device_entries = 0, device_bytes = 0;  // device tier (slots)
  // Device entries whose slots went back to the pool: taken back by it, or released because the
  // tier's token lists outgrew the budget.
  int64_t device_releases = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(PrefixCacheOptions options);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;
  bool enabled() const { return options_.budget_bytes > 0; }
  const PrefixCacheOptions& options() const { return options_; }
  // The device tier (off until set, and with options.device_tier false).
  void SetSlotTier(PrefixSlotTier tier);
  bool device_tier() const { return enabled() && options_.device_tier && tier_.release != nullptr; }

  // The longest saved prefix tokens[0, len) of `owner` with min_len ≤ len ≤ max_len (its state,
  // position len, shared with the cache: not copied — a state is tens of MB and the caller only
  // reads it into a slot; settled: a snapshot whose copy from the device failed is dropped and a
  // shorter prefix tried; or its device-tier slot), or false.
  bool Lookup(const std::string& owner, absl::Span<const int32_t> tokens, int64_t min_len,
              int64_t max_len, PrefixHit* hit);
  // Saves `state` (position == prefix.size()) for `owner`; evicts the least recently used entries
  // to stay within the budget (a state larger than the budget is not kept).
  void Insert(const std::string& owner, absl::Span<const int32_t> prefix, HostState state);
  // Saves the state in `slot` (position == prefix.size()) for `owner` in the device tier: the
  // cache holds the slot from now on (an entry already there for this prefix keeps its own slot
  // and this one is released; without the device tier it is released at once). recent: as the
  // most recently used entry, else as the least (the first the pool takes back).
  void InsertSlot(const std::string& owner, absl::Span<const int32_t> prefix, int slot,
                  bool recent = true);
  // Whether the device tier takes a key of `tokens` more without releasing an entry (its token
  // lists' budget): else an entry inserted as the least recently used would go at once.
  bool DeviceTierFits(int64_t tokens) const {
    return device_key_bytes_ + KeyBytes(tokens) <= options_.budget_bytes;
  }
  // The slot of `owner`'s device-tier entry for exactly `prefix` (still the cache's), or −1.
  int SlotOf(const std::string& owner, absl::Span<const int32_t> prefix);
  // The same slot handed over to the caller, or −1. The entry stays, its state copied to host RAM
  // first when the host budget takes it (else it is dropped): a request that finds no free slot
  // takes over the one holding the state it resumes from, and the next resend still finds it.
  int TakeSlot(const std::string& owner, absl::Span<const int32_t> prefix);
  // Releases the least recently used device-tier slot, its state moved to the host tier first
  // (when the host budget takes it; else dropped); false when the tier holds none.
  bool ReleaseOldestSlot();
  int64_t device_entries() const { return static_cast<int64_t>(device_lru_.size()); }
  // Drops the least recently used entry that pins KV blocks (hybrid snapshots; then device-tier
  // entries, whose slots hold blocks), so that the blocks can go back to running sequences; false
  // when none does.
  bool DropOnePinned();
  // Branch points. Prompts that share a beginning (a system prompt, a few-shot preamble) but go on
  // differently find no saved state for it when snapshots are only taken every snapshot_interval
  // tokens and at prompts' ends: the first prompt's end lies past the shared part. So every
  // prompt's prefixes at multiples of branch_granule are remembered (their index hashes, the last
  // 2^17 of them), and a prompt whose prefix of such a length an earlier prompt of the owner had
  // is saved there: the next prompt sharing it resumes from it. Returns the largest such length
  // in (min_len, max_len], 0 when none, and remembers this prompt's.
  int64_t BranchPoint(const std::string& owner, absl::Span<const int32_t> tokens, int64_t min_len,
                      int64_t max_len);
  // Whether `owner` has an entry for exactly this prefix.
  bool Contains(const std::string& owner, absl::Span<const int32_t> prefix) const;
  void Clear();
  PrefixCacheStats stats() const;

 private:
  struct Entry {
    std::string owner;
    std::vector<int32_t> tokens;
    std::shared_ptr<const HostState> state;  // null while on disk or in a slot
    std::string file;                        // non-empty: the state is in this file (disk tier)
    int slot = -1;                           // ≥ 0: the state is in this slot (device tier)
    int64_t bytes = 0;
    // Position in device_lru_, lru_ or disk_lru_ (front: most recent).
    std::list<uint64_t>::iterator lru;
  };
  // Host bytes of a key of `tokens` tokens.
  static int64_t KeyBytes(int64_t tokens) { return tokens * static_cast<int64_t>(sizeof(int32_t)); }
  static int64_t KeyBytes(const Entry& e) {
    return KeyBytes(static_cast<int64_t>(e.tokens.size()));
  }
  uint64_t Key(const std::string& owner, absl::Span<const int32_t> prefix) const;
  static uint64_t OwnerHash(const std::string& owner);
  static uint64_t Next(uint64_t h, int32_t token);
  Entry* Find(uint64_t key, const std::string& owner, absl::Span<const int32_t> p);
  bool disk_enabled() const { return !options_.disk_dir.empty() && options_.disk_budget_bytes > 0; }
  // Makes room for `bytes` more in host RAM, moving least recently used entries to disk (or
  // dropping them).
  void MakeHostRoom(int64_t bytes);
  // Moves host entry `key` to the disk tier, or drops it when that fails or there is none.
  void Spill(uint64_t key);
  // Reads disk entry `key` back into host RAM; false (entry dropped) when the file is bad.
  bool Unspill(uint64_t key);
  // Puts entry `key` (its state and bytes set, in no LRU list) into host RAM as the most recent
  // entry, making room first: being in no list, it cannot be picked to make that room.
  void EnterHostRam(uint64_t key);
  // Device-tier entry `key` leaves its slot: its state to host RAM when the host budget takes it
  // (else the entry is dropped); the slot goes back to the pool if `release_slot`.
  void LeaveSlot(uint64_t key, bool release_slot);
  // Removes entry `key`; a device-tier entry's slot is released unless `release_slot` is false.
  void Erase(uint64_t key, bool release_slot = true);

  PrefixCacheOptions options_;
  const uint64_t instance_;  // random: the disk tier's files are this cache's own
  PrefixSlotTier tier_;
  std::list<uint64_t> device_lru_;
  int64_t device_key_bytes_ = 0;  // the device tier's token lists (host RAM, within the budget)
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_, disk_lru_;
  int64_t disk_bytes_ = 0;
  int64_t pinned_ = 0;  // host entries whose state pins KV blocks
  std::map<std::string, std::map<int64_t, int>> lengths_;  // owner → length → entries
  // BranchPoint's memory: prefix hashes seen (a ring, the oldest forgotten first).
  static constexpr size_t kSeenCapacity = size_t{1} << 17;
  std::vector<uint64_t> seen_ring_;
  size_t seen_next_ = 0;
  std::unordered_set<uint64_t> seen_;
  int64_t bytes_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace linfer
