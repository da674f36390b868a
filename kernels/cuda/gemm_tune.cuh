// cuBLASLt algorithm tuning for Linear (gemm.cu), LINFER_CUDA_GEMM_TUNE=1 (opt-in until a GPU run
// has timed it). For a product of m rows, m a power of two ≤ kTuneMaxRows (the decode graphs'
// batch buckets: what a decode step replays), the first call of a shape asks the heuristic for up
// to kTuneCandidates algorithms and times each on the call's own operands, cold — the L2 flushed
// (a memset of twice its size) before each of kTuneReps timed runs, the output written to a scratch
// buffer (y is untouched; an accumulating product reads and writes the scratch) — and keeps the
// fastest run's algorithm. Why: at 1–64 rows a product streams its weights once, and on the H200
// (ba0e522) the heuristic's first pick moved the small square matrices (o_proj 0.51, down 0.65 of
// the copy bandwidth) far slower than the large ones (0.95); its other candidates (split-K, other
// tiles) are there to be tried. Never while the stream captures a graph (the heuristic's first
// pick then), nor in a product whose rows are not a bucket (prefill, mixed steps).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace linfer::cuda {

constexpr int64_t kTuneMaxRows = 256;
constexpr int kTuneCandidates = 8;
constexpr int kTuneReps = 3;

// One cublasLtMatmul but its output: D = C = a scratch buffer of the output's layout `c`
// (n × m column-major, leading dimension ldc, f32).
struct LtProduct {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulPreference_t pref;
  const void* w;
  const void* x;
  float beta;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
  int64_t n, m, ldc;
};

// Whether products of m rows have their algorithm tuned: LINFER_CUDA_GEMM_TUNE=1 and m a decode
// bucket (a power of two ≤ kTuneMaxRows).
bool TunedRows(int64_t m);
// Whether `stream` is capturing a graph (no tuning then: its host waits are not allowed).
bool Capturing(cudaStream_t stream);

// The fastest of the heuristic's candidates for `p` (Unimplemented when it has none); falls back to
// its first pick when the tuning cannot run (no memory for the flush buffer, no events: logged).
absl::StatusOr<cublasLtMatmulAlgo_t> TuneAlgo(const LtProduct& p);

}  // namespace linfer::cuda
