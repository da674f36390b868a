// DownloadGathered on CUDA (kernels/transfer.h): device-to-host copies that overlap the stream's
// later work. A slot's state is tens of tensors of a few MB (20.6 MB in all on the Qwen3.5-0.8B
// shape); copied to the host on the engine's stream and waited for, as the prefix cache's
// snapshots were, every one-off request stalled the engine thread — and the stream — for the PCIe
// transfer twice (prompt end and request end; ≈ 10 GB over PCIe for 256 requests).
//   1. On ctx.stream, GatherTensors (memory.cu) copies the views back to back into a device
//      staging buffer (one launch per kMaxZeroRanges views; at device bandwidth, ≈ 10 µs for 20
//      MB): in stream order after the step that wrote them, before any later step overwrites them.
//   2. An event after it; the stager's own stream waits for the event and copies the buffer to
//      the host (pinned memory: the copy engine, beside the compute) and records `done`.
//   3. The PendingCopy waits for `done` (when the host reads the bytes, or they are freed). The
//      buffer goes back to the stager when the copy has run, whether or not anyone waited: the
//      stager records an event of its own after the copy and reclaims the buffers whose event has
//      completed whenever it is asked for one (a snapshot that sits in the prefix cache unread
//      would otherwise hold its buffer until evicted, and after a few of them every snapshot
//      took the synchronous way).
// The staging buffers are allocated with the stager (a few slots' worth: ModelStates asks for up
// to 4, at most 256 MB) and reused; with none free nothing is queued here and the dispatcher
// (transfer.cc) copies on ctx.stream and synchronizes, as before. They are freed with the stager,
// which its copies in flight keep alive.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

class CudaStager : public DownloadStager {
 public:
  CudaStager(cudaStream_t stream, size_t buffer_bytes)
      : stream_(stream), buffer_bytes_(buffer_bytes) {}
  ~CudaStager() override {
    // Every copy in flight holds this stager, so all have been waited for; the stream drained
    // all the same before the buffers go.
    absl::MutexLock lock(&mu_);
    if (cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
    for (void* p : free_) Free(p);
    for (const auto& [p, copied] : in_flight_) {
      if (cudaEventQuery(copied) == cudaSuccess) Free(p);  // a failed copy's buffer is leaked
      (void)cudaEventDestroy(copied);
    }
    (void)cudaGetLastError();
    if (cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
  }
  cudaStream_t stream() const { return stream_; }

  void Add(void* p) {
    absl::MutexLock lock(&mu_);
    free_.push_back(p);
  }
  // A free buffer for `bytes`, or null (none free, or `bytes` exceeds the buffers' size). Buffers
  // whose copy has run come back first.
  void* Acquire(size_t bytes) {
    absl::MutexLock lock(&mu_);
    if (bytes > buffer_bytes_) return nullptr;
    for (size_t i = 0; i < in_flight_.size();) {
      const cudaError_t state = cudaEventQuery(in_flight_[i].second);
      if (state == cudaErrorNotReady) {
        // Not an error, but the runtime may keep it as the last error, which the next launch's
        // check (cudaGetLastError) would then report: cleared when it is ours alone.
        if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
        ++i;
        continue;
      }
      // Done: reusable. Failed: the device may still read it — dropped, never reused (leaked).
      // Only our own failure's error is cleared (not one an unchecked launch left).
      if (state == cudaSuccess) free_.push_back(in_flight_[i].first);
      if (cudaEventDestroy(in_flight_[i].second) != cudaSuccess || state != cudaSuccess) {
        (void)cudaGetLastError();
      }
      in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (free_.empty()) return nullptr;
    void* p = free_.back();
    free_.pop_back();
    return p;
  }
  // A buffer that was acquired and never used (nothing queued reads it).
  void Release(void* p) { Add(p); }
  // A buffer whose copy is queued on stream(): reclaimed by Acquire once `copied` (an event after
  // the copy, owned by the stager from here) has completed.
  void InFlight(void* p, cudaEvent_t copied) {
    absl::MutexLock lock(&mu_);
    in_flight_.emplace_back(p, copied);
  }

 private:
  const cudaStream_t stream_;
  const size_t buffer_bytes_;
  absl::Mutex mu_;
  std::vector<void*> free_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<void*, cudaEvent_t>> in_flight_ ABSL_GUARDED_BY(mu_);
};

class CudaPendingCopy : public PendingCopy {
 public:
  CudaPendingCopy(std::shared_ptr<CudaStager> stager, cudaEvent_t done)
      : stager_(std::move(stager)), done_(done) {}
  ~CudaPendingCopy() override { (void)Wait(); }

  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    if (!waited_) {
      waited_ = true;
      BeforeHostWait();
      const cudaError_t err = cudaEventSynchronize(done_);
      if (err != cudaSuccess) {
        status_.Update(CudaStatus(err, "cudaEventSynchronize (a state's copy to the host)",
                                  __FILE__, __LINE__));
        // The copy may not have run yet: the host memory is freed after this returns.
        if (cudaStreamSynchronize(stager_->stream()) != cudaSuccess) (void)cudaGetLastError();
      }
      if (cudaEventDestroy(done_) != cudaSuccess) (void)cudaGetLastError();
    }
    return status_;
  }

 private:
  const std::shared_ptr<CudaStager> stager_;  // its copy stream outlives the copy
  const cudaEvent_t done_;
  absl::Mutex mu_;
  bool waited_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// After the work queued on `stream` so far: `bytes` of `staging` to `host` on `copy_stream`, and
// `*copied` then `*done` recorded after it there (`*gathered`: the event the copy stream waits
// for). In that order, a wait for `done` implies `copied` has completed: once a PendingCopy has
// been waited for, the stager reclaims its buffer at the next Acquire. A copy into pageable host
// memory (pinned allocation failed) returns only once it has run, after `stream`'s work: an
// op-timing gate is opened first.
absl::Status QueueCopy(cudaStream_t stream, cudaStream_t copy_stream, const void* staging,
                       size_t bytes, void* host, cudaEvent_t* gathered, cudaEvent_t* done,
                       cudaEvent_t* copied) {
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(gathered, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(*gathered, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream, *gathered, 0));
  BeforeHostWait();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, staging, bytes, cudaMemcpyDeviceToHost, copy_stream));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(copied, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(*copied, copy_stream));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(done, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(*done, copy_stream));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<DownloadStager>> MakeDownloadStager(size_t buffer_bytes,
                                                                   int buffers) {
  if (EnvOption("LINFER_CUDA_ASYNC_SNAPSHOTS", {"0", "1"}) != "1") return nullptr;
  // A failure leaves no CUDA error behind (the caller goes on without a stager; the next
  // CheckLaunch would blame an innocent kernel).
  cudaStream_t stream = nullptr;
  if (const cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      err != cudaSuccess) {
    (void)cudaGetLastError();
    return CudaStatus(err, "cudaStreamCreateWithFlags (the snapshots' copy stream)", __FILE__,
                      __LINE__);
  }
  auto stager = std::make_shared<CudaStager>(stream, buffer_bytes);
  for (int i = 0; i < buffers; ++i) {
    absl::StatusOr<void*> p = Allocate(buffer_bytes);
    if (!p.ok()) {
      (void)cudaGetLastError();
      return p.status();
    }
    stager->Add(*p);
  }
  return stager;
}

absl::StatusOr<std::shared_ptr<PendingCopy>> DownloadGathered(
    const ExecContext& ctx, absl::Span<const TensorView> srcs, void* host,
    const std::shared_ptr<DownloadStager>& stager) {
  auto cuda_stager = std::static_pointer_cast<CudaStager>(stager);
  size_t total = 0;
  for (const TensorView& src : srcs) total += src.nbytes();
  void* staging = cuda_stager->Acquire(total);
  if (staging == nullptr) return nullptr;  // no buffer: the caller copies at once
  cudaEvent_t gathered = nullptr, done = nullptr, copied = nullptr;
  // On failure before the copy is queued, the buffer goes back (nothing of ours reads it after the
  // stream's work, which the error path drains).
  auto fail = [&](absl::Status st) -> absl::Status {
    BeforeHostWait();
    const bool drained = cudaStreamSynchronize(Stream(ctx)) == cudaSuccess &&
                         cudaStreamSynchronize(cuda_stager->stream()) == cudaSuccess;
    if (!drained) (void)cudaGetLastError();  // a failed call's own error (CudaStatus clears its)
    if (gathered != nullptr) (void)cudaEventDestroy(gathered);
    if (done != nullptr) (void)cudaEventDestroy(done);
    if (copied != nullptr) (void)cudaEventDestroy(copied);
    if (drained) cuda_stager->Release(staging);  // else the device may still read it: leaked
    return st;
  };
  if (absl::Status st = GatherTensors(Stream(ctx), srcs, static_cast<unsigned char*>(staging));
      !st.ok()) {
    return fail(st);
  }
  if (absl::Status st = QueueCopy(Stream(ctx), cuda_stager->stream(), staging, total, host,
                                  &gathered, &done, &copied);
      !st.ok()) {
    return fail(st);
  }
  (void)cudaEventDestroy(gathered);  // released once the wait that uses it has run
  cuda_stager->InFlight(staging, copied);
  return std::make_shared<CudaPendingCopy>(std::move(cuda_stager), done);
}

}  // namespace linfer::cuda
