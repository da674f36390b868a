// Persistent sessions: named states that outlive requests, in per-owner namespaces. A session's
// state lives in one tier: a pool slot (kSlot), host RAM (kHost) or a file in the disk directory
// (kDisk). Idle sessions move slot → host (when slots are needed) → disk (when the host budget is
// exceeded) → evicted (when the disk budget is exceeded, or with no disk tier), and come back
// into a slot on their next request. Eviction picks the least recently used idle session of the
// owner holding the most bytes, so one tenant cannot push out another's sessions; per-owner
// quotas cap how many sessions and bytes one owner may hold.
//
// Durability: every session written to the disk tier survives a crash (files are written
// atomically, 0600, with a checksum); PersistAll (graceful drain) writes every resident session
// there too, and a new store re-indexes the directory at start-up, skipping (never deleting)
// files of another model or that fail their checks.
//
// Not thread-safe: only the engine thread uses it (session RPCs run as engine tasks).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/state_blob.h"
#include "engine/state_pool.h"

namespace linfer {

enum class Tier { kSlot, kHost, kDisk };
absl::string_view TierName(Tier tier);

// A disk-tier read of session `id` that failed (`detail` names the file): logged as it is, and
// said to the client without the server's paths.
absl::Status SessionFileError(const std::string& id, const absl::Status& detail);

// What a session's disk-tier file must hold: the session (id, owner) and where its state stands.
// A file renamed, copied or restored over it (another session's, an older copy, another
// server's on a shared directory) passes every other check.
struct DiskStateOf {
  std::string id, owner_tag;
  int64_t position = 0;
  std::optional<int32_t> pending;
};

// A disk-tier file read through a descriptor the caller opened (and closes) and decoded, without
// its session bookkeeping; DataLoss naming `path` when it cannot be read, fails its checks or is
// not `expected`'s state. The engine thread only opens the file; the caller's worker reads it
// (a session moving meanwhile unlinks the path, not the open file).
absl::StatusOr<StateSnapshot> ReadDiskState(int fd, const std::string& path, const BlobModel& model,
                                            const DiskStateOf& expected);

struct TierOptions {
  int64_t host_bytes = int64_t{4} << 30;  // idle states kept in host RAM
  std::string disk_dir;                   // empty: no disk tier
  int64_t disk_bytes = int64_t{16} << 30;
  int max_sessions_per_owner = 4096;          // 0: unlimited
  int64_t max_bytes_per_owner = 0;            // all tiers; 0: unlimited
  absl::Duration ttl = absl::ZeroDuration();  // idle sessions older than this expire; 0: never
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
  int64_t host_bytes = 0, disk_bytes = 0;  // all bytes held in the tier (state + KV)
  // The same split into recurrent state and attention KV (hybrid models), per tier.
  int64_t slot_state_bytes = 0, slot_kv_bytes = 0, host_kv_bytes = 0, disk_kv_bytes = 0;
};

// The tag that scopes sessions (and names their files): a hash of the owner, never the key.
std::string OwnerTag(absl::string_view owner);

class SessionStore {
 public:
  struct Session {
    std::string id, owner_tag;
    Tier tier = Tier::kHost;
    int slot = -1;         // kSlot
    HostState host;        // kHost (empty bytes: the zero state)
    int64_t position = 0;  // kHost/kDisk (kSlot: the pool's position)
    std::optional<int32_t> pending;
    // The last tokens in the state (up to kMaxTextTail, pending not included; in its blob on
    // disk and in exports): the detokenizer's context for the next turn, so that its text
    // continues the conversation's.
    std::vector<int32_t> text_tail;
    bool busy = false;
    // The server's own (the OpenAI front end's n > 1 choices and their forks): outside the
    // owner's quotas and List, never written to the disk tier by PersistAll (a state moved to
    // disk is scratch, removed at the next start).
    bool internal = false;
    // Not ok: its state was lost (MarkLost) — every request that needs it gets this error.
    absl::Status lost;
    int64_t turns = 0;
    int64_t disk_size = 0;
    uint64_t lru = 0;
    absl::Time created, last_used;
    // What its disk-tier file must hold (kDisk).
    DiskStateOf disk_expected() const { return {id, owner_tag, position, pending}; }
  };

  // Indexes the disk directory (creating it), when there is one.
  SessionStore(StatePool* pool, const ExecContext* ctx, BlobModel model, TierOptions options);

  // 1–128 characters of [A-Za-z0-9._-].
  static absl::Status ValidateId(absl::string_view id, absl::string_view field = "session_id");
  // A fresh id: "s-" and 128 random bits from the OS, in hex.
  static std::string NewId();

  // Client requests, within the owner's namespace (another owner's ids are invisible).
  // `internal`: Session::internal.
  absl::StatusOr<std::string> Create(std::string id, const std::string& owner_tag,
                                     bool internal = false);
  absl::StatusOr<SessionInfo> Get(const std::string& id, const std::string& owner_tag) const;
  std::vector<SessionInfo> List(const std::string& owner_tag) const;
  absl::Status Delete(const std::string& id, const std::string& owner_tag);
  // `internal`: the fork is the server's own (Session::internal), whatever the source is.
  absl::StatusOr<std::string> Fork(const std::string& src, std::string dst,
                                   const std::string& owner_tag, bool internal = false);
  // Export and import as state snapshots: the blob's encoding (EncodeStateBlob) and decoding
  // and checks (DecodeStateBlob, against blob_model()) are the caller's, off the engine thread —
  // on it they held every stream for the CRC and finiteness scans of a state of any size.
  // A session on disk gives an open descriptor of its file instead (read, checked and
  // re-encoded by the caller; open, the file stays readable if the session moves meanwhile):
  // the caller closes it.
  struct ExportSource {
    StateSnapshot snapshot;
    int disk_fd = -1;
    std::string disk_path;  // for messages
    DiskStateOf disk_expected;
  };
  absl::StatusOr<ExportSource> ExportSnapshot(const std::string& id, const std::string& owner_tag);
  absl::StatusOr<std::string> ImportSnapshot(std::string id, const std::string& owner_tag,
                                             StateSnapshot snap);
  const BlobModel& blob_model() const { return model_; }

  // A client's next turn on session `id`: refused (ResourceExhausted) while the owner's sessions
  // have grown past its byte quota (the KV of hybrid models grows with each conversation; the
  // quota is otherwise checked only when sessions are made). The front ends ask before a turn;
  // Engine::Submit does not.
  absl::Status CheckGrownQuota(const std::string& id, const std::string& owner_tag) const;

  // Engine side. Acquire marks the session busy (FailedPrecondition when it already is).
  absl::StatusOr<Session*> Acquire(const std::string& id, const std::string& owner_tag);
  // Moves the state into `slot` (freshly allocated by the caller) unless it is in a slot.
  absl::Status Restore(Session* s, int slot);
  // The request is done: the state stays where it is; `pending` is the token sampled last.
  // `turn` counts it as a completed turn; `fed`, the tokens it added to the state, extend the
  // session's text tail.
  void Release(Session* s, std::optional<int32_t> pending, bool turn = true,
               absl::Span<const int32_t> fed = {});
  // Puts back a (busy) session's state from before a request that did not complete its prompt
  // (`state` without bytes: the zero state).
  absl::Status Rewind(Session* s, const HostState& state);
  // Moves the least recently used idle slot-resident session to host RAM; false if none.
  bool OffloadIdle();
  // A step that was computing the session's turn failed part-way (`cause`) and nothing could put
  // its state back: what it held is freed, and Acquire, Fork and Export refuse it with DataLoss
  // naming the cause until it is deleted (Get and List still show it; the disk tier never holds
  // it).
  void MarkLost(Session* s, const absl::Status& cause);
  // Moves a (busy) session's state from its slot to host RAM: preemption of its request.
  absl::Status Park(Session* s);
  // Expires idle sessions unused for longer than the TTL; returns how many.
  int ExpireIdle(absl::Time now);
  // The device is lost (`why`, the engine's Unavailable): what the slots hold cannot be read or
  // written again. Every use of a slot-resident session's state — export, fork, offload, the
  // disk tier's write — then fails with `why`, and so does moving a state into a slot; sessions
  // in host RAM or on disk can still be exported, forked, deleted.
  void LoseDevice(absl::Status why);
  // Writes every idle session that is not on disk yet to the disk tier (graceful drain); after
  // LoseDevice not those in slots (counted in the log line).
  absl::Status PersistAll();

  // What Get says of a session (its position counts the pending token).
  SessionInfo Info(const Session& s) const;
  int idle_in_slots() const;
  TierCounts counts() const;
  int64_t evicted() const { return evicted_; }

 private:
  using Key = std::pair<std::string, std::string>;  // (owner tag, id)
  absl::StatusOr<Session*> Find(const std::string& id, const std::string& owner_tag);
  // NotFound for `id`, saying why when this store knows: evicted or expired lately (gone_), or
  // a disk-tier file it could not read.
  absl::Status Missing(const std::string& id, const std::string& owner_tag) const;
  // Erases `s`, remembering why for its client's next request (Missing).
  void EraseGone(Session& s, std::string why);
  // One more session of `bytes` for the owner: within its session count and its bytes (every
  // tier, KV included: OwnerBytes)?
  absl::Status CheckQuota(const std::string& owner_tag, int64_t bytes) const;
  // `field`: what the id is called in the request (errors name it). An internal session is not
  // held to the quotas.
  absl::StatusOr<Session*> Insert(std::string id, const std::string& owner_tag, int64_t bytes,
                                  absl::string_view field = "session_id", bool internal = false);
  // The bytes a session's state takes where it is: its slot's state and KV blocks, its host copy
  // or its file.
  int64_t Bytes(const Session& s) const;
  int64_t OwnerBytes(const std::string& owner_tag) const;
  absl::StatusOr<StateSnapshot> Snapshot(const Session& s) const;
  std::string DiskPath(const Session& s) const;
  std::string DiskPath(const std::string& owner_tag, const std::string& id) const;
  void Touch(Session& s);
  absl::Status MoveToHost(Session& s);
  absl::Status WriteToDisk(Session& s);
  void EnforceBudgets();
  Session* Victim(Tier tier);
  // Frees what the session's state holds in its tier (slot, host bytes, disk file): it is then
  // in the host tier holding none. Erase, MarkLost.
  void DropState(Session& s);
  void Erase(Session& s);
  void IndexDisk();

  StatePool* pool_;
  const ExecContext* ctx_;
  absl::Status device_lost_;  // LoseDevice's
  BlobModel model_;
  TierOptions options_;
  std::map<Key, Session> sessions_;
  std::map<std::string, int64_t> owner_sessions_;  // sessions by owner tag
  int64_t host_bytes_ = 0, disk_bytes_ = 0, evicted_ = 0;
  // Sessions evicted or expired lately, and why (the oldest forgotten past kMaxGone).
  static constexpr size_t kMaxGone = 4096;
  struct Gone {
    std::string why;
    uint64_t seq = 0;  // its entry in gone_order_ (an older one of the same key is stale)
  };
  std::map<Key, Gone> gone_;
  std::deque<std::pair<Key, uint64_t>> gone_order_;
  uint64_t gone_seq_ = 0;
  uint64_t clock_ = 0;
  // Files of the disk tier that IndexDisk left in place (another model's, damaged, misnamed):
  // the ids whose path they hold are refused, so that no write ever replaces one.
  std::set<std::string> foreign_files_;
};

}  // namespace linfer
