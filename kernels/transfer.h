// Moves of bytes between host and device and within a device, on the context's stream. Upload
// and Download are the only host↔device doors for step data; they count what crosses in
// ctx.transfers (also on the CPU, where they are plain copies), which is how tests prove that
// states stay on the device.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/context.h"

namespace linfer {

// dst (contiguous, on ctx.device) ← dst.nbytes() bytes at `host`. Asynchronous on CUDA: `host`
// must stay valid (pinned for overlap) until the stream is synchronized.
absl::Status Upload(const ExecContext& ctx, const void* host, const TensorView& dst);
// dst.nbytes() bytes at `host` ← src (contiguous, on ctx.device). Asynchronous on CUDA.
absl::Status Download(const ExecContext& ctx, const TensorView& src, void* host);
// dst ← src, both on ctx.device, same dtype and shape (row strides allowed). src and dst are the
// same view (a no-op) or do not overlap.
absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst);
// dst ← 0 (row strides allowed).
absl::Status ZeroTensor(const ExecContext& ctx, const TensorView& dst);
// Every dst ← 0, as ZeroTensor each: on CUDA, the contiguous ones by one kernel launch per
// kMaxZeroRanges (a slot's states across all layers — about a hundred tensors — were a hundred
// driver memsets, ≈ 0.3 ms of host time per admitted sequence).
inline constexpr int kMaxZeroRanges = 128;
absl::Status ZeroTensors(const ExecContext& ctx, absl::Span<const TensorView> dsts);
// Waits until everything queued on ctx.stream has finished (CPU: no-op).
absl::Status Synchronize(const ExecContext& ctx);

}  // namespace linfer
