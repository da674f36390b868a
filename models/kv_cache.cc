// KvCache: block allocation with reference counts, copy-on-write, step tables and host copies.
#include "models/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/transfer.h"

namespace linfer {
int64_t KvBytesPerToken(absl::Span<const LayerStateSpecs> specs) {
  int64_t n = 0;
  for (const LayerStateSpecs& layer : specs) {
    for (const StateSpec& s : layer) n += s.kind == StateKind::kPaged ? s.bytes() : 0;
  }
  return n;
}

absl::StatusOr<KvCache> KvCache::Allocate(const std::vector<LayerStateSpecs>& specs, int slots,
                                          int64_t budget_bytes, int block_tokens, Device device) {
  KvCache c;
  c.layer_views_.resize(specs.size());
  c.tables_.resize(static_cast<size_t>(slots));
  c.bytes_per_token_ = KvBytesPerToken(specs);
  if (c.bytes_per_token_ == 0) return c;
  if (block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size must be ≥ 1, got ", block_tokens));
  }
  c.block_tokens_ = block_tokens;
  const int64_t blocks =
      budget_bytes == 0 ? slots : budget_bytes / (c.bytes_per_token_ * block_tokens);
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the KV budget (", budget_bytes, " bytes) holds no block of ", block_tokens, " tokens (",
        c.bytes_per_token_ * block_tokens, " bytes): raise --kv_memory_mb"));
  }
  for (size_t l = 0; l < specs.size(); ++l) {
    for (const StateSpec& s : specs[l]) {
      if (s.kind != StateKind::kPaged) continue;
      if ((s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF8E4M3) ||
          s.shape.size() != 3 || s.shape[0] != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", l, " paged spec '", s.name,
                         "' must be f32, bf16 or fp8 [2, kv_heads, head_dim]"));
      }
      ASSIGN_OR_RETURN(
          Tensor t,
          Tensor::Empty(s.dtype, {blocks, block_tokens, 2, s.shape[1], s.shape[2]}, device));
      c.layer_views_[l] = t.view();
      c.layers_.push_back(static_cast<int>(l));
      c.storage_.push_back(std::move(t));
    }
  }
  c.refs_.assign(static_cast<size_t>(blocks), 0);
  for (int64_t b = blocks - 1; b >= 0; --b) c.free_.push_back(static_cast<int32_t>(b));
  return c;
}

int64_t KvCache::BlocksNeeded(int slot, int64_t tokens) const {
  if (empty()) return 0;
  const int64_t need = (tokens + block_tokens_ - 1) / block_tokens_;
  return std::max<int64_t>(0, need - held(slot));
}

absl::StatusOr<int32_t> KvCache::Take() {
  if (free_.empty()) return absl::ResourceExhaustedError("no free KV block");
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void KvCache::Drop(int32_t block) {
  if (--refs_[block] == 0) free_.push_back(block);
}

int64_t KvCache::BlocksToReserve(int slot, int64_t tokens, int64_t write_from) const {
  if (empty()) return 0;
  const std::vector<int32_t>& table = tables_[slot];
  int64_t shared = 0;
  for (int64_t i = write_from / block_tokens_; i < static_cast<int64_t>(table.size()); ++i) {
    shared += refs_[table[i]] > 1;
  }
  return BlocksNeeded(slot, tokens) + shared;
}

absl::Status KvCache::Reserve(const ExecContext& ctx, int slot, int64_t tokens,
                              int64_t write_from) {
  if (empty()) return absl::OkStatus();
  std::vector<int32_t>& table = tables_[slot];
  const int64_t first_written = write_from / block_tokens_;
  const int64_t extra = BlocksNeeded(slot, tokens);
  const int64_t need = BlocksToReserve(slot, tokens, write_from);
  if (need > free_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV cache has ", free_blocks(), " free blocks; ", need, " are needed"));
  }
  for (int64_t i = first_written; i < static_cast<int64_t>(table.size()); ++i) {
    if (refs_[table[i]] <= 1) continue;  // private already
    ASSIGN_OR_RETURN(const int32_t copy, Take());
    for (const Tensor& t : storage_) {
      RETURN_IF_ERROR(CopyTensor(ctx, t.view().Rows(table[i], 1), t.view().Rows(copy, 1)));
    }
    Drop(table[i]);
    table[i] = copy;
  }
  for (int64_t i = 0; i < extra; ++i) {
    ASSIGN_OR_RETURN(const int32_t b, Take());
    table.push_back(b);
  }
  return absl::OkStatus();
}

absl::Status KvCache::Grow(const ExecContext& ctx, int64_t blocks) {
  const int64_t old = num_blocks();
  if (empty() || blocks <= old) return absl::OkStatus();
  for (size_t i = 0; i < storage_.size(); ++i) {
    Shape shape = storage_[i].shape();
    shape[0] = blocks;
    ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(storage_[i].dtype(), shape, storage_[i].device()));
    RETURN_IF_ERROR(CopyTensor(ctx, storage_[i].view(), t.view().Rows(0, old)));
    RETURN_IF_ERROR(Synchronize(ctx));
    storage_[i] = std::move(t);
    layer_views_[layers_[i]] = storage_[i].view();
  }
  refs_.resize(static_cast<size_t>(blocks), 0);
  for (int64_t b = blocks - 1; b >= old; --b) free_.push_back(static_cast<int32_t>(b));
  return absl::OkStatus();
}

void KvCache::Truncate(int slot, int64_t tokens) {
  if (empty()) return;
  std::vector<int32_t>& table = tables_[slot];
  const size_t keep = static_cast<size_t>((tokens + block_tokens_ - 1) / block_tokens_);
  while (table.size() > keep) {
    Drop(table.back());
    table.pop_back();
  }
}

void KvCache::Release(int slot) {
  if (empty()) return;
  for (int32_t b : tables_[slot]) Drop(b);
  tables_[slot].clear();
}

std::vector<int32_t> KvCache::Pin(int slot, int64_t tokens) {
  if (empty()) return {};
  const std::vector<int32_t>& table = tables_[slot];
  const size_t n =
      std::min(table.size(), static_cast<size_t>((tokens + block_tokens_ - 1) / block_tokens_));
  std::vector<int32_t> pinned(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(n));
  for (int32_t b : pinned) ++refs_[b];
  return pinned;
}

void KvCache::Unpin(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) Drop(b);
}

void KvCache::Adopt(int slot, const std::vector<int32_t>& blocks) {
  if (empty()) return;
  Release(slot);
  tables_[slot] = blocks;
  for (int32_t b : blocks) ++refs_[b];
}

void KvCache::Share(int src, int dst) {
  if (empty()) return;
  Release(dst);
  tables_[dst] = tables_[src];
  for (int32_t b : tables_[dst]) ++refs_[b];
}

void KvCache::FillTables(absl::Span<const Segment> segments, int64_t max_blocks,
                         int32_t* host) const {
  std::fill(host, host + segments.size() * max_blocks, -1);
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::vector<int32_t>& table = tables_[segments[i].slot];
    std::copy(table.begin(), table.end(), host + i * max_blocks);
  }
}

absl::StatusOr<BlockTables> KvCache::StepTables(const ExecContext& ctx,
                                                absl::Span<const Segment> segments) const {
  BlockTables t;
  if (empty()) return t;
  t.block_tokens = block_tokens_;
  for (const Segment& s : segments) t.max_blocks = std::max(t.max_blocks, held(s.slot));
  t.max_blocks = std::max<int64_t>(t.max_blocks, 1);
  t.host.resize(segments.size() * t.max_blocks);
  FillTables(segments, t.max_blocks, t.host.data());
  ASSIGN_OR_RETURN(
      t.device, Scratch(ctx, DType::kI32, {static_cast<int64_t>(segments.size()), t.max_blocks}));
  RETURN_IF_ERROR(Upload(ctx, t.host.data(), t.device));
  return t;
}

namespace {

// Bytes of one token's keys and values in layer storage t ([blocks, block_tokens, 2, kv_heads,
// head_dim], f32, bf16 or fp8).
size_t TokenBytes(const Tensor& t) {
  return static_cast<size_t>(NumElements({t.dim(2), t.dim(3), t.dim(4)})) * DTypeSize(t.dtype());
}

// Tokens [0, n) of block `block` of layer storage t as a [n, per_token] view.
TensorView BlockRows(const Tensor& t, int32_t block, int64_t n) {
  const size_t offset = static_cast<size_t>(int64_t{block} * t.dim(1)) * TokenBytes(t);
  return TensorView(static_cast<uint8_t*>(t.view().raw()) + offset, t.dtype(),
                    {n, NumElements({t.dim(2), t.dim(3), t.dim(4)})}, t.device());
}

}  // namespace

absl::Status KvCache::CopyOut(const ExecContext& ctx, int slot, int64_t tokens,
                              HostBytes* out) const {
  if (empty() || tokens == 0) return absl::OkStatus();
  if ((tokens + block_tokens_ - 1) / block_tokens_ > held(slot)) {
    return absl::InternalError(absl::StrCat("slot ", slot, " holds no KV for ", tokens, " tokens"));
  }
  // `out` is sized once, before the first copy: the copies are asynchronous into pinned memory on
  // CUDA, so the buffer must not move (a resize would) while any is in flight. Each layer's keys
  // and values in its storage dtype.
  size_t offset = out->size(), total = offset;
  for (const Tensor& t : storage_) total += static_cast<size_t>(tokens) * TokenBytes(t);
  out->resize(total);
  absl::Status st;
  for (const Tensor& t : storage_) {
    const size_t token_bytes = TokenBytes(t);
    for (int64_t p = 0; p < tokens && st.ok(); p += block_tokens_) {
      const int64_t n = std::min<int64_t>(block_tokens_, tokens - p);
      const int32_t block = tables_[slot][p / block_tokens_];
      st = Download(ctx, BlockRows(t, block, n),
                    out->data() + offset + static_cast<size_t>(p) * token_bytes);
    }
    offset += static_cast<size_t>(tokens) * token_bytes;
  }
  const absl::Status sync = Synchronize(ctx);  // also after a failed copy: none stays in flight
  return st.ok() ? sync : st;
}

absl::Status KvCache::CopyIn(const ExecContext& ctx, int slot, int64_t tokens,
                             const uint8_t* data) {
  if (empty() || tokens == 0) return absl::OkStatus();
  if (BlocksNeeded(slot, tokens) > 0) {
    return absl::InternalError(absl::StrCat("slot ", slot, " holds no KV for ", tokens, " tokens"));
  }
  const uint8_t* src = data;
  for (const Tensor& t : storage_) {
    const size_t token_bytes = TokenBytes(t);
    for (int64_t p = 0; p < tokens; p += block_tokens_) {
      const int64_t n = std::min<int64_t>(block_tokens_, tokens - p);
      const int32_t block = tables_[slot][p / block_tokens_];
      if (absl::Status st =
              Upload(ctx, src + static_cast<size_t>(p) * token_bytes, BlockRows(t, block, n));
          !st.ok()) {
        (void)Synchronize(ctx);  // no copy from `data` may outlive the call
        return st;
      }
    }
    src += static_cast<size_t>(tokens) * token_bytes;
  }
  return Synchronize(ctx);
}

}  // namespace linfer
