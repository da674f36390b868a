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
// Correctness rests on one rule, which tests/kernels/cuda_launch_lint.py checks: PdlEnter() (or
// PdlEnterAfterPrefetchL2) is the first statement of every kernel. Its wait returns only once every
// grid the kernel depends on has completed and its writes are visible — for reads (RAW) and for
// writes into buffers the previous kernel reads (WAR) alike. As it precedes any early return, a
// grid completes only after its own predecessors did, so the guarantee carries down the chain (a
// kernel two launches back has finished too). The trigger (launch_dependents) comes after the wait:
// at most two grids of a stream are resident at once, and a dependent's blocks are scheduled only
// after all of the current grid's blocks have started (no starvation). Without the launch attribute
// both instructions are no-ops. Kernels of other libraries (cuBLASLt) and copies keep the ordinary
// stream order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_check.cuh"

namespace linfer::cuda {

__device__ __forceinline__ void PdlEnter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// PdlEnter after bringing [p, p + bytes) into L2 (bytes 0: nothing; p and bytes multiples of 16):
// a hint that reads no value into the kernel and writes nothing, so it is safe against any kernel
// still running, and lets a kernel launched early start streaming data that no kernel of a step
// writes (weights) while the previous one drains. The arguments may only be computed from the
// kernel's parameters and thread indices (no memory reads before the wait).
__device__ __forceinline__ void PdlEnterAfterPrefetchL2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes > 0) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)),
                 "r"(bytes)
                 : "memory");
  }
#endif
  PdlEnter();
}
struct L2Range {  // [p, p + bytes) for PdlEnterAfterPrefetchL2 (bytes 0: none)
  const void* p;
  unsigned bytes;
};
__device__ __forceinline__ void PdlEnterAfterPrefetchL2(L2Range r) {
  PdlEnterAfterPrefetchL2(r.p, r.bytes);
}

// LINFER_CUDA_PDL=on, the current device has compute capability ≥ 9.0 and the kernels' code was
// compiled for it (PTX 9.0 or later: built for an older architecture and JIT-compiled, PdlEnter
// would be empty and every launch would race). Read once.
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
  LastLaunchStream() = stream;
}

}  // namespace linfer::cuda
