// StatePool: a free list over ModelStates' slots, and the copy doors.
#include "engine/state_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer {

absl::StatusOr<StatePool> StatePool::Create(const Model& model, int slots, const KvOptions& kv) {
  StatePool pool;
  ASSIGN_OR_RETURN(pool.states_, ModelStates::Allocate(model.state_specs(), slots, model.device(),
                                                       /*zero=*/false, kv));
  pool.positions_.assign(static_cast<size_t>(slots), 0);
  for (int s = slots - 1; s >= 0; --s) pool.free_.push_back(s);
  return pool;
}

int StatePool::SlotsForBudget(int64_t budget_bytes, int64_t state_bytes) {
  if (state_bytes <= 0) return 1;
  return static_cast<int>(std::clamp<int64_t>(budget_bytes / state_bytes, 1, 1 << 20));
}

absl::StatusOr<int> StatePool::Allocate(const ExecContext& ctx, bool zero) {
  while (free_.empty() && reclaim_ && reclaim_()) {
  }
  if (free_.empty()) return -1;
  const int slot = free_.back();
  if (zero) RETURN_IF_ERROR(states_.Zero(ctx, slot));
  free_.pop_back();
  positions_[slot] = 0;
  return slot;
}

absl::StatusOr<int> StatePool::Duplicate(const ExecContext& ctx, int src) {
  ASSIGN_OR_RETURN(const int slot, Allocate(ctx, /*zero=*/false));
  if (slot < 0) return -1;
  if (absl::Status st = Copy(ctx, src, slot); !st.ok()) {
    Free(slot);
    return st;
  }
  return slot;
}

void StatePool::Free(int slot) {
  states_.ReleaseKv(slot);
  free_.push_back(slot);
}

absl::Status StatePool::CopyOut(const ExecContext& ctx, int slot, HostState* out) const {
  RETURN_IF_ERROR(states_.CopyOut(ctx, slot, positions_[slot], out));
  out->position = positions_[slot];
  return absl::OkStatus();
}

absl::Status StatePool::Snapshot(const ExecContext& ctx, int slot, HostState* out) {
  RETURN_IF_ERROR(states_.Snapshot(ctx, slot, positions_[slot], out));
  out->position = positions_[slot];
  return absl::OkStatus();
}

absl::Status StatePool::Checkpoint(const ExecContext& ctx, int slot, HostState* out) const {
  RETURN_IF_ERROR(states_.CopyOut(ctx, slot, -1, out));
  out->position = positions_[slot];
  return absl::OkStatus();
}

absl::StatusOr<int> StatePool::CheckpointToSlot(const ExecContext& ctx, int slot) {
  if (free_.empty()) return -1;
  const int copy = free_.back();
  RETURN_IF_ERROR(states_.CopyState(ctx, slot, copy));
  free_.pop_back();
  positions_[copy] = positions_[slot];
  return copy;
}

absl::Status StatePool::RestoreFromSlot(const ExecContext& ctx, int copy, int slot) {
  const int64_t position = positions_[copy];
  if (has_kv() && states_.kv().BlocksNeeded(slot, position) > 0) {
    return absl::InternalError(absl::StrCat("slot ", slot, " does not hold the KV of the ",
                                            position, " tokens its checkpoint needs"));
  }
  RETURN_IF_ERROR(states_.CopyState(ctx, copy, slot));
  states_.TruncateKv(slot, position);
  positions_[slot] = position;
  return absl::OkStatus();
}

absl::Status StatePool::CopyIn(const ExecContext& ctx, const HostState& in, int slot) {
  RETURN_IF_ERROR(states_.CopyIn(ctx, in, slot));
  positions_[slot] = in.position;
  return absl::OkStatus();
}

absl::Status StatePool::Clear(const ExecContext& ctx, int slot) {
  RETURN_IF_ERROR(states_.Zero(ctx, slot));
  positions_[slot] = 0;
  return absl::OkStatus();
}

absl::Status StatePool::Copy(const ExecContext& ctx, int src, int dst) {
  RETURN_IF_ERROR(states_.Copy(ctx, src, dst));
  positions_[dst] = positions_[src];
  return absl::OkStatus();
}

}  // namespace linfer
