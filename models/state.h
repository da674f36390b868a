// What a model keeps per sequence, described as data: each layer declares its state tensors
// (StateSpec), and ModelStates holds, per layer and spec, one [slots, ...shape] tensor on the
// model's device, indexed by the slot ids of a step's segment table. HostState is one slot's
// state in host memory (offload tiers, fork, export) and the Copy* functions are the only
// host↔device moves of state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/context.h"
#include "kernels/tensor.h"
#include "kernels/transfer.h"
#include "models/host_memory.h"
#include "models/kv_cache.h"
#include "models/state_spec.h"

namespace linfer {

// KV blocks a snapshot keeps referenced in the cache instead of copying them out (the prefix
// cache's hybrid snapshots): the references go when the last HostState holding the pin does. The
// cache must outlive every pin (the engine destroys its prefix cache and requests before its pool).
class KvPin {
 public:
  KvPin(KvCache* cache, std::vector<int32_t> blocks, int64_t tokens)
      : cache_(cache), blocks_(std::move(blocks)), tokens_(tokens) {}
  ~KvPin() { cache_->Unpin(blocks_); }
  KvPin(const KvPin&) = delete;
  KvPin& operator=(const KvPin&) = delete;
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t tokens() const { return tokens_; }

 private:
  KvCache* cache_;
  std::vector<int32_t> blocks_;
  int64_t tokens_;
};

// One slot's state on the host: the slot-resident specs' bytes back to back, layer by layer in
// spec order, plus the tokens consumed into it; for hybrid models also the paged KV of positions
// [0, kv_tokens), layer after layer ([kv_tokens, 2, kv_heads, head_dim] f32 each) — or, for a
// snapshot, a pin on the blocks that hold it (kv_bytes empty, kv_tokens = pin's tokens).
struct HostState {
  HostBytes bytes;  // pinned with a CUDA engine (models/host_memory.h)
  int64_t position = 0;
  HostBytes kv_bytes;
  int64_t kv_tokens = 0;
  // A rollback checkpoint: the KV was not copied, because the slot's own blocks keep positions
  // [0, position) unchanged (keys and values are only appended); restoring it into the same
  // sequence drops the blocks past `position`.
  bool kv_in_place = false;
  std::shared_ptr<const KvPin> kv_pin;
  // A snapshot whose `bytes` may still be arriving (ModelStates::Snapshot with an asynchronous
  // copy): Settle() before reading them. Declared last, so destroyed first: its destructor waits,
  // so the copy never lands in freed memory. Copying a HostState, or assigning over one, settles
  // first (moving one moves the buffer the copy writes into, and its pending copy with it).
  std::shared_ptr<PendingCopy> pending;

  HostState() = default;
  HostState(const HostState& o) { *this = o; }
  HostState& operator=(const HostState& o);
  HostState(HostState&&) = default;
  HostState& operator=(HostState&& o) noexcept;
  ~HostState() = default;

  // Waits until `bytes` have landed (OK at once when nothing is in flight); the copy's error if
  // it failed (the bytes are then garbage).
  absl::Status Settle() const { return pending != nullptr ? pending->Wait() : absl::OkStatus(); }
  int64_t total_bytes() const { return static_cast<int64_t>(bytes.size() + kv_bytes.size()); }
};

// The paged KV cache's size (models with full-attention layers; ignored otherwise).
struct KvOptions {
  int64_t budget_bytes = 0;  // 0: grow on demand (SequenceRunner); the engine gives a budget
  int block_tokens = 16;
};

class ModelStates {
 public:
  // [slots, ...] tensors for every kFixed/kRing spec on `device`, zeroed unless `zero` is false
  // (a pool that zeroes each slot when it hands it out leaves untouched host memory uncommitted),
  // and a paged KV cache for the kPaged specs.
  static absl::StatusOr<ModelStates> Allocate(std::vector<LayerStateSpecs> specs, int slots,
                                              Device device, bool zero = true,
                                              const KvOptions& kv = {});
  ModelStates() = default;
  ModelStates(ModelStates&&) = default;
  ModelStates& operator=(ModelStates&&) = default;

  int num_slots() const { return slots_; }
  Device device() const { return device_; }
  const std::vector<LayerStateSpecs>& specs() const { return specs_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  // Layer l's state tensors, one per spec in spec order: [slots, ...shape] for slot-resident
  // specs, the KV cache's [blocks, block_tokens, ...shape] storage for a kPaged spec.
  absl::Span<const TensorView> layer(int l) const { return views_[l]; }
  const KvCache& kv() const { return *kv_; }
  bool has_kv() const { return kv_ != nullptr && !kv_->empty(); }

  // Makes `slot`'s KV hold positions [0, tokens), privately from `write_from` on (copy-on-write
  // of a block shared with a fork). ResourceExhausted (nothing changed) when the cache is full,
  // unless it grows on demand (KvOptions::budget_bytes == 0).
  absl::Status ReserveKv(const ExecContext& ctx, int slot, int64_t tokens, int64_t write_from);

  // The doors: slot → host (with the KV of positions [0, kv_tokens); kv_tokens < 0: a checkpoint
  // that leaves the KV in place), host → slot, slot → slot (a fork: KV blocks shared), and
  // clearing a slot (zero state, KV released). All on ctx's stream; a slot's recurrent state and
  // KV move together.
  absl::Status CopyOut(const ExecContext& ctx, int slot, int64_t kv_tokens, HostState* out) const;
  absl::Status CopyIn(const ExecContext& ctx, const HostState& in, int slot);
  // CopyOut whose KV stays in the cache: `out` pins the blocks of positions [0, kv_tokens)
  // (copy-on-write keeps them unchanged); CopyIn of it makes the slot share them. With a stager
  // (CUDA, LINFER_CUDA_ASYNC_SNAPSHOTS=1) the state's bytes may still be on their way when it
  // returns (out->pending): the copy overlaps the steps that follow.
  absl::Status Snapshot(const ExecContext& ctx, int slot, int64_t kv_tokens, HostState* out);
  absl::Status Copy(const ExecContext& ctx, int src, int dst);
  // Slot → slot, the slot-resident state only (one launch on CUDA): a rollback copy, whose KV
  // stays in the source slot's blocks.
  absl::Status CopyState(const ExecContext& ctx, int src, int dst);
  // Drops `slot`'s KV blocks past positions [0, tokens) (a rollback to a copy of its state).
  void TruncateKv(int slot, int64_t tokens) {
    if (has_kv()) kv_->Truncate(slot, tokens);
  }
  absl::Status Zero(const ExecContext& ctx, int slot);
  // Returns the slot's KV blocks (a freed slot holds none).
  void ReleaseKv(int slot);
  // The KV bytes of a host state cut to positions [0, tokens) (every layer's part shrinks).
  void TruncateHostKv(HostState* state, int64_t tokens) const;

 private:
  void RefreshKvViews();
  // The slot's row of every slot-resident state tensor, layer by layer in spec order (HostState's
  // byte order).
  std::vector<TensorView> SlotRows(int slot) const;

  std::vector<LayerStateSpecs> specs_;
  std::vector<std::vector<Tensor>> tensors_;
  std::vector<std::vector<TensorView>> views_;
  std::vector<std::vector<int>> slot_index_;  // per layer: indices in views_ of slot tensors
  std::unique_ptr<KvCache> kv_;
  bool kv_grows_ = false;
  int slots_ = 0;
  Device device_ = Device::kCpu;
  int64_t slot_bytes_ = 0;
  std::shared_ptr<DownloadStager> stager_;  // Snapshot's asynchronous copies (null: at once)
};

}  // namespace linfer
