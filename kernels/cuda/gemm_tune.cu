// cuBLASLt algorithm tuning (gemm_tune.cuh): each candidate runs once untimed (it must succeed to
// be timed at all), then kTuneReps times, each after an L2 flush, between two events; the fastest
// single run wins (ties: the heuristic's order). The scratch output is the flush buffer's start, so
// the flush also zeroes what an accumulating candidate reads.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/gemm_tune.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/resources.h"

namespace linfer::cuda {
namespace {

std::atomic<int64_t> tuned_products{0}, timed_candidates{0}, untuned_fallbacks{0};

bool TuneEnabled() {
  static const bool on = EnvOption("LINFER_CUDA_GEMM_TUNE", {"0", "1"}) == "1";
  return on;
}

// Owns the tuning's flush buffer and events; frees them on every path out.
struct TuneScratch {
  void* buffer = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~TuneScratch() {
    if (stop != nullptr) cudaEventDestroy(stop);
    if (start != nullptr) cudaEventDestroy(start);
    if (buffer != nullptr) {
      BeforeHostWait();  // cudaFree waits for the device
      cudaFree(buffer);
    }
  }
};

absl::StatusOr<cublasLtMatmulAlgo_t> FirstPick(const cublasLtMatmulHeuristicResult_t* results,
                                               int found) {
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) return results[i].algo;
  }
  return absl::UnimplementedError("cuBLASLt has no algorithm for this Linear");
}

cublasStatus_t Run(const LtProduct& p, const cublasLtMatmulAlgo_t& algo, void* out) {
  const float alpha = 1.0f;
  return cublasLtMatmul(p.handle, p.op, &alpha, p.w, p.a, p.x, p.b, &p.beta, out, p.c, out, p.c,
                        &algo, p.workspace, p.workspace_bytes, p.stream);
}

}  // namespace

bool TunedRows(int64_t m) {
  return TuneEnabled() && m >= 1 && m <= kTuneMaxRows && (m & (m - 1)) == 0;
}

bool Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: do not wait on the host
  }
  return capture != cudaStreamCaptureStatusNone;
}

absl::StatusOr<cublasLtMatmulAlgo_t> TuneAlgo(const LtProduct& p) {
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates];
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      p.handle, p.op, p.a, p.b, p.c, p.c, p.pref, kTuneCandidates, results, &found);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cublasLtMatmulAlgoGetHeuristic failed: ", CublasStatusName(st)));
  }
  ASSIGN_OR_RETURN(const cublasLtMatmulAlgo_t first, FirstPick(results, found));
  tuned_products.fetch_add(1);
  if (found == 1) return first;  // nothing to choose from

  ASSIGN_OR_RETURN(const int l2_bytes, DeviceAttribute(cudaDevAttrL2CacheSize));
  const size_t out_bytes = sizeof(float) * static_cast<size_t>(p.ldc * (p.m - 1) + p.n);
  const size_t bytes = std::max(out_bytes, size_t{2} * static_cast<size_t>(l2_bytes));
  TuneScratch s;
  BeforeHostWait();  // cudaMalloc and the event waits below: an op-timing gate must be open
  if (cudaMalloc(&s.buffer, bytes) != cudaSuccess || cudaEventCreate(&s.start) != cudaSuccess ||
      cudaEventCreate(&s.stop) != cudaSuccess) {
    (void)cudaGetLastError();
    if (untuned_fallbacks.fetch_add(1) == 0) {
      Log(LogLevel::kWarning,
          absl::StrCat("LINFER_CUDA_GEMM_TUNE: no ", bytes,
                       "-byte flush buffer or no timing events; cuBLASLt's heuristic picks the "
                       "algorithms it could not time"));
    }
    return first;
  }
  // The untimed first runs read the scratch too (an accumulating product's C): defined values.
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.buffer, 0, bytes, p.stream));
  float best_ms = std::numeric_limits<float>::infinity();
  cublasLtMatmulAlgo_t best = first;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > p.workspace_bytes) {
      continue;
    }
    if (Run(p, results[i].algo, s.buffer) != CUBLAS_STATUS_SUCCESS) {
      (void)cudaGetLastError();  // this candidate does not run here: the next one
      continue;
    }
    float fastest = std::numeric_limits<float>::infinity();
    bool ran = true;
    for (int rep = 0; rep < kTuneReps && ran; ++rep) {
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.buffer, 0, bytes, p.stream));
      CUDA_RETURN_IF_ERROR(cudaEventRecord(s.start, p.stream));
      ran = Run(p, results[i].algo, s.buffer) == CUBLAS_STATUS_SUCCESS;
      CUDA_RETURN_IF_ERROR(cudaEventRecord(s.stop, p.stream));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.stop));
      float ms = 0.0f;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, s.start, s.stop));
      fastest = std::min(fastest, ms);
    }
    if (!ran) {  // it ran once, then refused: not a candidate after all
      (void)cudaGetLastError();
      continue;
    }
    timed_candidates.fetch_add(1);
    if (fastest < best_ms) {
      best_ms = fastest;
      best = results[i].algo;
    }
  }
  return best;
}

GemmTuneStats GemmTuning() {
  return {TuneEnabled(), tuned_products.load(), timed_candidates.load(), untuned_fallbacks.load()};
}

}  // namespace linfer::cuda
