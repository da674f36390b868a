// cp.async (sm_80+): global → shared copies that bypass the registers, committed in groups and
// waited for by count; shared by the chunked recurrence (chunk_stage.cuh), the decode step and the
// staged tensor-core attention.
#pragma once

namespace linfer::cuda {

// cp.async (sm_80+): 16 bytes global → shared, of which the first `src_bytes` are read and the
// rest zero-filled; bypasses L1 (.cg).
__device__ inline void CpAsync16(void* dst, const void* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}
// cp.async of 8 bytes global → shared (both 8-byte aligned), through L1 (.ca: .cg takes 16 only).
__device__ inline void CpAsync8(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ inline void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most one committed group of this thread is still in flight.
__device__ inline void CpAsyncWaitAllButOne() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}
// Waits until every committed group of this thread has landed.
__device__ inline void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Commits this thread's copies not yet in a group and waits until all of them have landed (one
// instruction: cp.async.wait_all).
__device__ inline void CpAsyncCommitAndWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace linfer::cuda
