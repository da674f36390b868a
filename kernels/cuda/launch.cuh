// Every kernel launch of kernels/cuda/ goes through LaunchKernel, and every kernel begins with
// PdlEnter(): Programmatic Dependent Launch (PDL, compute capability ≥ 9.0), opt-in with
// LINFER_CUDA_PDL=on until a GPU run has passed and timed it.
//
// Why: a decode step is a chain of a few hundred small dependent kernels (≈ 13 per layer), most
// lasting a few µs; between two of them the GPU drains the first grid, then launches and
// schedules the second. With PDL the next kernel in the stream is launched while the current
// one's last blocks still run, and its blocks wait on the GPU (griddepcontrol.wait) instead of
// the launch waiting for the drain: the gap shrinks, inside CUDA graphs too (capture turns the
// attribute into programmatic edges).
//
// Correctness rests on one rule, which tests/cuda_launch_lint.sh checks: PdlEnter() is the
// first statement of every kernel. Its wait returns only once every grid the kernel depends on
// has completed and its writes are visible — for reads (RAW) and for writes into buffers the
// previous kernel reads (WAR) alike. As it precedes any early return, a grid completes only
// after its own predecessors did, so the guarantee carries down the chain (a kernel two launches
// back has finished too). The trigger (launch_dependents) comes after the wait: at most two grids
// of a stream are resident at once, and a dependent's blocks are scheduled only after all of the
// current grid's blocks have started (no starvation). Without the launch attribute both
// instructions are no-ops. Kernels of other libraries (cuBLASLt) and copies keep the ordinary
// stream order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"

namespace linfer::cuda {

__device__ __forceinline__ void PdlEnter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// PdlEnter after `prologue()`, which may only prefetch into L2 (PrefetchL2): a hint that reads no
// value into the kernel and writes nothing, so it is safe against any kernel still running, and
// lets a kernel launched early start streaming data no kernel of the step writes (weights) while
// the previous one drains. The lint accepts any first statement that calls a PdlEnter….
template <typename Prologue>
__device__ __forceinline__ void PdlEnterAfter(Prologue prologue) {
  prologue();
  PdlEnter();
}

// Brings [p, p + bytes) into L2 (one bulk prefetch; p and bytes multiples of 16, sm_90+).
__device__ __forceinline__ void PrefetchL2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// LINFER_CUDA_PDL=on and the current device has compute capability ≥ 9.0 (read once).
bool PdlEnabled();

// LaunchKernel(kernel, grid, block, smem, stream, args...), with the PDL attribute when
// PdlEnabled(). A failed launch is reported by the CheckLaunch that follows it
// (PendingLaunchError).
template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = PdlEnabled() ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) PendingLaunchError() = err;
}

}  // namespace linfer::cuda
