// DeviceContext: per-device resources (kernels/cuda/resources.h on CUDA) and graph capture.
#include "kernels/device_context.h"

#include <utility>

#include "common/status_macros.h"
#include "kernels/device_memory.h"
#include "kernels/transfer.h"

namespace linfer {

DeviceContext::DeviceContext(Device device) : arena_(device) {
  exec_.device = device;
  exec_.arena = &arena_;
  exec_.transfers = &transfers_;
}

absl::StatusOr<std::unique_ptr<DeviceContext>> DeviceContext::Create(
    const DeviceContextOptions& options) {
  std::unique_ptr<DeviceContext> ctx(new DeviceContext(options.device));
  ctx->exec_.batch_invariant = options.batch_invariant;
  switch (options.device) {
    case Device::kCpu:
      return ctx;
    case Device::kCuda: {
      if (!CudaAvailable()) {
        return absl::UnavailableError("no CUDA device (or this build has no CUDA backend)");
      }
      ctx->ordinal_ = options.ordinal;
      RETURN_IF_ERROR(cuda::SetDevice(options.ordinal));
      ASSIGN_OR_RETURN(ctx->stream_, cuda::CreateStream());
      ctx->exec_.stream = ctx->stream_;
      RETURN_IF_ERROR(cuda::CreateBlas(options.blas_workspace_bytes, &ctx->blas_));
      ctx->exec_.blas = &ctx->blas_;
      return ctx;
    }
  }
  return absl::InternalError("unknown device");
}

DeviceContext::~DeviceContext() {
  if (exec_.device != Device::kCuda) return;
  if (capturing_) (void)EndCapture();  // a capture left open: close it before the stream goes
  if (stream_ != nullptr) (void)Synchronize();  // nothing queued may outlive the resources
  cuda::DestroyBlas(&blas_);
  cuda::DestroyStream(stream_);
}

absl::Status DeviceContext::Synchronize() {
  if (exec_.device == Device::kCpu) return absl::OkStatus();
  return linfer::Synchronize(exec_);
}

absl::Status DeviceContext::MakeCurrent() const {
  if (exec_.device != Device::kCuda) return absl::OkStatus();
  return cuda::SetDevice(ordinal_);
}

absl::Status DeviceContext::BeginCapture() {
  if (exec_.device != Device::kCuda) {
    return absl::UnimplementedError("graph capture needs a CUDA device context");
  }
  if (capturing_) return absl::FailedPreconditionError("a graph capture is already open");
  RETURN_IF_ERROR(cuda::BeginCapture(stream_));
  capturing_ = true;
  return absl::OkStatus();
}

absl::StatusOr<DeviceGraph> DeviceContext::EndCapture() {
  if (!capturing_) return absl::FailedPreconditionError("no graph capture is open");
  capturing_ = false;
  ASSIGN_OR_RETURN(void* exec, cuda::EndCapture(stream_));
  return DeviceGraph(exec, stream_);
}

DeviceGraph::DeviceGraph(DeviceGraph&& other) noexcept
    : exec_(std::exchange(other.exec_, nullptr)), stream_(std::exchange(other.stream_, nullptr)) {}

DeviceGraph& DeviceGraph::operator=(DeviceGraph&& other) noexcept {
  if (this != &other) {
    cuda::DestroyGraph(exec_);
    exec_ = std::exchange(other.exec_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

DeviceGraph::~DeviceGraph() { cuda::DestroyGraph(exec_); }

absl::Status DeviceGraph::Replay() const {
  if (exec_ == nullptr) return absl::FailedPreconditionError("replay of an empty graph");
  return cuda::LaunchGraph(exec_, stream_);
}

}  // namespace linfer
