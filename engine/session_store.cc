// SessionStore: session bookkeeping and the slot → host → disk → evicted tier moves.
#include "engine/session_store.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kernels/logging.h"
#include "kernels/status_macros.h"

namespace linfer {
namespace fs = std::filesystem;

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

SessionStore::SessionStore(StatePool* pool, uint64_t fingerprint, TierOptions options)
    : pool_(pool), fingerprint_(fingerprint), options_(std::move(options)) {
  if (options_.disk_dir.empty()) return;
  std::error_code ec;
  fs::create_directories(options_.disk_dir, ec);
  for (const auto& e : fs::directory_iterator(options_.disk_dir, ec)) {
    if (e.path().extension() == ".lnfstate") fs::remove(e.path(), ec);
  }
}

absl::Status SessionStore::ValidateId(absl::string_view id) {
  if (id.empty() || id.size() > 128) {
    return absl::InvalidArgumentError("session_id must have 1 to 128 characters");
  }
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "session_id may only contain letters, digits, '-', '_' and '.', got '", id, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionStore::Session*> SessionStore::Find(const std::string& id,
                                                          const std::string& owner) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.owner != owner) {
    return absl::NotFoundError(absl::StrCat("session '", id, "' not found"));
  }
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

absl::Status SessionStore::Create(const std::string& id, const std::string& owner) {
  RETURN_IF_ERROR(ValidateId(id));
  if (sessions_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("session '", id, "' already exists"));
  }
  Session& s = sessions_[id];
  s.id = id;
  s.owner = owner;
  s.created = absl::Now();
  Touch(s);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id,
                                              const std::string& owner) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.owner != owner) {
    return absl::NotFoundError(absl::StrCat("session '", id, "' not found"));
  }
  return Info(it->second);
}

std::vector<SessionInfo> SessionStore::List(const std::string& owner) const {
  std::vector<SessionInfo> out;
  for (const auto& [id, s] : sessions_) {
    if (s.owner == owner) out.push_back(Info(s));
  }
  return out;
}

void SessionStore::Erase(Session& s) {
  if (s.tier == Tier::kSlot) pool_->Free(s.slot);
  if (s.tier == Tier::kHost) host_bytes_ -= static_cast<int64_t>(s.host.size() * sizeof(float));
  if (s.tier == Tier::kDisk) {
    std::error_code ec;
    fs::remove(DiskPath(s), ec);
    disk_bytes_ -= s.disk_size;
  }
  const std::string id = s.id;  // s dies with the erase
  sessions_.erase(id);
}

absl::Status SessionStore::Delete(const std::string& id, const std::string& owner) {
  ASSIGN_OR_RETURN(Session * s, Find(id, owner));
  if (s->busy) {
    return absl::FailedPreconditionError(absl::StrCat("session '", id, "' is busy"));
  }
  Erase(*s);
  return absl::OkStatus();
}

std::string SessionStore::DiskPath(const Session& s) const {
  return (fs::path(options_.disk_dir) / (s.id + ".lnfstate")).string();
}

absl::StatusOr<StateSnapshot> SessionStore::Snapshot(const Session& s) const {
  StateSnapshot snap;
  snap.pending = s.pending;
  if (s.tier == Tier::kSlot) {
    const float* d = pool_->data(s.slot);
    snap.data.assign(d, d + pool_->state_floats());
    snap.position = pool_->position(s.slot);
    return snap;
  }
  if (s.tier == Tier::kHost) {
    snap.data = s.host;
    if (snap.data.empty()) snap.data.assign(pool_->state_floats(), 0.0f);
    snap.position = s.position;
    return snap;
  }
  std::ifstream in(DiskPath(s), std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) return absl::DataLossError(absl::StrCat("cannot read ", DiskPath(s)));
  absl::StatusOr<StateSnapshot> d =
      DecodeStateBlob(bytes.str(), fingerprint_, pool_->state_floats());
  if (!d.ok()) return absl::DataLossError(absl::StrCat(DiskPath(s), ": ", d.status().message()));
  return d;
}

absl::Status SessionStore::Fork(const std::string& src, const std::string& dst,
                                const std::string& owner) {
  ASSIGN_OR_RETURN(Session * from, Find(src, owner));
  if (from->busy) {
    return absl::FailedPreconditionError(absl::StrCat("session '", src, "' is busy"));
  }
  ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(*from));
  const int64_t turns = from->turns;
  RETURN_IF_ERROR(Create(dst, owner));
  Session& to = sessions_.at(dst);
  to.host = std::move(snap.data);
  to.position = snap.position;
  to.pending = snap.pending;
  to.turns = turns;
  host_bytes_ += static_cast<int64_t>(to.host.size() * sizeof(float));
  EnforceBudgets();
  return absl::OkStatus();
}

absl::StatusOr<std::string> SessionStore::Export(const std::string& id, const std::string& owner) {
  ASSIGN_OR_RETURN(Session * s, Find(id, owner));
  if (s->busy) return absl::FailedPreconditionError(absl::StrCat("session '", id, "' is busy"));
  ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(*s));
  return EncodeStateBlob(fingerprint_, snap.data, snap.position, snap.pending);
}

absl::Status SessionStore::Import(const std::string& id, const std::string& owner,
                                  absl::string_view blob) {
  RETURN_IF_ERROR(ValidateId(id));
  ASSIGN_OR_RETURN(StateSnapshot snap, DecodeStateBlob(blob, fingerprint_, pool_->state_floats()));
  RETURN_IF_ERROR(Create(id, owner));
  Session& s = sessions_.at(id);
  s.host = std::move(snap.data);
  s.position = snap.position;
  s.pending = snap.pending;
  host_bytes_ += static_cast<int64_t>(s.host.size() * sizeof(float));
  EnforceBudgets();
  return absl::OkStatus();
}

absl::StatusOr<SessionStore::Session*> SessionStore::Acquire(const std::string& id,
                                                             const std::string& owner) {
  ASSIGN_OR_RETURN(Session * s, Find(id, owner));
  if (s->busy) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", id, "' is busy with another request"));
  }
  s->busy = true;
  Touch(*s);
  return s;
}

absl::Status SessionStore::Restore(Session* s, int slot) {
  if (s->tier == Tier::kSlot) return absl::OkStatus();
  ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(*s));
  std::memcpy(pool_->data(slot), snap.data.data(), snap.data.size() * sizeof(float));
  pool_->position(slot) = snap.position;
  if (s->tier == Tier::kHost) {
    host_bytes_ -= static_cast<int64_t>(s->host.size() * sizeof(float));
    s->host.clear();
    s->host.shrink_to_fit();
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

void SessionStore::Release(Session* s, std::optional<int32_t> pending) {
  s->busy = false;
  s->pending = pending;
  ++s->turns;
  Touch(*s);
}

int SessionStore::idle_in_slots() const {
  int n = 0;
  for (const auto& [id, s] : sessions_) n += s.tier == Tier::kSlot && !s.busy;
  return n;
}

bool SessionStore::OffloadIdle() {
  Session* victim = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.tier == Tier::kSlot && !s.busy && (victim == nullptr || s.lru < victim->lru)) victim = &s;
  }
  if (victim == nullptr) return false;
  MoveToHost(*victim);
  EnforceBudgets();
  return true;
}

void SessionStore::Park(Session* s) {
  if (s->tier == Tier::kSlot) MoveToHost(*s);
}

void SessionStore::MoveToHost(Session& s) {
  const float* d = pool_->data(s.slot);
  s.host.assign(d, d + pool_->state_floats());
  s.position = pool_->position(s.slot);
  pool_->Free(s.slot);
  s.slot = -1;
  s.tier = Tier::kHost;
  host_bytes_ += static_cast<int64_t>(s.host.size() * sizeof(float));
}

void SessionStore::EnforceBudgets() {
  auto lru_idle = [&](Tier tier) {
    Session* v = nullptr;
    for (auto& [id, s] : sessions_) {
      const bool holds = tier == Tier::kHost ? !s.host.empty() : true;
      if (s.tier == tier && holds && !s.busy && (v == nullptr || s.lru < v->lru)) v = &s;
    }
    return v;
  };
  while (host_bytes_ > options_.host_bytes) {
    Session* v = lru_idle(Tier::kHost);
    if (v == nullptr) break;
    if (!options_.disk_dir.empty()) {
      const std::string blob = EncodeStateBlob(fingerprint_, v->host, v->position, v->pending);
      std::ofstream out(DiskPath(*v), std::ios::binary | std::ios::trunc);
      out.write(blob.data(), static_cast<std::streamsize>(blob.size()));
      out.close();
      if (out) {
        host_bytes_ -= static_cast<int64_t>(v->host.size() * sizeof(float));
        v->host.clear();
        v->host.shrink_to_fit();
        v->tier = Tier::kDisk;
        v->disk_size = static_cast<int64_t>(blob.size());
        disk_bytes_ += v->disk_size;
        continue;
      }
      Log(LogLevel::kError, absl::StrCat("cannot write ", DiskPath(*v), "; evicting the session"));
    }
    Log(LogLevel::kWarning, absl::StrCat("session '", v->id, "' evicted (host tier full)"));
    ++evicted_;
    Erase(*v);
  }
  while (disk_bytes_ > options_.disk_bytes) {
    Session* v = lru_idle(Tier::kDisk);
    if (v == nullptr) break;
    Log(LogLevel::kWarning, absl::StrCat("session '", v->id, "' evicted (disk tier full)"));
    ++evicted_;
    Erase(*v);
  }
}

TierCounts SessionStore::counts() const {
  TierCounts c;
  for (const auto& [id, s] : sessions_) {
    c.slot += s.tier == Tier::kSlot;
    c.host += s.tier == Tier::kHost;
    c.disk += s.tier == Tier::kDisk;
  }
  c.host_bytes = host_bytes_;
  c.disk_bytes = disk_bytes_;
  return c;
}

}  // namespace linfer
