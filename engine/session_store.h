// Persistent sessions: named states that outlive requests. A session's state lives in one tier:
// a pool slot (kSlot), host RAM (kHost) or a file in the disk directory (kDisk). Idle sessions
// move slot → host (LRU, when slots are needed) → disk (when the host budget is exceeded) →
// evicted (when the disk budget is exceeded or there is no disk tier), and come back into a slot
// on their next request. Not thread-safe: the engine guards it with its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/state_blob.h"
#include "engine/state_pool.h"

namespace linfer {

enum class Tier { kSlot, kHost, kDisk };
absl::string_view TierName(Tier tier);

struct TierOptions {
  int64_t host_bytes = int64_t{4} << 30;  // idle states kept in host RAM
  std::string disk_dir;                   // empty: no disk tier
  int64_t disk_bytes = int64_t{16} << 30;
};

struct SessionInfo {
  std::string id;
  Tier tier = Tier::kHost;
  int64_t position = 0;  // tokens in the state (+1 when a sampled token is pending)
  bool busy = false;
  int64_t turns = 0;  // requests completed on it
  absl::Time created, last_used;
};

struct TierCounts {
  int slot = 0, host = 0, disk = 0;
  int64_t host_bytes = 0, disk_bytes = 0;
};

class SessionStore {
 public:
  struct Session {
    std::string id, owner;
    Tier tier = Tier::kHost;
    int slot = -1;            // kSlot
    std::vector<float> host;  // kHost; empty = the zero state
    int64_t position = 0;     // kHost/kDisk (kSlot: the pool's position)
    std::optional<int32_t> pending;
    bool busy = false;
    int64_t turns = 0;
    int64_t disk_size = 0;
    uint64_t lru = 0;
    absl::Time created, last_used;
  };

  // Removes stale "*.lnfstate" files in options.disk_dir (their index died with the process).
  SessionStore(StatePool* pool, uint64_t fingerprint, TierOptions options);

  // 1–128 characters of [A-Za-z0-9._-] (ids name files in the disk tier).
  static absl::Status ValidateId(absl::string_view id);

  // Requests from clients. Another owner's session is NotFound, as if absent.
  absl::Status Create(const std::string& id, const std::string& owner);
  absl::StatusOr<SessionInfo> Get(const std::string& id, const std::string& owner) const;
  std::vector<SessionInfo> List(const std::string& owner) const;
  absl::Status Delete(const std::string& id, const std::string& owner);
  absl::Status Fork(const std::string& src, const std::string& dst, const std::string& owner);
  absl::StatusOr<std::string> Export(const std::string& id, const std::string& owner);
  absl::Status Import(const std::string& id, const std::string& owner, absl::string_view blob);

  // Engine side. Acquire marks the session busy (FailedPrecondition when it already is).
  absl::StatusOr<Session*> Acquire(const std::string& id, const std::string& owner);
  // Moves the state into `slot` (freshly allocated by the caller) unless it is in a slot.
  absl::Status Restore(Session* s, int slot);
  // The request is done: the state stays where it is; `pending` is the token sampled last.
  void Release(Session* s, std::optional<int32_t> pending);
  // Moves the least recently used idle slot-resident session to host RAM; false if none.
  bool OffloadIdle();
  // Moves a (busy) session's state from its slot to host RAM: preemption of its request.
  void Park(Session* s);
  int idle_in_slots() const;
  TierCounts counts() const;
  int64_t evicted() const { return evicted_; }

 private:
  absl::StatusOr<Session*> Find(const std::string& id, const std::string& owner);
  absl::StatusOr<StateSnapshot> Snapshot(const Session& s) const;
  std::string DiskPath(const Session& s) const;
  void Touch(Session& s);
  void MoveToHost(Session& s);
  void EnforceBudgets();
  void Erase(Session& s);
  SessionInfo Info(const Session& s) const;

  StatePool* pool_;
  uint64_t fingerprint_;
  TierOptions options_;
  std::map<std::string, Session> sessions_;
  int64_t host_bytes_ = 0, disk_bytes_ = 0, evicted_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace linfer
