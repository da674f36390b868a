// The resources one device needs to run ops, owned in one RAII object that hands out the
// ExecContext every op takes: on CUDA a non-blocking stream, a cuBLASLt handle with its workspace,
// a per-step scratch Arena and transfer counters, plus CUDA graph capture and replay on that
// stream; on the CPU only the arena and counters. Host code uses it without CUDA headers.
//
// Threading: one DeviceContext per engine thread (the thread that owns the device's stream).
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/context.h"
#include "kernels/cuda/resources.h"

namespace linfer {

struct DeviceContextOptions {
  Device device = Device::kCpu;
  int ordinal = 0;                                 // CUDA device index (made current in Create)
  size_t blas_workspace_bytes = size_t{32} << 20;  // cuBLASLt workspace (CUDA)
  bool batch_invariant = false;                    // ExecContext::batch_invariant
};

class DeviceGraph;

class DeviceContext {
 public:
  // Unavailable when the build or the machine lacks the device.
  static absl::StatusOr<std::unique_ptr<DeviceContext>> Create(const DeviceContextOptions& options);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Device device() const { return exec_.device; }
  // The context every op takes: device, stream, arena(), BLAS resources, transfers().
  const ExecContext& exec() const { return exec_; }
  Arena& arena() { return arena_; }
  TransferStats& transfers() { return transfers_; }
  // Waits for everything queued on the stream (CPU: nothing to wait for).
  absl::Status Synchronize();
  // Makes this context's device the calling thread's current one (CUDA keeps the current device
  // per thread: a thread other than the creating one calls this before using the context).
  absl::Status MakeCurrent() const;

  // CUDA graphs (CUDA only; Unimplemented on the CPU). Everything queued on exec().stream between
  // BeginCapture and EndCapture is recorded, not run; DeviceGraph::Replay runs it again with the
  // pointers and sizes it was captured with, so a replayed step must find its inputs (tokens,
  // segment table) uploaded into the same device buffers, and the arena must hand out the same
  // addresses: run the step once eagerly with the same shapes, Reset() the arena, then capture
  // (the arena then allocates nothing during capture). Ops take host-side decisions (grid sizes,
  // which kernel) from the host segment table, so a graph is valid only for steps with the same
  // number of segments and tokens per segment as the captured one (decode: one token each).
  absl::Status BeginCapture();
  absl::StatusOr<DeviceGraph> EndCapture();

 private:
  explicit DeviceContext(Device device);

  int ordinal_ = 0;
  Arena arena_;
  TransferStats transfers_;
  ExecContext exec_;
  void* stream_ = nullptr;    // cudaStream_t (CUDA)
  cuda::BlasResources blas_;  // what exec_.blas points at (CUDA)
  bool capturing_ = false;
};

// An executable CUDA graph bound to the stream it was captured on. Move-only; destroying it
// releases the graph (never while a replay of it may still be queued: synchronize first).
class DeviceGraph {
 public:
  DeviceGraph() = default;
  DeviceGraph(DeviceGraph&& other) noexcept;
  DeviceGraph& operator=(DeviceGraph&& other) noexcept;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  ~DeviceGraph();

  bool empty() const { return exec_ == nullptr; }
  // Queues the captured work on the capturing context's stream (asynchronous).
  absl::Status Replay() const;

 private:
  friend class DeviceContext;
  DeviceGraph(void* exec, void* stream) : exec_(exec), stream_(stream) {}
  void* exec_ = nullptr;    // cudaGraphExec_t
  void* stream_ = nullptr;  // cudaStream_t
};

}  // namespace linfer
