// Paged KV cache for the full-attention layers of hybrid models: per paged layer one storage
// tensor [blocks, block_tokens, 2, kv_heads, head_dim] on the device, a free list of block ids
// shared by all layers (a block id names the same block in every layer), per-slot block lists and
// reference counts, so that a fork shares blocks and copies one only before writing into it
// (copy-on-write). Not thread-safe: the engine thread owns it (through the state pool).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/attention.h"
#include "kernels/context.h"
#include "kernels/segments.h"
#include "models/host_memory.h"
#include "models/state_spec.h"

namespace linfer {

// A step's block tables: for every segment of the step, its slot's block ids (padded with −1) on
// the host and on the device, [segments, max_blocks] I32.
struct BlockTables {
  std::vector<int32_t> host;
  TensorView device;
  int64_t max_blocks = 0;
  int block_tokens = 0;
  BlockTableView view() const { return {host, device, max_blocks, block_tokens}; }
};

class KvCache {
 public:
  // Storage for every kPaged spec of `specs` (per token [2, kv_heads, head_dim]) within
  // `budget_bytes` (at least one block per slot's worth is not guaranteed: the engine admits by
  // free blocks); budget 0 starts with one block per slot (for Grow). A model without paged
  // layers gets an empty cache.
  static absl::StatusOr<KvCache> Allocate(const std::vector<LayerStateSpecs>& specs, int slots,
                                          int64_t budget_bytes, int block_tokens, Device device);
  KvCache() = default;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  bool empty() const { return layers_.empty(); }
  int block_tokens() const { return block_tokens_; }
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return num_blocks() - free_blocks(); }
  int64_t bytes_per_token() const { return bytes_per_token_; }
  int64_t bytes_per_block() const { return bytes_per_token_ * block_tokens_; }
  // Blocks slot `slot` holds, and blocks it would need in addition to hold `tokens` positions.
  int64_t held(int slot) const { return static_cast<int64_t>(tables_[slot].size()); }
  int64_t BlocksNeeded(int slot, int64_t tokens) const;
  // Free blocks Reserve(slot, tokens, write_from) takes: new ones plus copies of shared ones.
  int64_t BlocksToReserve(int slot, int64_t tokens, int64_t write_from) const;
  // Layer l's storage (empty view for a layer without a paged spec).
  const TensorView& layer(int l) const { return layer_views_[l]; }

  // Makes slot `slot` hold positions [0, tokens) with its block from `write_from` on private:
  // allocates missing blocks and copies a shared block that positions ≥ write_from fall in.
  // ResourceExhausted (nothing changed) when the free list cannot cover it.
  absl::Status Reserve(const ExecContext& ctx, int slot, int64_t tokens, int64_t write_from);
  // Enlarges the storage to at least `blocks` blocks (copying the used ones; tables stay valid,
  // layer views change).
  absl::Status Grow(const ExecContext& ctx, int64_t blocks);
  // Drops the slot's blocks past those holding positions [0, tokens).
  void Truncate(int slot, int64_t tokens);
  // Drops every block of the slot (a block returns to the free list with its last reference).
  void Release(int slot);
  // dst (empty) shares src's blocks.
  void Share(int src, int dst);
  // References to the blocks holding the slot's positions [0, tokens), for a snapshot that keeps
  // them instead of a copy (copy-on-write protects them: the slot copies a shared block before
  // writing into it); Unpin drops such references; Adopt makes the (emptied) slot hold them.
  std::vector<int32_t> Pin(int slot, int64_t tokens);
  void Unpin(const std::vector<int32_t>& blocks);
  void Adopt(int slot, const std::vector<int32_t>& blocks);
  // The block tables of `segments` into host[segments × max_blocks], −1 padded; max_blocks must
  // be ≥ held() of every segment's slot (StepTables takes the widest; CUDA graphs a bucket).
  void FillTables(absl::Span<const Segment> segments, int64_t max_blocks, int32_t* host) const;
  // The step's tables for `segments` (their slots), uploaded to scratch of ctx's arena.
  absl::StatusOr<BlockTables> StepTables(const ExecContext& ctx,
                                         absl::Span<const Segment> segments) const;
  // Positions [0, tokens) of the slot as host bytes, layer after layer ([tokens, 2, Hkv, D] f32
  // each), appended to `out`; and the inverse into blocks reserved before (Reserve).
  absl::Status CopyOut(const ExecContext& ctx, int slot, int64_t tokens, HostBytes* out) const;
  absl::Status CopyIn(const ExecContext& ctx, int slot, int64_t tokens, const uint8_t* data);

 private:
  absl::StatusOr<int32_t> Take();
  void Drop(int32_t block);

  int block_tokens_ = 0;
  int64_t bytes_per_token_ = 0;               // all paged layers together
  std::vector<int> layers_;                   // layer index of each paged storage
  std::vector<Tensor> storage_;               // per paged layer [blocks, bt, 2, Hkv, D]
  std::vector<TensorView> layer_views_;       // per model layer (empty when not paged)
  std::vector<int32_t> refs_;                 // per block: references (0 = free)
  std::vector<int32_t> free_;                 // stack of free block ids
  std::vector<std::vector<int32_t>> tables_;  // per slot: block ids in position order
};

// Bytes per token of a model's paged KV (0 for a purely recurrent model).
int64_t KvBytesPerToken(absl::Span<const LayerStateSpecs> specs);

}  // namespace linfer
