// Copies of a session's state that the engine keeps to go back to (Engine::StateCopy): the state
// before a prompt that takes several steps (Seq::checkpoint: a cancel, deadline or error before
// the prompt ends leaves the session as it was) and the state from before a reply's held-back
// text (Seq::clean_state: a stop string is taken back out). A copy lives in a free slot (device to
// device: on a GPU no PCIe round trip of the whole state, which is tens of MB and would block the
// engine thread) while more slots are free than requests wait, else in host RAM; the pool's
// reclaimer moves slot copies to host RAM first when it needs slots back.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/seq.h"

namespace linfer {

void Engine::KeepStateCopy(Seq& s, std::optional<StateCopy>& copy) {
  DropStateCopy(copy);
  StateCopy c;
  // A slot while one is free for every waiting request too (and the pool's reclaimer parks it
  // when a request needs the slot after all).
  if (pool_.free_slots() > static_cast<int>(waiting_.size())) {
    if (absl::StatusOr<int> slot = pool_.CheckpointToSlot(ctx_, s.slot); slot.ok() && *slot >= 0) {
      c.slot = *slot;
      ++state_copy_slots_;
      ++state_copies_.slot;
      copy = std::move(c);
      return;
    }
  }
  if (pool_.Checkpoint(ctx_, s.slot, &c.host).ok()) {
    copy = std::move(c);
    ++state_copies_.host;
  }
}

bool Engine::ParkStateCopy(Seq& s, std::optional<StateCopy>& copy) {
  if (!copy || copy->slot < 0) return false;
  const int slot = std::exchange(copy->slot, -1);
  if (absl::Status st = pool_.Checkpoint(ctx_, slot, &copy->host); !st.ok()) {
    Log(LogLevel::kError,
        absl::StrCat("request ", s.id, ": moving its state copy to host memory: ", st.ToString()));
    copy.reset();  // no way back: a stop string then stays in the state, a cut prompt's start too
  }
  pool_.Free(slot);
  --state_copy_slots_;
  ++state_copies_.moved;
  return true;
}

bool Engine::ParkStateCopies(Seq& s) {
  const bool checkpoint = ParkStateCopy(s, s.checkpoint);
  return ParkStateCopy(s, s.clean_state) || checkpoint;
}

bool Engine::ParkAStateCopy() {
  if (state_copy_slots_ == 0) return false;
  for (auto& [id, s] : seqs_) {
    if (ParkStateCopy(*s, s->clean_state) || ParkStateCopy(*s, s->checkpoint)) return true;
  }
  return false;
}

void Engine::DropStateCopy(std::optional<StateCopy>& copy) {
  if (copy && copy->slot >= 0) {
    pool_.Free(copy->slot);
    --state_copy_slots_;
  }
  copy.reset();
}

absl::Status Engine::RestoreStateCopy(Seq& s, std::optional<StateCopy>& copy) {
  if (!copy) return absl::InternalError("its state copy was lost");
  // The session is in the sequence's slot while it runs: a copy in a slot goes back device to
  // device.
  if (copy->slot >= 0 && s.slot >= 0 && s.session->tier == Tier::kSlot &&
      s.session->slot == s.slot) {
    return pool_.RestoreFromSlot(ctx_, copy->slot, s.slot);
  }
  ParkStateCopy(s, copy);
  if (!copy) return absl::InternalError("its state copy was lost");
  return sessions_.Rewind(s.session, copy->host);
}

bool Engine::RollBack(Seq& s) {
  absl::Status st = RestoreStateCopy(s, s.checkpoint);
  if (!st.ok()) {
    Log(LogLevel::kError,
        absl::StrCat("session '", s.req.session_id,
                     "': restoring its state after a cut-short prompt failed: ", st.ToString()));
  }
  return st.ok();
}

}  // namespace linfer
