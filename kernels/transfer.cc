// Upload / Download / CopyTensor / ZeroTensor / Synchronize: checks, accounting and dispatch.
#include "kernels/transfer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {

absl::Status Upload(const ExecContext& ctx, const void* host, const TensorView& dst) {
  RETURN_IF_ERROR(CheckView(ctx, "Upload", "dst", dst, dst.dtype(), -1));
  RETURN_IF_ERROR(CheckContiguous("Upload", "dst", dst));
  if (ctx.transfers != nullptr) {
    ctx.transfers->h2d_bytes += static_cast<int64_t>(dst.nbytes());
    ++ctx.transfers->h2d_calls;
  }
  if (dst.nbytes() == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Upload(ctx, host, dst);
    case Device::kCuda:
      return cuda::Upload(ctx, host, dst);
  }
  return absl::InternalError("unknown device");
}

absl::Status Download(const ExecContext& ctx, const TensorView& src, void* host) {
  RETURN_IF_ERROR(CheckView(ctx, "Download", "src", src, src.dtype(), -1));
  RETURN_IF_ERROR(CheckContiguous("Download", "src", src));
  if (ctx.transfers != nullptr) {
    ctx.transfers->d2h_bytes += static_cast<int64_t>(src.nbytes());
    ++ctx.transfers->d2h_calls;
  }
  if (src.nbytes() == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Download(ctx, src, host);
    case Device::kCuda:
      return cuda::Download(ctx, src, host);
  }
  return absl::InternalError("unknown device");
}

namespace {

// A copy from src to dst is a no-op: the same view.
bool SameView(const TensorView& a, const TensorView& b) {
  return a.raw() == b.raw() && a.row_stride() == b.row_stride();
}

}  // namespace

absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst) {
  RETURN_IF_ERROR(CheckView(ctx, "CopyTensor", "src", src, src.dtype(), -1));
  RETURN_IF_ERROR(CheckView(ctx, "CopyTensor", "dst", dst, src.dtype(), src.rank()));
  RETURN_IF_ERROR(CheckSameShape("CopyTensor", "src", src, "dst", dst));
  // A copy onto itself is a no-op; one onto part of itself is refused (cudaMemcpy's result is
  // undefined for overlapping ranges, so the devices would disagree).
  if (src.numel() == 0 || SameView(src, dst)) {
    return absl::OkStatus();
  }
  if (Overlap(src, dst)) {
    return absl::InvalidArgumentError(absl::StrCat("CopyTensor: src ", src.DebugString(),
                                                   " and dst ", dst.DebugString(), " overlap"));
  }
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::CopyTensor(ctx, src, dst);
    case Device::kCuda:
      return cuda::CopyTensor(ctx, src, dst);
  }
  return absl::InternalError("unknown device");
}

absl::Status CopyTensors(const ExecContext& ctx, absl::Span<const TensorView> srcs,
                         absl::Span<const TensorView> dsts) {
  if (srcs.size() != dsts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyTensors: ", srcs.size(), " sources for ", dsts.size(), " destinations"));
  }
  for (size_t i = 0; i < srcs.size(); ++i) {
    const std::string src = absl::StrCat("src ", i), dst = absl::StrCat("dst ", i);
    RETURN_IF_ERROR(CheckView(ctx, "CopyTensors", src, srcs[i], srcs[i].dtype(), -1));
    RETURN_IF_ERROR(CheckView(ctx, "CopyTensors", dst, dsts[i], srcs[i].dtype(), srcs[i].rank()));
    RETURN_IF_ERROR(CheckSameShape("CopyTensors", src, srcs[i], dst, dsts[i]));
  }
  // A pair is the same view (a no-op) or apart; no destination meets another pair's source or
  // destination (CUDA copies the pairs at once, in no order).
  for (size_t i = 0; i < srcs.size(); ++i) {
    if (srcs[i].numel() == 0 || SameView(srcs[i], dsts[i])) continue;
    if (Overlap(srcs[i], dsts[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("CopyTensors: src ", i, " and dst ", i, " overlap"));
    }
    for (size_t j = 0; j < srcs.size(); ++j) {
      if (j == i || srcs[j].numel() == 0 || SameView(srcs[j], dsts[j])) continue;
      if (Overlap(dsts[i], srcs[j]) || Overlap(dsts[i], dsts[j])) {
        return absl::InvalidArgumentError(
            absl::StrCat("CopyTensors: dst ", i, " overlaps pair ", j));
      }
    }
  }
  switch (ctx.device) {
    case Device::kCpu:
      for (size_t i = 0; i < srcs.size(); ++i) RETURN_IF_ERROR(CopyTensor(ctx, srcs[i], dsts[i]));
      return absl::OkStatus();
    case Device::kCuda:
      return cuda::CopyTensors(ctx, srcs, dsts);
  }
  return absl::InternalError("unknown device");
}

absl::Status ZeroTensor(const ExecContext& ctx, const TensorView& dst) {
  RETURN_IF_ERROR(CheckView(ctx, "ZeroTensor", "dst", dst, dst.dtype(), -1));
  if (dst.numel() == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::ZeroTensor(ctx, dst);
    case Device::kCuda:
      return cuda::ZeroTensor(ctx, dst);
  }
  return absl::InternalError("unknown device");
}

absl::Status ZeroTensors(const ExecContext& ctx, absl::Span<const TensorView> dsts) {
  for (size_t i = 0; i < dsts.size(); ++i) {
    RETURN_IF_ERROR(
        CheckView(ctx, "ZeroTensors", absl::StrCat("dst ", i), dsts[i], dsts[i].dtype(), -1));
  }
  switch (ctx.device) {
    case Device::kCpu:
      for (const TensorView& dst : dsts) {
        if (dst.numel() > 0) RETURN_IF_ERROR(cpu::ZeroTensor(ctx, dst));
      }
      return absl::OkStatus();
    case Device::kCuda:
      return cuda::ZeroTensors(ctx, dsts);
  }
  return absl::InternalError("unknown device");
}

absl::StatusOr<std::shared_ptr<DownloadStager>> MakeDownloadStager(Device device,
                                                                   size_t buffer_bytes,
                                                                   int buffers) {
  switch (device) {
    case Device::kCpu:
      return nullptr;
    case Device::kCuda:
      if (buffer_bytes == 0 || buffers < 1) return nullptr;
      return cuda::MakeDownloadStager(buffer_bytes, buffers);
  }
  return absl::InternalError("unknown device");
}

absl::StatusOr<std::shared_ptr<PendingCopy>> DownloadGathered(
    const ExecContext& ctx, absl::Span<const TensorView> srcs, void* host,
    const std::shared_ptr<DownloadStager>& stager) {
  int64_t total = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    const std::string name = absl::StrCat("src ", i);
    RETURN_IF_ERROR(CheckView(ctx, "DownloadGathered", name, srcs[i], srcs[i].dtype(), -1));
    RETURN_IF_ERROR(CheckContiguous("DownloadGathered", name, srcs[i]));
    total += static_cast<int64_t>(srcs[i].nbytes());
  }
  if (ctx.transfers != nullptr) {
    ctx.transfers->d2h_bytes += total;
    ++ctx.transfers->d2h_calls;
  }
  if (total == 0) return nullptr;
  if (ctx.device == Device::kCuda && stager != nullptr) {
    ASSIGN_OR_RETURN(std::shared_ptr<PendingCopy> pending,
                     cuda::DownloadGathered(ctx, srcs, host, stager));
    if (pending != nullptr) return pending;
  }
  // At once (the CPU, no stager, or none of its buffers free): the views one after another, then
  // the stream is drained.
  auto* out = static_cast<unsigned char*>(host);
  for (const TensorView& src : srcs) {
    if (src.nbytes() == 0) continue;
    RETURN_IF_ERROR(ctx.device == Device::kCuda ? cuda::Download(ctx, src, out)
                                                : cpu::Download(ctx, src, out));
    out += src.nbytes();
  }
  RETURN_IF_ERROR(Synchronize(ctx));
  return nullptr;
}

absl::Status Synchronize(const ExecContext& ctx) {
  switch (ctx.device) {
    case Device::kCpu:
      return absl::OkStatus();
    case Device::kCuda:
      return cuda::Synchronize(ctx);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
