// ModelStates: allocation and the four slot doors.
#include "models/state.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/transfer.h"

namespace linfer {
namespace {

bool InSlot(const StateSpec& s) { return s.kind != StateKind::kPaged; }

}  // namespace

int64_t SlotStateBytes(absl::Span<const LayerStateSpecs> specs) {
  int64_t n = 0;
  for (const LayerStateSpecs& layer : specs) {
    for (const StateSpec& s : layer) n += InSlot(s) ? s.bytes() : 0;
  }
  return n;
}

absl::StatusOr<ModelStates> ModelStates::Allocate(std::vector<LayerStateSpecs> specs, int slots,
                                                  Device device, bool zero, const KvOptions& kv) {
  if (slots < 1)
    return absl::InvalidArgumentError(absl::StrCat("state slots must be ≥ 1, got ", slots));
  ModelStates m;
  m.slots_ = slots;
  m.device_ = device;
  m.slot_bytes_ = SlotStateBytes(specs);
  ASSIGN_OR_RETURN(KvCache cache,
                   KvCache::Allocate(specs, slots, kv.budget_bytes, kv.block_tokens, device));
  m.kv_ = std::make_unique<KvCache>(std::move(cache));
  m.kv_grows_ = kv.budget_bytes == 0;
  for (const LayerStateSpecs& layer : specs) {
    std::vector<Tensor> tensors;
    std::vector<TensorView> views;
    std::vector<int> index;
    for (const StateSpec& s : layer) {
      if (!InSlot(s)) {
        views.emplace_back();  // the KV cache's storage (RefreshKvViews)
        continue;
      }
      Shape shape = {slots};
      shape.insert(shape.end(), s.shape.begin(), s.shape.end());
      ASSIGN_OR_RETURN(Tensor t, zero ? Tensor::Zeros(s.dtype, shape, device)
                                      : Tensor::Empty(s.dtype, shape, device));
      index.push_back(static_cast<int>(views.size()));
      views.push_back(t.view());
      tensors.push_back(std::move(t));
    }
    m.tensors_.push_back(std::move(tensors));
    m.views_.push_back(std::move(views));
    m.slot_index_.push_back(std::move(index));
  }
  m.specs_ = std::move(specs);
  m.RefreshKvViews();
  // Snapshots in flight at once: up to 4, within 256 MB of staging (one slot's worth where a slot
  // is larger; more in one step: at once). Staging is an optimisation: without its memory the
  // snapshots are copied at once, as without the switch.
  const int64_t staged =
      std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(m.slot_bytes_, 1), 1, 4);
  absl::StatusOr<std::shared_ptr<DownloadStager>> stager =
      MakeDownloadStager(device, static_cast<size_t>(m.slot_bytes_), static_cast<int>(staged));
  if (stager.ok()) {
    m.stager_ = *std::move(stager);
  } else {
    Log(LogLevel::kWarning, absl::StrCat("asynchronous snapshots off (no staging memory): ",
                                         stager.status().ToString()));
  }
  return m;
}

void ModelStates::RefreshKvViews() {
  for (size_t l = 0; l < specs_.size(); ++l) {
    for (size_t i = 0; i < specs_[l].size(); ++i) {
      if (!InSlot(specs_[l][i])) views_[l][i] = kv_->layer(static_cast<int>(l));
    }
  }
}

absl::Status ModelStates::ReserveKv(const ExecContext& ctx, int slot, int64_t tokens,
                                    int64_t write_from) {
  if (!has_kv()) return absl::OkStatus();
  absl::Status s = kv_->Reserve(ctx, slot, tokens, write_from);
  if (s.ok() || !kv_grows_ || !absl::IsResourceExhausted(s)) return s;
  const int64_t need = kv_->BlocksNeeded(slot, tokens) + kv_->held(slot) + 1;
  RETURN_IF_ERROR(kv_->Grow(ctx, std::max(2 * kv_->num_blocks(), kv_->used_blocks() + need)));
  RefreshKvViews();
  return kv_->Reserve(ctx, slot, tokens, write_from);
}

std::vector<TensorView> ModelStates::SlotRows(int slot) const {
  std::vector<TensorView> rows;
  for (size_t l = 0; l < views_.size(); ++l) {
    for (int i : slot_index_[l]) rows.push_back(views_[l][i].Rows(slot, 1));
  }
  return rows;
}

absl::Status ModelStates::CopyOut(const ExecContext& ctx, int slot, int64_t kv_tokens,
                                  HostState* out) const {
  out->bytes.resize(static_cast<size_t>(slot_bytes_));
  size_t offset = 0;
  for (const TensorView& row : SlotRows(slot)) {
    if (absl::Status st = Download(ctx, row, out->bytes.data() + offset); !st.ok()) {
      (void)Synchronize(ctx);  // no copy into `out` may outlive the call
      return st;
    }
    offset += row.nbytes();
  }
  out->kv_bytes.clear();
  out->kv_tokens = 0;
  out->kv_in_place = kv_tokens < 0 && has_kv();
  if (has_kv() && kv_tokens >= 0) {
    if (absl::Status st = kv_->CopyOut(ctx, slot, kv_tokens, &out->kv_bytes); !st.ok()) {
      (void)Synchronize(ctx);  // the rows' copies above are in flight into `out`
      return st;
    }
    out->kv_tokens = kv_tokens;
  }
  return Synchronize(ctx);
}

absl::Status ModelStates::Snapshot(const ExecContext& ctx, int slot, int64_t kv_tokens,
                                   HostState* out) {
  if (stager_ == nullptr || kv_tokens < 0) {
    if (!has_kv() || kv_tokens < 0) return CopyOut(ctx, slot, kv_tokens, out);
    RETURN_IF_ERROR(CopyOut(ctx, slot, 0, out));
  } else {  // the slot's rows gathered and copied out behind the stream's later work
    out->bytes.resize(static_cast<size_t>(slot_bytes_));
    out->kv_bytes.clear();
    out->kv_tokens = 0;
    out->kv_in_place = false;
    out->kv_pin.reset();
    ASSIGN_OR_RETURN(out->pending,
                     DownloadGathered(ctx, SlotRows(slot), out->bytes.data(), stager_));
    if (!has_kv()) return absl::OkStatus();
  }
  if (kv_->BlocksNeeded(slot, kv_tokens) > 0) {
    return absl::InternalError(
        absl::StrCat("slot ", slot, " does not hold the KV of ", kv_tokens, " tokens"));
  }
  out->kv_tokens = kv_tokens;
  out->kv_pin = std::make_shared<const KvPin>(kv_.get(), kv_->Pin(slot, kv_tokens), kv_tokens);
  return absl::OkStatus();
}

absl::Status ModelStates::CopyIn(const ExecContext& ctx, const HostState& in, int slot) {
  RETURN_IF_ERROR(in.Settle());  // a snapshot still on its way to the host
  const int64_t kv_bytes =
      has_kv() && in.kv_pin == nullptr ? in.kv_tokens * kv_->bytes_per_token() : 0;
  if (in.kv_pin != nullptr && (!has_kv() || in.kv_pin->tokens() != in.kv_tokens || in.kv_in_place ||
                               !in.kv_bytes.empty())) {
    return absl::InternalError("a KV pin in a host state that does not match this model's cache");
  }
  if (in.kv_in_place) {
    if (!in.kv_bytes.empty() || (has_kv() && kv_->BlocksNeeded(slot, in.position) > 0)) {
      return absl::InternalError(absl::StrCat("slot ", slot, " does not hold the KV of the ",
                                              in.position, " tokens its checkpoint needs"));
    }
  } else if (static_cast<int64_t>(in.bytes.size()) != slot_bytes_ ||
             static_cast<int64_t>(in.kv_bytes.size()) != kv_bytes || in.kv_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a host state of ", in.bytes.size(), " + ", in.kv_bytes.size(), " KV bytes (",
                     in.kv_tokens, " tokens) does not fit a slot of ", slot_bytes_, " bytes and ",
                     has_kv() ? kv_->bytes_per_token() : 0, " KV bytes per token"));
  }
  if (static_cast<int64_t>(in.bytes.size()) != slot_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("a host state of ", in.bytes.size(),
                                                   " bytes does not fit a slot of ", slot_bytes_));
  }
  if (has_kv() && in.kv_in_place) {
    kv_->Truncate(slot, in.position);
  } else if (has_kv() && in.kv_pin != nullptr) {
    kv_->Adopt(slot, in.kv_pin->blocks());
  } else if (has_kv()) {
    kv_->Release(slot);
    RETURN_IF_ERROR(ReserveKv(ctx, slot, in.kv_tokens, 0));
    RETURN_IF_ERROR(kv_->CopyIn(ctx, slot, in.kv_tokens, in.kv_bytes.data()));
  }
  size_t offset = 0;
  for (const TensorView& row : SlotRows(slot)) {
    if (absl::Status st = Upload(ctx, in.bytes.data() + offset, row); !st.ok()) {
      (void)Synchronize(ctx);  // no copy from `in` may outlive the call
      return st;
    }
    offset += row.nbytes();
  }
  return Synchronize(ctx);
}

HostState& HostState::operator=(HostState&& o) noexcept {
  if (this == &o) return *this;
  (void)Settle();  // this state's old buffer is freed here
  bytes = std::move(o.bytes);
  position = o.position;
  kv_bytes = std::move(o.kv_bytes);
  kv_tokens = o.kv_tokens;
  kv_in_place = o.kv_in_place;
  kv_pin = std::move(o.kv_pin);
  pending = std::move(o.pending);
  return *this;
}

HostState& HostState::operator=(const HostState& o) {
  if (this == &o) return *this;
  (void)Settle();    // this state's old buffer is freed here
  (void)o.Settle();  // its bytes are read here (a failed copy's status stays with `pending`)
  bytes = o.bytes;
  position = o.position;
  kv_bytes = o.kv_bytes;
  kv_tokens = o.kv_tokens;
  kv_in_place = o.kv_in_place;
  kv_pin = o.kv_pin;
  pending = o.pending;
  return *this;
}

absl::Status ModelStates::Copy(const ExecContext& ctx, int src, int dst) {
  if (src != dst) RETURN_IF_ERROR(CopyTensors(ctx, SlotRows(src), SlotRows(dst)));  // one launch
  if (has_kv()) kv_->Share(src, dst);
  return absl::OkStatus();
}

absl::Status ModelStates::CopyState(const ExecContext& ctx, int src, int dst) {
  if (src == dst) return absl::OkStatus();
  return CopyTensors(ctx, SlotRows(src), SlotRows(dst));
}

absl::Status ModelStates::Zero(const ExecContext& ctx, int slot) {
  ReleaseKv(slot);
  return ZeroTensors(ctx, SlotRows(slot));  // every layer's rows of the slot: one launch on CUDA
}

void ModelStates::TruncateHostKv(HostState* state, int64_t tokens) const {
  if (!has_kv() || state->kv_in_place || tokens >= state->kv_tokens) return;
  HostBytes cut;
  cut.reserve(static_cast<size_t>(tokens * kv_->bytes_per_token()));
  size_t offset = 0;
  for (const LayerStateSpecs& layer : specs_) {
    for (const StateSpec& s : layer) {
      if (InSlot(s)) continue;
      const auto begin = state->kv_bytes.begin() + static_cast<std::ptrdiff_t>(offset);
      cut.insert(cut.end(), begin, begin + static_cast<std::ptrdiff_t>(tokens * s.bytes()));
      offset += static_cast<size_t>(state->kv_tokens * s.bytes());
    }
  }
  state->kv_bytes = std::move(cut);
  state->kv_tokens = tokens;
}

void ModelStates::ReleaseKv(int slot) {
  if (has_kv()) kv_->Release(slot);
}

}  // namespace linfer
