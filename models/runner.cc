// SequenceRunner: a 1-slot ModelStates and a Forward per Feed.
#include "models/runner.h"

#include "common/status_macros.h"
#include "kernels/transfer.h"

namespace linfer {

absl::Status SequenceRunner::Init() {
  ASSIGN_OR_RETURN(states_, ModelStates::Allocate(model_->state_specs(), 1, model_->device()));
  position_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> SequenceRunner::Feed(absl::Span<const int32_t> tokens,
                                            const ForwardOptions& options) {
  if (states_.num_slots() == 0) RETURN_IF_ERROR(Init());
  RETURN_IF_ERROR(ValidateTokenIds(tokens, model_->vocab_size(), "tokens"));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t rows = options.all_logits ? n : 1;
  ExecContext ctx;
  ctx.device = model_->device();
  ctx.arena = &arena_;
  ctx.batch_invariant = batch_invariant_;
  ASSIGN_OR_RETURN(Tensor logits,
                   Tensor::Empty(DType::kF32, {rows, model_->vocab_size()}, model_->device()));
  RETURN_IF_ERROR(states_.ReserveKv(ctx, 0, position_ + n, position_));
  const Segment seg{0, n, position_, 0};
  absl::Status st = model_->Forward(ctx, {tokens, {&seg, 1}}, states_, logits.view(), options);
  Tensor host;
  if (st.ok() && model_->device() != Device::kCpu) {
    absl::StatusOr<Tensor> h = Tensor::Empty(DType::kF32, logits.shape());
    st = h.status();
    if (st.ok()) host = *std::move(h);
    if (st.ok()) st = Download(ctx, logits.view(), host.data<void>());
  }
  // The arena's blocks may go when it resets (coalescing): only once nothing queued uses them.
  const absl::Status sync = Synchronize(ctx);
  arena_.Reset();
  RETURN_IF_ERROR(st);
  RETURN_IF_ERROR(sync);
  position_ += n;
  return model_->device() == Device::kCpu ? std::move(logits) : std::move(host);
}

}  // namespace linfer
