// SessionStore: the slot → host → disk → evicted moves, budgets, expiry, and the disk tier
// (atomic 0600 files, re-indexed at start-up).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/session_store.h"

namespace linfer {
namespace fs = std::filesystem;

namespace {

constexpr char kExtension[] = ".lnfstate";
constexpr char kTemporary[] = ".lnfstate.tmp.";  // WriteFileAtomic's, of a session file
// An internal session's state moved to disk (a preempted n > 1 choice's): the request it served
// ends with the process, so the next one removes the file rather than index it as a session.
constexpr char kScratchExtension[] = ".lnfscratch";
constexpr char kScratchTemporary[] = ".lnfscratch.tmp.";

int64_t UnixSeconds(absl::Time t) { return absl::ToUnixSeconds(t); }

}  // namespace

std::string SessionStore::DiskPath(const Session& s) const {
  if (!s.internal) return DiskPath(s.owner_tag, s.id);
  return (fs::path(options_.disk_dir) / absl::StrCat(s.owner_tag, "-", s.id, kScratchExtension))
      .string();
}

std::string SessionStore::DiskPath(const std::string& owner_tag, const std::string& id) const {
  return (fs::path(options_.disk_dir) / absl::StrCat(owner_tag, "-", id, kExtension)).string();
}

absl::StatusOr<StateSnapshot> SessionStore::Snapshot(const Session& s) const {
  RETURN_IF_ERROR(s.lost);
  if (s.tier == Tier::kSlot) RETURN_IF_ERROR(device_lost_);
  StateSnapshot snap;
  snap.pending = s.pending;
  snap.text_tail = s.text_tail;
  snap.session =
      SessionMeta{s.id, s.owner_tag, s.turns, UnixSeconds(s.created), UnixSeconds(s.last_used)};
  switch (s.tier) {
    case Tier::kSlot:
      RETURN_IF_ERROR(pool_->CopyOut(*ctx_, s.slot, &snap.state));
      return snap;
    case Tier::kHost:
      snap.state = s.host;
      if (snap.state.bytes.empty()) snap.state.bytes.assign(pool_->state_bytes(), 0);
      snap.state.position = s.position;
      return snap;
    case Tier::kDisk:
      break;
  }
  const std::string path = DiskPath(s);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // never a FIFO's wait
  absl::StatusOr<StateSnapshot> d =
      fd < 0 ? absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)))
             : ReadDiskState(fd, path, model_, s.disk_expected());
  if (fd >= 0) ::close(fd);
  if (!d.ok()) return SessionFileError(s.id, d.status());
  if (d.ok()) d->session = snap.session;
  return d;
}

absl::Status SessionFileError(const std::string& id, const absl::Status& detail) {
  // The server's log has the path; the client learns which session, not where files live.
  Log(LogLevel::kError, absl::StrCat("session '", id, "': ", detail.message()));
  return absl::DataLossError(absl::StrCat(
      "session '", id,
      "': its file in the session disk tier is missing or damaged (the server's log says how)"));
}

absl::StatusOr<StateSnapshot> ReadDiskState(int fd, const std::string& path, const BlobModel& model,
                                            const DiskStateOf& expected) {
  absl::StatusOr<std::string> bytes = ReadOpenFile(fd, path, MaxStateBlobBytes(model));
  if (!bytes.ok()) return absl::DataLossError(bytes.status().message());
  absl::StatusOr<StateSnapshot> d = DecodeStateBlob(*bytes, model);
  if (!d.ok()) return absl::DataLossError(absl::StrCat(path, ": ", d.status().message()));
  const auto other = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", what, ": it was replaced behind the server's back"));
  };
  if (!d->session) return other("no session in it");
  if (d->session->id != expected.id || d->session->owner_tag != expected.owner_tag) {
    return other(absl::StrCat("it holds session '", d->session->id.substr(0, 64), "' of owner ",
                              d->session->owner_tag.substr(0, 16), ", not '", expected.id,
                              "' of owner ", expected.owner_tag));
  }
  if (d->state.position != expected.position || d->pending != expected.pending) {
    return other(absl::StrCat("its state is at token ", d->state.position,
                              d->pending ? " (one pending)" : "", ", the session's at ",
                              expected.position, expected.pending ? " (one pending)" : ""));
  }
  d->session.reset();
  return d;
}

absl::Status SessionStore::Restore(Session* s, int slot) {
  if (s->tier == Tier::kSlot) return absl::OkStatus();
  RETURN_IF_ERROR(device_lost_);
  ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(*s));
  RETURN_IF_ERROR(pool_->CopyIn(*ctx_, snap.state, slot));
  if (s->tier == Tier::kHost) {
    host_bytes_ -= s->host.total_bytes();
    s->host = HostState();
  } else {
    std::error_code ec;
    fs::remove(DiskPath(*s), ec);
    disk_bytes_ -= s->disk_size;
    s->disk_size = 0;
  }
  s->tier = Tier::kSlot;
  s->slot = slot;
  return absl::OkStatus();
}

void SessionStore::DropState(Session& s) {
  if (s.tier == Tier::kSlot) pool_->Free(s.slot);
  if (s.tier == Tier::kHost) host_bytes_ -= s.host.total_bytes();
  if (s.tier == Tier::kDisk) {
    std::error_code ec;
    fs::remove(DiskPath(s), ec);
    disk_bytes_ -= s.disk_size;
  }
  s.tier = Tier::kHost;
  s.slot = -1;
  s.host = HostState();
  s.position = 0;
  s.disk_size = 0;
}

void SessionStore::MarkLost(Session* s, const absl::Status& cause) {
  if (!s->lost.ok()) return;
  DropState(*s);  // it stays in the host tier holding none (which no eviction or write takes)
  s->pending.reset();
  s->lost = absl::DataLossError(absl::StrCat(
      "session '", s->id, "': its state was lost when a step computing it failed (",
      cause.message(), "); delete it (then a copy exported before can be imported under its id)"));
  Log(LogLevel::kError, s->lost.message());
}

absl::Status SessionStore::MoveToHost(Session& s) {
  RETURN_IF_ERROR(device_lost_);
  RETURN_IF_ERROR(pool_->CopyOut(*ctx_, s.slot, &s.host));
  s.position = s.host.position;
  pool_->Free(s.slot);
  s.slot = -1;
  s.tier = Tier::kHost;
  host_bytes_ += s.host.total_bytes();
  return absl::OkStatus();
}

bool SessionStore::OffloadIdle() {
  Session* victim = nullptr;
  for (auto& [key, s] : sessions_) {
    if (s.tier == Tier::kSlot && !s.busy && (victim == nullptr || s.lru < victim->lru)) victim = &s;
  }
  if (victim == nullptr) return false;
  if (absl::Status st = MoveToHost(*victim); !st.ok()) {
    Log(LogLevel::kError, absl::StrCat("offloading a session failed: ", st.ToString()));
    return false;
  }
  EnforceBudgets();
  return true;
}

absl::Status SessionStore::Park(Session* s) {
  if (s->tier == Tier::kSlot) RETURN_IF_ERROR(MoveToHost(*s));
  return absl::OkStatus();
}

absl::Status SessionStore::WriteToDisk(Session& s) {
  ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(s));
  ASSIGN_OR_RETURN(const std::string blob, EncodeStateBlob(model_, snap));
  RETURN_IF_ERROR(WriteFileAtomic(DiskPath(s), blob, 0600));
  if (s.tier == Tier::kSlot) pool_->Free(s.slot);
  if (s.tier == Tier::kHost) host_bytes_ -= s.host.total_bytes();
  s.host = HostState();
  s.position = snap.state.position;
  s.slot = -1;
  s.tier = Tier::kDisk;
  s.disk_size = static_cast<int64_t>(blob.size());
  disk_bytes_ += s.disk_size;
  return absl::OkStatus();
}

// The least recently used idle session in `tier` of the owner holding the most bytes there
// (one key's large states push out its own sessions, not another key's).
SessionStore::Session* SessionStore::Victim(Tier tier) {
  std::map<std::string, int64_t> held;  // bytes in `tier`, by owner (what is there: an empty
                                        // session, counted as a state by the quota, holds none)
  for (const auto& [key, s] : sessions_) {
    if (s.tier == tier) held[s.owner_tag] += tier == Tier::kHost ? s.host.total_bytes() : Bytes(s);
  }
  Session* v = nullptr;
  int64_t v_held = -1;
  for (auto& [key, s] : sessions_) {
    if (s.tier != tier || s.busy || (tier == Tier::kHost && s.host.bytes.empty())) continue;
    const int64_t owned = held[s.owner_tag];
    if (owned > v_held || (owned == v_held && s.lru < v->lru)) {
      v = &s;
      v_held = owned;
    }
  }
  return v;
}

void SessionStore::EnforceBudgets() {
  while (host_bytes_ > options_.host_bytes) {
    Session* v = Victim(Tier::kHost);
    if (v == nullptr) break;
    std::string why = "evicted: the server's host memory for sessions was full";
    if (!options_.disk_dir.empty()) {
      absl::Status st = WriteToDisk(*v);
      if (st.ok()) continue;
      Log(LogLevel::kError, absl::StrCat("session '", v->id, "': ", st.message(), "; evicting it"));
      why =
          "evicted: its state could not be written to the session disk tier (the server's log "
          "says why)";
    }
    Log(LogLevel::kWarning, absl::StrCat("session '", v->id, "' ", why));
    ++evicted_;
    EraseGone(*v, std::move(why));
  }
  while (disk_bytes_ > options_.disk_bytes) {
    Session* v = Victim(Tier::kDisk);
    if (v == nullptr) break;
    Log(LogLevel::kWarning, absl::StrCat("session '", v->id, "' evicted (disk tier full)"));
    ++evicted_;
    EraseGone(*v, "evicted: the session disk tier was full");
  }
}

void SessionStore::Erase(Session& s) {
  DropState(s);
  if (!s.internal && --owner_sessions_[s.owner_tag] <= 0) owner_sessions_.erase(s.owner_tag);
  const Key key = {s.owner_tag, s.id};  // s dies with the erase
  sessions_.erase(key);
}

int SessionStore::ExpireIdle(absl::Time now) {
  if (options_.ttl <= absl::ZeroDuration()) return 0;
  std::vector<Session*> expired;
  for (auto& [key, s] : sessions_) {
    if (!s.busy && now - s.last_used > options_.ttl) expired.push_back(&s);
  }
  for (Session* s : expired) EraseGone(*s, "deleted after idling longer than --session_ttl_s");
  if (!expired.empty()) {
    Log(LogLevel::kInfo, absl::StrCat(expired.size(), " idle sessions expired (--session_ttl_s)"));
  }
  return static_cast<int>(expired.size());
}

void SessionStore::LoseDevice(absl::Status why) { device_lost_ = std::move(why); }

absl::Status SessionStore::PersistAll() {
  if (options_.disk_dir.empty()) return absl::OkStatus();
  int written = 0, failed = 0, lost = 0;
  absl::Status first;
  for (auto& [key, s] : sessions_) {
    if (s.tier == Tier::kDisk || s.busy || !s.lost.ok() || s.internal) continue;
    if (s.tier == Tier::kSlot && !device_lost_.ok()) {
      ++lost;
      continue;
    }
    absl::Status st = WriteToDisk(s);
    if (st.ok()) {
      ++written;
    } else {
      ++failed;
      if (first.ok()) first = st;
    }
  }
  Log(lost > 0 ? LogLevel::kError : LogLevel::kInfo,
      absl::StrCat(
          "sessions persisted to ", options_.disk_dir, ": ", written,
          failed ? absl::StrCat(" (", failed, " failed)") : "",
          lost ? absl::StrCat("; ", lost, " held in the lost device's memory are gone") : ""));
  if (first.ok()) return first;
  return absl::Status(first.code(), absl::StrCat(failed, " of ", failed + written,
                                                 " not written, the first: ", first.message()));
}

void SessionStore::IndexDisk() {
  if (options_.disk_dir.empty()) return;
  std::error_code ec, listing;  // the directory is there: Engine::Create made sure of it
  int indexed = 0;
  for (const auto& e : fs::directory_iterator(options_.disk_dir, listing)) {
    const std::string path = e.path().string();
    if ((absl::StrContains(path, kTemporary) || absl::StrContains(path, kScratchTemporary)) &&
        IsStaleTemporary(path)) {
      fs::remove(e.path(), ec);  // a session write cut short (a killed shutdown)
      Log(LogLevel::kWarning, absl::StrCat("session disk tier: removed ", path,
                                           ", a write that its process never finished"));
      continue;
    }
    if (e.path().extension() == kScratchExtension) {
      fs::remove(e.path(), ec);
      Log(LogLevel::kInfo, absl::StrCat("session disk tier: removed ", path,
                                        ", a state of the server's own that its process left"));
      continue;
    }
    if (e.path().extension() != kExtension) continue;
    absl::StatusOr<std::string> bytes = ReadFile(path, MaxStateBlobBytes(model_));
    absl::StatusOr<StateSnapshot> snap = bytes.ok() ? DecodeStateBlob(*bytes, model_)
                                                    : absl::StatusOr<StateSnapshot>(bytes.status());
    if (snap.ok() && !snap->session) snap = absl::InvalidArgumentError("no session metadata");
    if (snap.ok() && !ValidateId(snap->session->id).ok())
      snap = absl::InvalidArgumentError("bad id");
    if (!snap.ok()) {
      Log(LogLevel::kWarning, absl::StrCat("session disk tier: skipping ", path, ": ",
                                           snap.status().message(), " (left in place)"));
      foreign_files_.insert(path);
      continue;
    }
    const SessionMeta& m = *snap->session;
    Session& s = sessions_[{m.owner_tag, m.id}];
    if (!s.id.empty() || path != DiskPath(m.owner_tag, m.id)) {
      if (s.id.empty()) sessions_.erase({m.owner_tag, m.id});
      Log(LogLevel::kWarning,
          absl::StrCat("session disk tier: skipping ", path,
                       ": its name does not match its session (left in place)"));
      foreign_files_.insert(path);
      continue;
    }
    s.id = m.id;
    s.owner_tag = m.owner_tag;
    s.tier = Tier::kDisk;
    s.position = snap->state.position;
    s.pending = snap->pending;
    s.text_tail = std::move(snap->text_tail);
    s.turns = m.turns;
    s.disk_size = static_cast<int64_t>(bytes->size());
    s.created = absl::FromUnixSeconds(m.created_unix);
    s.last_used = absl::FromUnixSeconds(m.last_used_unix);
    s.lru = ++clock_;
    disk_bytes_ += s.disk_size;
    ++owner_sessions_[s.owner_tag];
    ++indexed;
  }
  if (listing) {
    Log(LogLevel::kError, absl::StrCat("session disk tier: cannot list ", options_.disk_dir, ": ",
                                       listing.message(), " (no session restored)"));
  }
  if (indexed > 0) {
    Log(LogLevel::kInfo, absl::StrCat("session disk tier: ", indexed, " sessions restored from ",
                                      options_.disk_dir));
  }
}

}  // namespace linfer
