// The slot pool: the model's per-layer [slots, ...] state tensors on the engine's device (held by
// ModelStates), a free list over slot ids and a token position per slot. Its CopyOut / CopyIn /
// Copy are the only doors by which state moves between slots and host memory (offload, restore,
// preemption, fork, export, import). Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/context.h"
#include "models/model.h"
#include "models/state.h"

namespace linfer {

class StatePool {
 public:
  // `slots` ≥ 1 slots for `model`'s state specs on the model's device, and (hybrid models) a
  // paged KV cache of kv.budget_bytes.
  static absl::StatusOr<StatePool> Create(const Model& model, int slots, const KvOptions& kv = {});

  // Slots a byte budget holds (at least 1).
  static int SlotsForBudget(int64_t budget_bytes, int64_t state_bytes);

  int num_slots() const { return static_cast<int>(positions_.size()); }
  int free_slots() const { return static_cast<int>(free_.size()); }
  int used_slots() const { return num_slots() - free_slots(); }
  int64_t state_bytes() const { return states_.slot_bytes(); }
  const ModelStates& states() const { return states_; }

  // A zeroed slot (position 0; `zero` false: its contents unspecified, for a copy into it), or −1
  // when none is free — after the reclaimer, if set, has freed what it could.
  absl::StatusOr<int> Allocate(const ExecContext& ctx, bool zero = true);
  // `reclaim` is called while no slot is free: it frees one (Free) and returns true, or returns
  // false; `reclaimable` says how many it could free. The engine's: the prefix cache's device tier
  // gives back its least recently used slot.
  void SetReclaimer(std::function<bool()> reclaim, std::function<int()> reclaimable) {
    reclaim_ = std::move(reclaim);
    reclaimable_ = std::move(reclaimable);
  }
  // Slots Allocate can hand out: the free ones and those the reclaimer can free.
  int available_slots() const { return free_slots() + (reclaimable_ ? reclaimable_() : 0); }
  // A new slot holding a copy of `src` (Allocate without zeroing, then Copy), or −1 when none is
  // free; on an error no slot is taken.
  absl::StatusOr<int> Duplicate(const ExecContext& ctx, int src);
  void Free(int slot);  // also returns its KV blocks
  int64_t position(int slot) const { return positions_[slot]; }
  void set_position(int slot, int64_t position) { positions_[slot] = position; }

  // KV blocks (hybrid models; all zero otherwise). ReserveKv: see ModelStates::ReserveKv.
  bool has_kv() const { return states_.has_kv(); }
  int64_t kv_blocks_needed(int slot, int64_t tokens) const {
    return has_kv() ? states_.kv().BlocksNeeded(slot, tokens) : 0;
  }
  int64_t kv_free_blocks() const { return has_kv() ? states_.kv().free_blocks() : 0; }
  int64_t kv_total_blocks() const { return has_kv() ? states_.kv().num_blocks() : 0; }
  int64_t kv_held_blocks(int slot) const { return has_kv() ? states_.kv().held(slot) : 0; }
  int64_t kv_blocks_to_reserve(int slot, int64_t tokens, int64_t write_from) const {
    return has_kv() ? states_.kv().BlocksToReserve(slot, tokens, write_from) : 0;
  }
  int kv_block_tokens() const { return has_kv() ? states_.kv().block_tokens() : 0; }
  int64_t kv_bytes_per_token() const { return has_kv() ? states_.kv().bytes_per_token() : 0; }
  // Blocks that hold `tokens` positions (0 without KV).
  int64_t kv_blocks_for(int64_t tokens) const {
    return has_kv() ? (tokens + kv_block_tokens() - 1) / kv_block_tokens() : 0;
  }
  absl::Status ReserveKv(const ExecContext& ctx, int slot, int64_t tokens, int64_t write_from) {
    return states_.ReserveKv(ctx, slot, tokens, write_from);
  }

  // The doors: a slot's state and its KV move together. CopyOut fills `out` (bytes, KV of the
  // slot's positions, position); CopyIn sets the slot's position too.
  absl::Status CopyOut(const ExecContext& ctx, int slot, HostState* out) const;
  absl::Status CopyIn(const ExecContext& ctx, const HostState& in, int slot);
  // CopyOut for the prefix cache: the KV stays in its blocks, pinned (copy-on-write) by `out`.
  absl::Status Snapshot(const ExecContext& ctx, int slot, HostState* out);
  // A rollback point of the slot: its state and position, the KV left in place (kv_in_place).
  absl::Status Checkpoint(const ExecContext& ctx, int slot, HostState* out) const;
  // Checkpoint into a free slot instead (device to device: no host copy): a new slot holding
  // `slot`'s state and position, its KV left in `slot`'s blocks, or −1 when no slot is free (the
  // reclaimer is not asked: a rollback copy is worth less than what it would take back).
  absl::StatusOr<int> CheckpointToSlot(const ExecContext& ctx, int slot);
  // `slot` back to the checkpoint `copy` (CheckpointToSlot of it): state and position, its KV past
  // that position dropped. `copy` stays taken (Free it).
  absl::Status RestoreFromSlot(const ExecContext& ctx, int copy, int slot);
  void TruncateHostKv(HostState* state, int64_t tokens) const {
    states_.TruncateHostKv(state, tokens);
  }
  absl::Status Copy(const ExecContext& ctx, int src, int dst);
  // A taken slot back to the zero state at position 0 (its KV released).
  absl::Status Clear(const ExecContext& ctx, int slot);

 private:
  ModelStates states_;              // per layer, per spec: [slots, ...shape]
  std::vector<int64_t> positions_;  // [slots]
  std::vector<int> free_;           // stack of free slot ids
  std::function<bool()> reclaim_;
  std::function<int()> reclaimable_;
};

}  // namespace linfer
