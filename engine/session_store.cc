// SessionStore: bookkeeping, client requests and the engine-side acquire/release. Tier moves,
// budgets and the disk tier are in session_tiers.cc.
#include "engine/session_store.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/weights.h"

namespace linfer {

absl::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kSlot:
      return "slot";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
  }
  return "?";
}

std::string OwnerTag(absl::string_view owner) {
  return absl::StrFormat("%016x", Fnv1a64(absl::StrCat("linfer-owner:", owner)));
}

absl::Status SessionStore::ValidateId(absl::string_view id, absl::string_view field) {
  if (id.empty() || id.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must have 1 to 128 characters, got ", id.size()));
  }
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " may only contain letters, digits, '-', '_' and '.', got '",
                       absl::CHexEscape(id.substr(0, 64)), id.size() > 64 ? "…" : "", "'"));
    }
  }
  return absl::OkStatus();
}

std::string SessionStore::NewId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::StrCat("s-", absl::BytesToHexString(
                                absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes))));
}

SessionStore::SessionStore(StatePool* pool, const ExecContext* ctx, BlobModel model,
                           TierOptions options)
    : pool_(pool), ctx_(ctx), model_(model), options_(std::move(options)) {
  IndexDisk();
}

// No session `id`: an id no session can have is the client's mistake (InvalidArgument, naming
// what is wrong with it), a well-formed one is NotFound.
absl::Status SessionStore::Missing(const std::string& id, const std::string& owner_tag) const {
  RETURN_IF_ERROR(ValidateId(id));
  std::string why;
  if (auto it = gone_.find({owner_tag, id}); it != gone_.end()) {
    why = absl::StrCat(": it was ", it->second.why);
  } else if (!foreign_files_.empty() && foreign_files_.contains(DiskPath(owner_tag, id))) {
    why =
        ": the session disk tier holds a file of that name that this server cannot read "
        "(another model's, or damaged; the server's log says which)";
  }
  return absl::NotFoundError(absl::StrCat("session '", id, "' not found", why));
}

void SessionStore::EraseGone(Session& s, std::string why) {
  Key key = {s.owner_tag, s.id};
  if (!s.internal) {
    gone_[key] = {std::move(why), ++gone_seq_};
    gone_order_.emplace_back(key, gone_seq_);
    while (gone_order_.size() > kMaxGone) {
      const auto& [oldest, seq] = gone_order_.front();
      if (auto it = gone_.find(oldest); it != gone_.end() && it->second.seq == seq) gone_.erase(it);
      gone_order_.pop_front();
    }
  }
  Erase(s);
}

absl::StatusOr<SessionStore::Session*> SessionStore::Find(const std::string& id,
                                                          const std::string& owner_tag) {
  auto it = sessions_.find({owner_tag, id});
  if (it == sessions_.end()) return Missing(id, owner_tag);
  return &it->second;
}

void SessionStore::Touch(Session& s) {
  s.lru = ++clock_;
  s.last_used = absl::Now();
}

SessionInfo SessionStore::Info(const Session& s) const {
  const int64_t pos = s.tier == Tier::kSlot ? pool_->position(s.slot) : s.position;
  return {s.id, s.tier, pos + (s.pending ? 1 : 0), s.busy, s.turns, s.created, s.last_used};
}

int64_t SessionStore::Bytes(const Session& s) const {
  switch (s.tier) {
    case Tier::kSlot:
      return pool_->state_bytes() +
             pool_->kv_held_blocks(s.slot) * pool_->kv_block_tokens() * pool_->kv_bytes_per_token();
    case Tier::kHost:  // a session with no state yet takes one when it is first used
      return s.host.bytes.empty() ? pool_->state_bytes() : s.host.total_bytes();
    case Tier::kDisk:
      return s.disk_size;
  }
  return 0;
}

int64_t SessionStore::OwnerBytes(const std::string& owner_tag) const {
  int64_t n = 0;
  for (auto it = sessions_.lower_bound({owner_tag, ""});
       it != sessions_.end() && it->first.first == owner_tag; ++it) {
    if (!it->second.internal) n += Bytes(it->second);
  }
  return n;
}

absl::Status SessionStore::CheckQuota(const std::string& owner_tag, int64_t bytes) const {
  auto it = owner_sessions_.find(owner_tag);
  const int64_t n = (it == owner_sessions_.end() ? 0 : it->second) + 1;
  if (options_.max_sessions_per_owner > 0 && n > options_.max_sessions_per_owner) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this API key already holds ", n - 1, " sessions (the limit is ",
                     options_.max_sessions_per_owner, "); delete some first"));
  }
  if (options_.max_bytes_per_owner > 0) {
    const int64_t held = OwnerBytes(owner_tag);
    if (held + bytes > options_.max_bytes_per_owner) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this API key's sessions hold ", held, " bytes of state; one more of ", bytes,
          " would exceed its ", options_.max_bytes_per_owner, "; delete some first"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionStore::Session*> SessionStore::Insert(std::string id,
                                                            const std::string& owner_tag,
                                                            int64_t bytes, absl::string_view field,
                                                            bool internal) {
  if (id.empty()) id = NewId();
  RETURN_IF_ERROR(ValidateId(id, field));
  if (sessions_.contains({owner_tag, id})) {
    return absl::AlreadyExistsError(absl::StrCat("session '", id, "' already exists"));
  }
  if (!foreign_files_.empty() && foreign_files_.contains(DiskPath(owner_tag, id))) {
    return absl::AlreadyExistsError(absl::StrCat(
        "session '", id,
        "' has a file in the session disk tier that this server cannot read (another model's, or "
        "damaged); it is left in place: choose another id"));
  }
  if (!internal) RETURN_IF_ERROR(CheckQuota(owner_tag, bytes));
  gone_.erase({owner_tag, id});  // (its entry in gone_order_ is stale now)
  Session& s = sessions_[{owner_tag, id}];
  s.id = std::move(id);
  s.owner_tag = owner_tag;
  s.internal = internal;
  s.created = absl::Now();
  if (!internal) ++owner_sessions_[owner_tag];
  Touch(s);
  return &s;
}

absl::StatusOr<std::string> SessionStore::Create(std::string id, const std::string& owner_tag,
                                                 bool internal) {
  ASSIGN_OR_RETURN(Session * s,
                   Insert(std::move(id), owner_tag, pool_->state_bytes(), "session_id", internal));
  return s->id;
}

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id,
                                              const std::string& owner_tag) const {
  auto it = sessions_.find({owner_tag, id});
  if (it == sessions_.end()) return Missing(id, owner_tag);
  return Info(it->second);
}

std::vector<SessionInfo> SessionStore::List(const std::string& owner_tag) const {
  std::vector<SessionInfo> out;
  for (auto it = sessions_.lower_bound({owner_tag, ""});
       it != sessions_.end() && it->first.first == owner_tag; ++it) {
    if (!it->second.internal) out.push_back(Info(it->second));
  }
  return out;
}

absl::Status SessionStore::Delete(const std::string& id, const std::string& owner_tag) {
  ASSIGN_OR_RETURN(Session * s, Find(id, owner_tag));
  if (s->busy) {
    return absl::FailedPreconditionError(absl::StrCat("session '", id, "' is busy"));
  }
  Erase(*s);
  return absl::OkStatus();
}

absl::StatusOr<std::string> SessionStore::Fork(const std::string& src, std::string dst,
                                               const std::string& owner_tag, bool internal) {
  ASSIGN_OR_RETURN(Session * from, Find(src, owner_tag));
  if (from->busy) {
    return absl::FailedPreconditionError(absl::StrCat("session '", src, "' is busy"));
  }
  if (from->tier == Tier::kSlot) RETURN_IF_ERROR(device_lost_);
  const int64_t turns = from->turns;
  std::vector<int32_t> tail = from->text_tail;
  if (from->tier == Tier::kSlot && pool_->available_slots() > 0) {
    // Slot to slot: the state is copied on the device and the KV blocks are shared (each side
    // copies a shared block before writing into it).
    const int src_slot = from->slot;
    const std::optional<int32_t> pending = from->pending;
    // Charged what OwnerBytes will count for it: its state and the KV blocks it holds (shared
    // with the source until either writes, and its own once either leaves the slots).
    ASSIGN_OR_RETURN(Session * to,
                     Insert(std::move(dst), owner_tag, Bytes(*from), "new_session_id", internal));
    absl::StatusOr<int> slot = pool_->Duplicate(*ctx_, src_slot);
    const absl::Status st = !slot.ok()  ? slot.status()
                            : *slot < 0 ? absl::ResourceExhaustedError(absl::StrCat(
                                              "no free state slot to fork '", src, "' into"))
                                        : absl::OkStatus();
    if (!st.ok()) {
      Erase(*to);
      return st;
    }
    to->tier = Tier::kSlot;
    to->slot = *slot;
    to->pending = pending;
    to->turns = turns;
    to->text_tail = std::move(tail);
    return to->id;
  }
  ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(*from));
  ASSIGN_OR_RETURN(Session * to, Insert(std::move(dst), owner_tag, snap.state.total_bytes(),
                                        "new_session_id", internal));
  to->host = std::move(snap.state);
  to->position = to->host.position;
  to->pending = snap.pending;
  to->turns = turns;
  to->text_tail = std::move(tail);
  host_bytes_ += to->host.total_bytes();
  const std::string id = to->id;
  EnforceBudgets();
  return id;
}

absl::StatusOr<SessionStore::ExportSource> SessionStore::ExportSnapshot(
    const std::string& id, const std::string& owner_tag) {
  ASSIGN_OR_RETURN(Session * s, Find(id, owner_tag));
  if (s->busy) return absl::FailedPreconditionError(absl::StrCat("session '", id, "' is busy"));
  ExportSource out;
  if (s->tier == Tier::kDisk) {
    out.disk_path = DiskPath(*s);
    out.disk_expected = s->disk_expected();
    out.disk_fd = ::open(out.disk_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (out.disk_fd < 0) {
      return SessionFileError(id, absl::DataLossError(absl::StrCat("cannot read ", out.disk_path,
                                                                   ": ", std::strerror(errno))));
    }
    return out;
  }
  ASSIGN_OR_RETURN(out.snapshot, Snapshot(*s));
  out.snapshot.session.reset();  // an export carries the state, not this server's bookkeeping
  return out;
}

absl::StatusOr<std::string> SessionStore::ImportSnapshot(std::string id,
                                                         const std::string& owner_tag,
                                                         StateSnapshot snap) {
  if (snap.state.total_bytes() > options_.host_bytes && options_.disk_dir.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the host tier (", options_.host_bytes, " bytes) cannot hold this state of ",
        snap.state.total_bytes(), " bytes and there is no disk tier; raise --session_host_mb"));
  }
  ASSIGN_OR_RETURN(Session * s, Insert(std::move(id), owner_tag, snap.state.total_bytes()));
  s->host = std::move(snap.state);
  s->position = s->host.position;
  s->pending = snap.pending;
  s->text_tail = std::move(snap.text_tail);
  host_bytes_ += s->host.total_bytes();
  const std::string out = s->id;
  EnforceBudgets();
  if (!sessions_.contains({owner_tag, out})) {
    return absl::ResourceExhaustedError(
        "the imported session was evicted at once: the session "
        "tiers are too small for one more state");
  }
  return out;
}

absl::Status SessionStore::CheckGrownQuota(const std::string& id,
                                           const std::string& owner_tag) const {
  if (options_.max_bytes_per_owner <= 0) return absl::OkStatus();
  const int64_t held = OwnerBytes(owner_tag);
  if (held <= options_.max_bytes_per_owner) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("this API key's sessions have grown to ", held, " bytes, past its quota of ",
                   options_.max_bytes_per_owner, "; delete some to continue session '", id, "'"));
}

absl::StatusOr<SessionStore::Session*> SessionStore::Acquire(const std::string& id,
                                                             const std::string& owner_tag) {
  ASSIGN_OR_RETURN(Session * s, Find(id, owner_tag));
  if (s->busy) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", id, "' is busy with another request"));
  }
  RETURN_IF_ERROR(s->lost);
  s->busy = true;
  Touch(*s);
  return s;
}

void SessionStore::Release(Session* s, std::optional<int32_t> pending, bool turn,
                           absl::Span<const int32_t> fed) {
  s->busy = false;
  s->pending = pending;
  std::vector<int32_t>& tail = s->text_tail;
  fed = fed.subspan(fed.size() - std::min(fed.size(), kMaxTextTail));
  tail.insert(tail.end(), fed.begin(), fed.end());
  if (tail.size() > kMaxTextTail) tail.erase(tail.begin(), tail.end() - kMaxTextTail);
  if (turn) ++s->turns;
  Touch(*s);
}

absl::Status SessionStore::Rewind(Session* s, const HostState& state) {
  if (s->tier == Tier::kSlot) {
    return state.bytes.empty() ? pool_->Clear(*ctx_, s->slot)
                               : pool_->CopyIn(*ctx_, state, s->slot);
  }
  if (s->tier != Tier::kHost) return absl::InternalError("rewinding a session that is on disk");
  const int64_t old_bytes = s->host.total_bytes();
  HostState back = state;
  if (state.kv_in_place) {  // the parked copy's KV holds the checkpoint's positions and more
    pool_->TruncateHostKv(&s->host, state.position);
    back.kv_bytes = std::move(s->host.kv_bytes);
    back.kv_tokens = s->host.kv_tokens;
    back.kv_in_place = false;
  }
  host_bytes_ += back.total_bytes() - old_bytes;
  s->host = std::move(back);
  s->position = s->host.position;
  return absl::OkStatus();
}

int SessionStore::idle_in_slots() const {
  int n = 0;
  for (const auto& [key, s] : sessions_) n += s.tier == Tier::kSlot && !s.busy;
  return n;
}

TierCounts SessionStore::counts() const {
  TierCounts c;
  const int64_t kv_per_token = pool_->kv_bytes_per_token();
  for (const auto& [key, s] : sessions_) {
    c.slot += s.tier == Tier::kSlot;
    c.host += s.tier == Tier::kHost;
    c.disk += s.tier == Tier::kDisk;
    if (s.tier == Tier::kSlot) {
      c.slot_state_bytes += pool_->state_bytes();
      c.slot_kv_bytes += pool_->position(s.slot) * kv_per_token;
    } else if (s.tier == Tier::kHost) {
      c.host_kv_bytes += static_cast<int64_t>(s.host.kv_bytes.size());
    } else {
      c.disk_kv_bytes += s.position * kv_per_token;
    }
  }
  c.host_bytes = host_bytes_;
  c.disk_bytes = disk_bytes_;
  return c;
}

}  // namespace linfer
