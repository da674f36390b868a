// DecodeGraphs: padding to a bucket, staging the inputs, the eager first step and its capture,
// replays.
#include "engine/decode_graphs.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/device_memory.h"
#include "kernels/transfer.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<DecodeGraphs>> DecodeGraphs::Create(const Model* model,
                                                                   DeviceContext* device,
                                                                   const ModelStates* states,
                                                                   int pad_slot, int max_batch) {
  if (device->device() != model->device() || states->device() != model->device()) {
    return absl::InvalidArgumentError("DecodeGraphs: model, context and states on other devices");
  }
  if (max_batch < 1 || pad_slot < 0 || pad_slot >= states->num_slots()) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeGraphs: max_batch ", max_batch,
                                                   " and padding slot ", pad_slot, " of ",
                                                   states->num_slots()));
  }
  if (states->has_kv() && states->kv().held(pad_slot) < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("DecodeGraphs: padding slot ", pad_slot, " holds no KV block"));
  }
  std::unique_ptr<DecodeGraphs> g(new DecodeGraphs(model, device, states, pad_slot, max_batch));
  ASSIGN_OR_RETURN(g->logits_,
                   Tensor::Empty(DType::kF32, {max_batch, model->vocab_size()}, model->device()));
  g->kv_storage_ = g->KvStorage();
  if (g->states_->has_kv()) g->kv_blocks_ = g->states_->kv().num_blocks();
  return g;
}

DecodeGraphs::~DecodeGraphs() {
  (void)device_->Synchronize();  // no replay may still use what goes now
}

DecodeGraphs::Graph::~Graph() {
  if (staging != nullptr) FreePinnedHostMemory(device, staging);
}

const void* DecodeGraphs::KvStorage() const {
  if (!states_->has_kv()) return nullptr;
  for (size_t l = 0; l < states_->specs().size(); ++l) {
    const TensorView& v = states_->kv().layer(static_cast<int>(l));
    if (!v.empty()) return v.raw();
  }
  return nullptr;
}

bool DecodeGraphs::Accepts(absl::Span<const Segment> segments) const {
  if (segments.empty() || static_cast<int64_t>(segments.size()) > max_batch_) return false;
  for (const Segment& s : segments) {
    if (s.num_tokens != 1 || s.slot == pad_slot_) return false;
  }
  return true;
}

absl::StatusOr<DecodeGraphs::Graph*> DecodeGraphs::Find(int batch, int64_t max_blocks) {
  std::unique_ptr<Graph>& slot = graphs_[{batch, max_blocks}];
  if (slot != nullptr) return slot.get();
  auto g = std::make_unique<Graph>();
  g->device = device_->device();
  g->batch = batch;
  g->max_blocks = max_blocks;
  const Device dev = device_->device();
  if (arenas_[batch] == nullptr) arenas_[batch] = std::make_unique<Arena>(dev);
  const int64_t words = int64_t{batch} * (10 + max_blocks);
  ASSIGN_OR_RETURN(g->inputs, Tensor::Empty(DType::kI32, {words}, dev));
  ASSIGN_OR_RETURN(g->staging, AllocatePinnedHostMemory(dev, g->inputs.nbytes()));
  slot = std::move(g);
  return slot.get();
}

void DecodeGraphs::Stage(Graph& g, absl::Span<const int32_t> tokens,
                         absl::Span<const Segment> segments) {
  const int64_t b = g.batch, n = static_cast<int64_t>(segments.size());
  padded_.clear();
  for (int64_t i = 0; i < b; ++i) {
    padded_.push_back(i < n ? Segment{i, 1, segments[i].position, segments[i].slot}
                            : Segment{i, 1, 0, pad_slot_});
  }
  auto* w = static_cast<int32_t*>(g.staging);
  std::memcpy(w, padded_.data(), padded_.size() * sizeof(Segment));  // I64 [B, 4]
  int32_t* tok = w + 8 * b;
  int32_t* last = tok + b;
  for (int64_t i = 0; i < b; ++i) {
    tok[i] = i < n ? tokens[i] : 0;
    last[i] = static_cast<int32_t>(i);
  }
  if (g.max_blocks > 0) states_->kv().FillTables(padded_, g.max_blocks, last + b);
}

StepDeviceInputs DecodeGraphs::DeviceInputs(const Graph& g) const {
  const int64_t b = g.batch;
  int32_t* base = g.inputs.data<int32_t>();
  const auto* host = static_cast<const int32_t*>(g.staging);
  const Device dev = device_->device();
  StepDeviceInputs d;
  d.table = TensorView(base, DType::kI64, {b, 4}, dev);
  d.tokens = TensorView(base + 8 * b, DType::kI32, {b}, dev);
  d.last_rows = TensorView(base + 9 * b, DType::kI32, {b}, dev);
  if (g.max_blocks > 0) {
    d.blocks.host = absl::MakeConstSpan(host + 10 * b, static_cast<size_t>(b * g.max_blocks));
    d.blocks.device = TensorView(base + 10 * b, DType::kI32, {b, g.max_blocks}, dev);
    d.blocks.max_blocks = g.max_blocks;
    d.blocks.block_tokens = states_->kv().block_tokens();
  }
  return d;
}

absl::Status DecodeGraphs::Prepare(absl::Span<const Segment> segments) {
  prepared_ = nullptr;
  if (!Accepts(segments)) {
    return absl::InvalidArgumentError("DecodeGraphs: not a decode-only step it takes");
  }
  const int n = static_cast<int>(segments.size());
  int batch = 1;
  while (batch < n) batch *= 2;
  batch = std::min(batch, max_batch_);
  int64_t max_blocks = 0;
  if (states_->has_kv()) {
    // The storage moved (every graph points at the old one): a grown cache (KvCache::Grow
    // reallocates every layer) has more blocks, even where its first layer's new storage begins
    // where the old one did.
    if (KvStorage() != kv_storage_ || states_->kv().num_blocks() != kv_blocks_) {
      RETURN_IF_ERROR(device_->Synchronize());
      graphs_.clear();
      kv_storage_ = KvStorage();
      kv_blocks_ = states_->kv().num_blocks();
    }
    int64_t need = std::max<int64_t>(1, states_->kv().held(pad_slot_));
    for (const Segment& s : segments) {
      need = std::max(need, states_->kv().held(static_cast<int>(s.slot)));
    }
    max_blocks = 1;
    while (max_blocks < need) max_blocks *= 2;
  }
  ASSIGN_OR_RETURN(prepared_, Find(batch, max_blocks));
  prepared_n_ = n;
  return absl::OkStatus();
}

absl::StatusOr<TensorView> DecodeGraphs::Run(absl::Span<const int32_t> tokens,
                                             absl::Span<const Segment> segments,
                                             const ForwardOptions& options) {
  Graph* g = std::exchange(prepared_, nullptr);
  const int n = static_cast<int>(segments.size());
  if (g == nullptr || n != prepared_n_ || tokens.size() != segments.size() || options.all_logits) {
    return absl::InvalidArgumentError("DecodeGraphs::Run: Prepare this step first");
  }
  const int batch = g->batch;
  const int64_t max_blocks = g->max_blocks;
  Stage(*g, tokens, segments);
  const ExecContext& exec = device_->exec();
  RETURN_IF_ERROR(Upload(exec, g->staging, g->inputs.view()));
  const TensorView logits = logits_.view().Rows(0, batch);
  if (!g->graph.empty()) {
    RETURN_IF_ERROR(g->graph.Replay());
    ++replays_;
    return logits.Rows(0, n);
  }
  const StepDeviceInputs d = DeviceInputs(*g);
  const StepInput in{absl::MakeConstSpan(static_cast<const int32_t*>(g->staging) + 8 * batch,
                                         static_cast<size_t>(batch)),
                     padded_, &d};
  Arena& arena = *arenas_.at(batch);
  ExecContext ctx = exec;
  ctx.arena = &arena;
  // Every graph of this batch points into the arena's one block: should resetting it (its offset
  // back to 0) coalesce several blocks, or the eager step below grow it, those graphs go.
  auto drop_others = [&] {
    std::erase_if(graphs_,
                  [&](const auto& e) { return e.first.first == batch && e.second.get() != g; });
  };
  int64_t capacity = arena.capacity_bytes();
  arena.Reset();
  if (arena.capacity_bytes() != capacity) drop_others();
  capacity = arena.capacity_bytes();
  // The real step, eagerly; it also sizes the arena.
  RETURN_IF_ERROR(model_->Forward(ctx, in, *states_, logits, options));
  if (device_->device() != Device::kCuda) {  // the CPU pads and runs eagerly (tests)
    arena.Reset();
    return logits.Rows(0, n);
  }
  if (!capture_error_.ok()) return logits.Rows(0, n);  // graphs are going off
  // Then the same forward recorded: its scratch from one arena block that will not move, its
  // inputs from the buffers staged above.
  RETURN_IF_ERROR(device_->Synchronize());
  if (arena.capacity_bytes() != capacity) drop_others();
  arena.Reset();
  absl::Status st = device_->BeginCapture();
  if (st.ok()) {
    const absl::Status forward = model_->Forward(ctx, in, *states_, logits, options);
    absl::StatusOr<DeviceGraph> graph = device_->EndCapture();
    st = !forward.ok() ? forward : graph.status();
    if (st.ok()) {
      g->graph = *std::move(graph);
      ++captures_;
    }
  }
  if (!st.ok()) {
    capture_error_ = absl::Status(
        st.code(), absl::StrCat("capturing the decode step of batch ", batch, " (", n,
                                " sequences, KV block width ", max_blocks, "): ", st.message()));
  }
  return logits.Rows(0, n);
}

}  // namespace linfer
