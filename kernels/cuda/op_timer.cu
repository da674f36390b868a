// kernels/op_timer.h on CUDA. A window's first launch is followed by OpGateKernel, which spins on
// a word of mapped pinned host memory until the host writes 1 (Close, a host wait, or
// kMaxQueued queue entries) or 2 s have passed; each launch after it (CheckLaunch, or the cuBLASLt
// product in gemm.cu) is followed by a timing event: events e_0 (after the gate), e_1, …, e_n,
// and launch i's time is e_i − e_{i−1}. The events and the pinned words are reused window after
// window (Close waits for the last event, so nothing of a window is in flight at the next Open).
// A window without a gate (Gate::kNone) records e_0 at Open and counts as opened from the start.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/op_timer.h"

namespace linfer::cuda {
namespace {

constexpr uint64_t kGateTimeoutNs = 2'000'000'000;

__device__ inline uint64_t GlobalNanoseconds() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Holds its stream until *open ≠ 0, or for timeout_ns (then *timed_out = 1).
__global__ void OpGateKernel(const volatile uint32_t* open, uint64_t timeout_ns,
                             volatile uint32_t* timed_out) {
  PdlEnter();
  if (threadIdx.x != 0) return;
  const uint64_t t0 = GlobalNanoseconds();
  while (*open == 0) {
    if (GlobalNanoseconds() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

// The open window of a CudaOpTimer (ActiveOpWindow() points here while it is open).
class OpWindow {
 public:
  cudaStream_t stream = nullptr;
  bool gate_launched = false, gate_open = false;
  // Per event after the gate's (index 0): the launch it closes and whether the gate was open then.
  std::vector<std::string> labels;
  std::vector<bool> paced;
  int64_t untimed = 0;
  int queued = 0;  // stream queue entries since the gate (OpTimer::kMaxQueued)
  absl::Status error;
  // Owned by the timer: events (400 made up front, more on demand) and the gate's two mapped
  // pinned words.
  std::vector<cudaEvent_t>* events = nullptr;
  volatile uint32_t* open_host = nullptr;
  uint32_t* open_device = nullptr;
  volatile uint32_t* timed_out_host = nullptr;
  uint32_t* timed_out_device = nullptr;

  // A timing event on `stream` after what is queued there.
  absl::Status Record(cudaStream_t on) {
    const size_t i = labels.size();
    if (events->size() <= i) {
      cudaEvent_t e = nullptr;
      CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
      events->push_back(e);
    }
    CUDA_RETURN_IF_ERROR(cudaEventRecord((*events)[i], on));
    return absl::OkStatus();
  }
};

void OpenGate(OpWindow& w) {
  if (!w.gate_launched || w.gate_open) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *w.open_host = 1;
  w.gate_open = true;
}

void MarkLaunch(OpWindow& w, std::string_view label, cudaStream_t stream, int entries) {
  if (!w.error.ok()) return;
  if (!w.gate_launched) {  // the first launch: untimed; the gate goes behind it
    ++w.untimed;
    *w.open_host = 0;
    *w.timed_out_host = 0;
    w.stream = stream;
    ActiveOpWindow() = nullptr;  // the gate's own launch is not marked
    LaunchKernel(OpGateKernel, 1, 32, 0, stream,
                 static_cast<const volatile uint32_t*>(w.open_device), kGateTimeoutNs,
                 static_cast<volatile uint32_t*>(w.timed_out_device));
    w.error.Update(CheckLaunch("OpGateKernel"));
    ActiveOpWindow() = &w;
    w.gate_launched = true;
    if (w.error.ok()) w.error.Update(w.Record(stream));
    if (w.error.ok()) {
      w.labels.emplace_back();
      w.paced.push_back(false);
    }
    return;
  }
  if (stream != w.stream) {  // events on two streams do not time what lies between them
    ++w.untimed;
    return;
  }
  w.error.Update(w.Record(stream));
  if (!w.error.ok()) return;
  w.labels.emplace_back(label);
  w.paced.push_back(w.gate_open);
  w.queued += entries;
  if (w.queued >= OpTimer::kMaxQueued) OpenGate(w);
}

namespace {

class CudaOpTimer : public OpTimer {
 public:
  ~CudaOpTimer() override {
    if (ActiveOpWindow() == &window_) (void)Close();
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
    (void)cudaGetLastError();
  }

  absl::Status Init() {
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, 2 * sizeof(uint32_t), cudaHostAllocMapped));
    pinned_ = static_cast<uint32_t*>(p);
    void* d = nullptr;
    CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&d, p, 0));
    pinned_[0] = pinned_[1] = 0;
    // Events made up front (a step of a 24-layer model takes ≈ 320): none is created in a window.
    for (int i = 0; i < 400; ++i) {
      cudaEvent_t e = nullptr;
      CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
      events_.push_back(e);
    }
    window_.events = &events_;
    window_.open_host = pinned_;
    window_.timed_out_host = pinned_ + 1;
    window_.open_device = static_cast<uint32_t*>(d);
    window_.timed_out_device = static_cast<uint32_t*>(d) + 1;
    return absl::OkStatus();
  }

  using OpTimer::Open;
  absl::Status Open(const ExecContext& ctx, Gate gate) override {
    if (ctx.device != Device::kCuda) {
      return absl::FailedPreconditionError("OpTimer::Open: the context is not a CUDA one");
    }
    if (ActiveOpWindow() != nullptr) {
      return absl::FailedPreconditionError(
          "OpTimer::Open: a window is already open on this thread");
    }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(Stream(ctx), &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      return absl::FailedPreconditionError(
          "OpTimer::Open: the stream is being captured into a CUDA graph (a graph's kernels "
          "cannot be timed one by one)");
    }
    window_.stream = Stream(ctx);
    window_.gate_launched = window_.gate_open = false;
    window_.labels.clear();
    window_.paced.clear();
    window_.untimed = 0;
    window_.queued = 0;
    // (nvcc takes an assignment of a [[nodiscard]] class as a discarded value: Status{} swapped)
    absl::Status ok;
    std::swap(window_.error, ok);
    if (gate == Gate::kNone) {      // event 0 now; every launch after it timed, host-paced
      *window_.timed_out_host = 0;  // no gate to time out (Close reads it)
      RETURN_IF_ERROR(window_.Record(window_.stream));
      window_.labels.emplace_back();
      window_.paced.push_back(false);
      window_.gate_launched = window_.gate_open = true;
    }
    ActiveOpWindow() = &window_;
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (ActiveOpWindow() != &window_) {
      return absl::FailedPreconditionError("OpTimer::Close: no window of this timer is open here");
    }
    OpenGate(window_);
    ActiveOpWindow() = nullptr;
    absl::Status st = window_.error;
    const size_t n = window_.labels.size();
    // The window's work done (a failed window's too: the next one rewrites the gate's words).
    const cudaError_t err = n > 0                   ? cudaEventSynchronize(events_[n - 1])
                            : window_.gate_launched ? cudaStreamSynchronize(window_.stream)
                                                    : cudaSuccess;
    if (err != cudaSuccess) st.Update(CudaStatus(err, "waiting for a window", __FILE__, __LINE__));
    if (!st.ok()) return st;
    // The host waited behind the gate (a full queue, a lazy module load): the launches ran with
    // its gaps in them, unflagged; the window's times are dropped, its launches counted untimed.
    const bool timed_out = window_.gate_launched && *window_.timed_out_host != 0;
    const size_t timed = timed_out || n == 0 ? 0 : n - 1;  // event 0 follows the gate
    std::vector<float> ms(timed);
    for (size_t i = 0; i < timed; ++i) {
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms[i], events_[i], events_[i + 1]));
    }
    absl::MutexLock lock(&mu_);
    ++counts_.windows;
    counts_.timeouts += timed_out;
    counts_.untimed += window_.untimed + (timed_out && n > 0 ? static_cast<int64_t>(n) - 1 : 0);
    for (size_t i = 0; i < timed; ++i) {
      OpTime& t = totals_[window_.labels[i + 1]];
      t.label = window_.labels[i + 1];
      ++t.launches;
      t.ms += ms[i];
      counts_.host_paced += window_.paced[i + 1];
    }
    return absl::OkStatus();
  }

  OpTimes Totals() const override {
    absl::MutexLock lock(&mu_);
    OpTimes out = counts_;
    for (const auto& [label, t] : totals_) {
      out.ops.push_back(t);
      out.ms += t.ms;
      out.launches += t.launches;
    }
    std::stable_sort(out.ops.begin(), out.ops.end(),
                     [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
    return out;
  }

  void Reset() override {
    absl::MutexLock lock(&mu_);
    totals_.clear();
    counts_ = OpTimes{};
  }

 private:
  std::vector<cudaEvent_t> events_;
  uint32_t* pinned_ = nullptr;  // [open, timed_out], mapped
  OpWindow window_;
  mutable absl::Mutex mu_;
  std::map<std::string, OpTime> totals_ ABSL_GUARDED_BY(mu_);
  OpTimes counts_ ABSL_GUARDED_BY(mu_);  // windows, untimed, host_paced, timeouts
};

}  // namespace

absl::StatusOr<std::unique_ptr<OpTimer>> CreateOpTimer() {
  auto timer = std::make_unique<CudaOpTimer>();
  RETURN_IF_ERROR(timer->Init());
  return timer;
}

}  // namespace linfer::cuda
