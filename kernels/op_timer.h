// Per-op GPU time of a stretch of device work, for diagnostics (engine_benchmark --op_times):
// where a decode step's time goes, op by op, inside the running engine, without a profiler.
//
// While a window is open on a thread, every CUDA kernel that thread launches (each launcher's
// CheckLaunch names it) and every cuBLASLt product (labelled with its shape) is followed by a
// timing event on its stream. Right after the window's first launch a gate kernel holds the
// stream until Close (or until the host must wait for the stream: an Upload, Download,
// Synchronize, allocation or free in the window opens the gate first, so nothing deadlocks), so
// the window's launches queue up behind the gate and then run back to back: the time between two
// events is the GPU time of the launch between them, not the host's launch gap. What the window
// measures:
//   - the first launch ran before the gate: counted (`untimed`), not timed;
//   - launches after the gate opened early (a host wait in the window, or kMaxQueued entries
//     queued) are timed with the host's gaps in them (`host_paced`);
//   - work without a CheckLaunch (a memcpy or memset node) is folded into the next launch's time;
//   - programmatic dependent launch cannot overlap kernels across the events: the times are those
//     of kernels run one after another.
// A gate that waited longer than its timeout (2 s) lets the stream go on and counts a timeout;
// that window's times are dropped (its launches ran with the host's gaps, unflagged). What makes
// the host wait behind a closed gate without passing a hook: the launch queue filling up (hence
// kMaxQueued), and CUDA's lazy module loading — the first launch of a kernel (or of a cuBLASLt
// kernel for a new shape) may synchronize the context; run with CUDA_MODULE_LOADING=EAGER, or
// time only steps whose kernels ran before (the engine skips the first decode step of each batch
// size).
//
// A window opened with Gate::kNone has no gate: an event goes on the stream at Open and one after
// each launch, so every launch is timed, host-paced (counted so), with no risk of the host
// waiting behind a gate (a new cuBLASLt shape, a lazy module load). Right for steps whose kernels
// run far longer than the host takes to launch them (a prefill step): while the host stays ahead
// of the stream, its gaps are hidden and each delta is one launch's GPU time.
//
// One window at a time per timer; Open and Close on the same thread (the engine's). Totals and
// Reset may be called from any thread. CUDA only: Create fails on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/context.h"

namespace linfer {

struct OpTime {
  std::string label;     // the kernel's launcher name, or "cublasLt m×n×k <dtype>"
  int64_t launches = 0;  // timed launches
  double ms = 0;         // their GPU time
};

struct OpTimes {
  std::vector<OpTime> ops;  // largest total first
  int64_t windows = 0;      // closed windows
  double ms = 0;            // Σ ops' ms
  int64_t launches = 0;     // Σ ops' launches
  int64_t untimed = 0;      // first launches of windows (before the gate)
  int64_t host_paced = 0;   // timed after the gate opened early or without one (host gaps in)
  int64_t timeouts = 0;     // gates that gave up waiting (those windows' times are dropped)
};

class OpTimer {
 public:
  // The most entries (a kernel and its event: 2; a cuBLASLt product: 3) a window queues behind
  // its gate before opening it: a stream's queue of pending work is finite (about 1,000 entries),
  // a launch into a full queue would block the host, and the gate waits for the host.
  static constexpr int kMaxQueued = 768;

  enum class Gate {
    kHold,  // the gate holds the window's launches until Close or a host wait (the default)
    kNone,  // no gate: every launch timed as the host launches it
  };

  // FailedPrecondition on the CPU (nothing to time: ops run synchronously there); Unavailable
  // in a build without CUDA.
  static absl::StatusOr<std::unique_ptr<OpTimer>> Create(Device device);
  virtual ~OpTimer() = default;

  // Opens a window on the calling thread for work on ctx's device (FailedPrecondition while one
  // is open, or while the stream is being captured into a CUDA graph).
  virtual absl::Status Open(const ExecContext& ctx, Gate gate) = 0;
  absl::Status Open(const ExecContext& ctx) { return Open(ctx, Gate::kHold); }
  // Opens the gate, waits for the window's work and adds its times to the totals.
  virtual absl::Status Close() = 0;
  virtual OpTimes Totals() const = 0;
  virtual void Reset() = 0;
};

}  // namespace linfer
