// Moves of bytes between host and device and within a device, on the context's stream. Upload
// and Download are the only host↔device doors for step data; they count what crosses in
// ctx.transfers (also on the CPU, where they are plain copies), which is how tests prove that
// states stay on the device.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
// Every dsts[i] ← srcs[i], as CopyTensor each (same dtype and shape, row strides allowed; a pair
// is the same view or does not overlap, nor overlaps another pair's dst): on CUDA the contiguous
// pairs by one kernel launch per kMaxZeroRanges (a slot-to-slot copy of a model's states — its
// rows in every layer's state tensors — was one driver copy per tensor).
absl::Status CopyTensors(const ExecContext& ctx, absl::Span<const TensorView> srcs,
                         absl::Span<const TensorView> dsts);
// dst ← 0 (row strides allowed).
absl::Status ZeroTensor(const ExecContext& ctx, const TensorView& dst);
// Every dst ← 0, as ZeroTensor each: on CUDA, the contiguous ones by one kernel launch per
// kMaxZeroRanges (a slot's states across all layers — about a hundred tensors — were a hundred
// driver memsets, ≈ 0.3 ms of host time per admitted sequence).
inline constexpr int kMaxZeroRanges = 128;
absl::Status ZeroTensors(const ExecContext& ctx, absl::Span<const TensorView> dsts);
// Waits until everything queued on ctx.stream has finished (CPU: no-op).
absl::Status Synchronize(const ExecContext& ctx);

// A device-to-host copy that may still be in flight. Wait() returns once its bytes have landed,
// with the copy's error if it failed (the same status every time); the destructor waits too, so
// that the destination is never freed under the copy.
class PendingCopy {
 public:
  virtual ~PendingCopy() = default;
  virtual absl::Status Wait() = 0;
};

// What DownloadGathered copies through on a GPU: `buffers` device staging buffers of
// `buffer_bytes`, allocated up front (none later: no device memory is taken mid-serving) and reused
// once their copy has landed, and a copy stream of its own. Shared by its copies in flight, which
// keep it alive.
class DownloadStager {
 public:
  virtual ~DownloadStager() = default;
};
// A stager for `device`: null on the CPU, and on CUDA unless LINFER_CUDA_ASYNC_SNAPSHOTS=1 (opt-in
// until a GPU run has passed and timed it).
absl::StatusOr<std::shared_ptr<DownloadStager>> MakeDownloadStager(Device device,
                                                                   size_t buffer_bytes,
                                                                   int buffers);

// `host` ← the views `srcs` (contiguous, on ctx.device) back to back (Σ nbytes), so that the copy
// over PCIe overlaps the work queued on ctx.stream after it: with a stager, CUDA gathers the views
// into a staging buffer on ctx.stream (one kernel, in stream order with the work before it), then
// copies the buffer to `host` on the stager's stream, and returns the copy in flight — `host` must
// stay valid, and unread, until its Wait(). Null when the bytes are already in `host`: the CPU, no
// stager, or no buffer of it free and large enough (then it copies on ctx.stream and
// synchronizes).
absl::StatusOr<std::shared_ptr<PendingCopy>> DownloadGathered(
    const ExecContext& ctx, absl::Span<const TensorView> srcs, void* host,
    const std::shared_ptr<DownloadStager>& stager);

}  // namespace linfer
