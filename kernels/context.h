// The execution context every op takes first: which device runs it, on which stream, with which
// per-step scratch arena and BLAS handle, and where host↔device traffic is counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace linfer {

// Bytes and calls that crossed between host and device (Upload / Download). Thread-safe.
struct TransferStats {
  std::atomic<int64_t> h2d_bytes{0}, d2h_bytes{0}, h2d_calls{0}, d2h_calls{0};
  void Reset() { h2d_bytes = d2h_bytes = h2d_calls = d2h_calls = 0; }
};

// Scratch memory for one step: bump allocation from device blocks, all released by Reset().
// After a step that needed more than one block, Reset() coalesces them into one block, so a
// steady workload allocates nothing and keeps stable addresses (CUDA graphs rely on it).
// Not thread-safe: one per engine thread.
class Arena {
 public:
  explicit Arena(Device device) : device_(device) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  // A view of uninitialised scratch, 256-byte aligned, valid until Reset() (or a Rewind to a mark
  // taken before it).
  absl::StatusOr<TensorView> Allocate(DType dtype, Shape shape);
  void Reset();
  Device device() const { return device_; }
  int64_t capacity_bytes() const;

  // Scratch that one op needs only while its own kernels run: Rewind(Mark()) hands back what was
  // allocated after the mark, for the next op to reuse. On a device, only ops that run after in
  // the same stream may reuse it (all of a step's ops share one stream). A rewind across a new
  // block keeps that block's memory (used up to the end of the step).
  struct Mark {
    size_t blocks = 0;
    int64_t used = 0, live = 0;
  };
  Mark mark() const { return {blocks_.size(), used_, live_bytes_}; }
  void Rewind(const Mark& m);
  // The most bytes live at once since Reset (what one block must hold for the step to fit).
  int64_t peak_bytes() const { return peak_bytes_; }
  // With nothing allocated (after Reset): makes the one block hold at least `bytes` (a new block
  // replaces a smaller one), so that steps up to that size allocate nothing.
  absl::Status Reserve(int64_t bytes);

 private:
  // Replaces the blocks with one of at least `bytes` (kMinBlock, aligned); none on failure.
  absl::Status OneBlock(int64_t bytes);

  Device device_;
  std::vector<Tensor> blocks_;  // [bytes] each; the last one is being filled
  int64_t used_ = 0;            // bytes used in the last block
  int64_t live_bytes_ = 0;      // bytes allocated since Reset and not rewound
  int64_t peak_bytes_ = 0;      // max of live_bytes_ since Reset
};

struct ExecContext {
  Device device = Device::kCpu;
  void* stream = nullptr;              // cudaStream_t on CUDA; null: the default stream
  Arena* arena = nullptr;              // per-step scratch (ops that need temporaries allocate here)
  void* blas = nullptr;                // cublasLt handle on CUDA
  TransferStats* transfers = nullptr;  // optional accounting of Upload / Download
  // Every token's row computed by the same arithmetic whatever else shares the step (how many
  // rows, which segment split): the CPU's GEMMs use the batch-invariant kernel and its recurrences
  // run token by token. A turn resumed from a saved state is then bit-identical to computing the
  // whole conversation cold. CPU only (CUDA ignores it); prefill is slower.
  bool batch_invariant = false;
  // CPU: ask producers of matmul inputs for bf16 where the weights are bf16, as CUDA does with
  // LINFER_CUDA_BF16_INPUTS=1 (kernels/gemm.h MatmulInputDType) — so the models' bf16 plumbing
  // runs in tests without a GPU. CUDA ignores it (the environment decides there).
  bool bf16_matmul_inputs = false;
  // CPU: the models fold their blocks' input norms into the projections after them
  // (kernels/gemm.h RmsNormLinear), as CUDA does where its GEMV runs — so the plumbing runs in
  // tests without a GPU (on the CPU the fold is the same two ops). CUDA ignores it.
  bool fold_input_norms = false;
};

// A CPU context over `arena` (may be null for ops that need no scratch).
inline ExecContext CpuContext(Arena* arena = nullptr) {
  ExecContext ctx;
  ctx.arena = arena;
  return ctx;
}

// Rewinds the context's arena (if any) to where it stood at construction when it goes out of
// scope (Arena::Rewind's rules).
class ScratchScope {
 public:
  explicit ScratchScope(const ExecContext& ctx);
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  Arena* arena_;
  Arena::Mark mark_;
};

// Scratch of `shape` from the context's arena (InternalError without one).
absl::StatusOr<TensorView> Scratch(const ExecContext& ctx, DType dtype, Shape shape);

}  // namespace linfer
